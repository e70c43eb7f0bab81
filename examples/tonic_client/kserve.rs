//! KServe v2's gRPC inference protocol (`grpc_predict_v2.proto`, package
//! `inference`): the messages of `ModelInfer`, `ServerLive` and
//! `ModelReady`, derived with prost's macros by hand — the field numbers
//! are the proto's — so that the example builds without a build script or
//! `protoc`. Fields the example does not use are here all the same, so
//! that a real server's messages decode whole.

use std::collections::HashMap;

/// The service's name (`package.Service`).
pub const SERVICE: &str = "inference.GRPCInferenceService";
/// `rpc ModelInfer(ModelInferRequest) returns (ModelInferResponse)`.
pub const MODEL_INFER_PATH: &str = "/inference.GRPCInferenceService/ModelInfer";
/// `rpc ServerLive(ServerLiveRequest) returns (ServerLiveResponse)`.
pub const SERVER_LIVE_PATH: &str = "/inference.GRPCInferenceService/ServerLive";
/// `rpc ModelReady(ModelReadyRequest) returns (ModelReadyResponse)`.
pub const MODEL_READY_PATH: &str = "/inference.GRPCInferenceService/ModelReady";

/// `ServerLiveRequest {}`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerLiveRequest {}

/// `ServerLiveResponse { bool live = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerLiveResponse {
    /// The server is live.
    #[prost(bool, tag = "1")]
    pub live: bool,
}

/// `ModelReadyRequest { string name = 1; string version = 2; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelReadyRequest {
    /// The model's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The model's version (empty: the server's choice).
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `ModelReadyResponse { bool ready = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelReadyResponse {
    /// The model is loaded and ready.
    #[prost(bool, tag = "1")]
    pub ready: bool,
}

/// An inference request: the model, its input tensors, the outputs
/// wanted.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelInferRequest {
    /// The model to run: the balancer's model ID.
    #[prost(string, tag = "1")]
    pub model_name: String,
    /// The model's version (empty: the server's choice).
    #[prost(string, tag = "2")]
    pub model_version: String,
    /// The request's ID, echoed in the response.
    #[prost(string, tag = "3")]
    pub id: String,
    /// Request parameters.
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    /// The input tensors.
    #[prost(message, repeated, tag = "5")]
    pub inputs: Vec<InferInputTensor>,
    /// The outputs wanted (none: all).
    #[prost(message, repeated, tag = "6")]
    pub outputs: Vec<InferRequestedOutputTensor>,
    /// Input contents as raw bytes, one entry per input, instead of
    /// `InferInputTensor::contents`.
    #[prost(bytes = "vec", repeated, tag = "7")]
    pub raw_input_contents: Vec<Vec<u8>>,
}

/// `ModelInferRequest.InferInputTensor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferInputTensor {
    /// The tensor's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its data type (`FP32`, `INT64`, `BYTES`, …).
    #[prost(string, tag = "2")]
    pub datatype: String,
    /// Its shape.
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
    /// Tensor parameters.
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    /// Its contents, typed.
    #[prost(message, optional, tag = "5")]
    pub contents: Option<InferTensorContents>,
}

/// `ModelInferRequest.InferRequestedOutputTensor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferRequestedOutputTensor {
    /// The output's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Output parameters.
    #[prost(map = "string, message", tag = "2")]
    pub parameters: HashMap<String, InferParameter>,
}

/// An inference response: the output tensors.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelInferResponse {
    /// The model that ran.
    #[prost(string, tag = "1")]
    pub model_name: String,
    /// Its version.
    #[prost(string, tag = "2")]
    pub model_version: String,
    /// The request's ID.
    #[prost(string, tag = "3")]
    pub id: String,
    /// Response parameters.
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    /// The output tensors.
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<InferOutputTensor>,
    /// Output contents as raw bytes, one entry per output.
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub raw_output_contents: Vec<Vec<u8>>,
}

/// `ModelInferResponse.InferOutputTensor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferOutputTensor {
    /// The tensor's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its data type.
    #[prost(string, tag = "2")]
    pub datatype: String,
    /// Its shape.
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
    /// Tensor parameters.
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    /// Its contents, typed.
    #[prost(message, optional, tag = "5")]
    pub contents: Option<InferTensorContents>,
}

/// A parameter's value: `oneof parameter_choice`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferParameter {
    /// The value.
    #[prost(oneof = "ParameterChoice", tags = "1, 2, 3")]
    pub parameter_choice: Option<ParameterChoice>,
}

/// `InferParameter.parameter_choice`.
#[derive(Clone, PartialEq, prost::Oneof)]
// Named as prost's generated code names them, after the proto's fields.
#[allow(clippy::enum_variant_names)]
pub enum ParameterChoice {
    /// `bool bool_param = 1`.
    #[prost(bool, tag = "1")]
    BoolParam(bool),
    /// `int64 int64_param = 2`.
    #[prost(int64, tag = "2")]
    Int64Param(i64),
    /// `string string_param = 3`.
    #[prost(string, tag = "3")]
    StringParam(String),
}

/// A tensor's contents, one repeated field per data type, flattened in
/// row-major order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferTensorContents {
    /// `BOOL`.
    #[prost(bool, repeated, tag = "1")]
    pub bool_contents: Vec<bool>,
    /// `INT8`, `INT16`, `INT32`.
    #[prost(int32, repeated, tag = "2")]
    pub int_contents: Vec<i32>,
    /// `INT64`.
    #[prost(int64, repeated, tag = "3")]
    pub int64_contents: Vec<i64>,
    /// `UINT8`, `UINT16`, `UINT32`.
    #[prost(uint32, repeated, tag = "4")]
    pub uint_contents: Vec<u32>,
    /// `UINT64`.
    #[prost(uint64, repeated, tag = "5")]
    pub uint64_contents: Vec<u64>,
    /// `FP32`.
    #[prost(float, repeated, tag = "6")]
    pub fp32_contents: Vec<f32>,
    /// `FP64`.
    #[prost(double, repeated, tag = "7")]
    pub fp64_contents: Vec<f64>,
    /// `BYTES`.
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub bytes_contents: Vec<Vec<u8>>,
}

impl ModelInferRequest {
    /// A request for `model` with one `FP32` input `input0` of shape
    /// `[values.len()]`.
    pub fn fp32(model: &str, id: &str, values: &[f32]) -> Self {
        let input = InferInputTensor {
            name: "input0".to_owned(),
            datatype: "FP32".to_owned(),
            shape: vec![i64::try_from(values.len()).unwrap_or(i64::MAX)],
            contents: Some(InferTensorContents {
                fp32_contents: values.to_vec(),
                ..Default::default()
            }),
            ..Default::default()
        };
        Self {
            model_name: model.to_owned(),
            id: id.to_owned(),
            inputs: vec![input],
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    /// The wire bytes of a request, by hand: the field numbers are
    /// KServe's.
    #[test]
    fn field_numbers_are_the_protos() {
        let req = ModelInferRequest {
            model_name: "m".to_owned(),
            raw_input_contents: vec![vec![7]],
            ..Default::default()
        };
        // Field 1, length-delimited: tag (1 << 3) | 2 = 0x0a; field 7: 0x3a.
        assert_eq!(req.encode_to_vec(), [0x0a, 1, b'm', 0x3a, 1, 7]);
        let contents = InferTensorContents {
            fp32_contents: vec![1.0],
            ..Default::default()
        };
        // Field 6, packed: 0x32, 4 bytes, 1.0f32 little-endian.
        assert_eq!(contents.encode_to_vec(), [0x32, 4, 0, 0, 0x80, 0x3f]);
        let rsp = ModelInferResponse {
            raw_output_contents: vec![vec![1]],
            ..Default::default()
        };
        // Field 6 of the response: 0x32.
        assert_eq!(rsp.encode_to_vec(), [0x32, 1, 1]);
        assert!(MODEL_INFER_PATH.starts_with(&format!("/{SERVICE}/")));
    }

    #[test]
    fn a_request_round_trips() {
        let req = ModelInferRequest::fp32("resnet-50", "r1", &[0.5, -1.25]);
        let back = ModelInferRequest::decode(&*req.encode_to_vec()).unwrap();
        assert_eq!(back, req);
    }
}
