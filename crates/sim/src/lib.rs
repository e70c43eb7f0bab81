//! Simulated model servers: real HTTP servers on loopback that behave like a
//! fleet of GPU model servers, for the examples and tests of
//! [`tower-model-balance`](tower_model_balance) and for trying a stack
//! before production. A companion crate, as `tower-test` is to `tower`: the
//! middleware crate does not carry it.
//!
//! ```
//! use http_body_util::{BodyExt, Full};
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use tower_model_balance_sim::{protocol, ModelServer, ServerConfig};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let server = ModelServer::start("node-0", ServerConfig::default()).await.unwrap();
//! let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
//! let uri = format!("http://{}{}", server.addr(), protocol::infer_path("resnet-50"));
//! let req = http::Request::post(uri).body(Full::from("{}")).unwrap();
//! let rsp = client.request(req).await.unwrap();
//! assert_eq!(rsp.status(), 200);
//! assert_eq!(rsp.headers()[protocol::COLD_LOAD_HEADER], "true");
//! assert_eq!(rsp.headers()[protocol::RESIDENT_MODELS_HEADER], "resnet-50");
//! assert_eq!(server.stats().cold_loads, 1);
//! assert_eq!(server.resident_models(), ["resnet-50"]);
//! # }
//! ```
//!
//! Each [`ModelServer`] keeps a few models resident (LRU), serves a bounded
//! number of requests at once (the rest queue), pays a cold load that holds a
//! serving slot when a model is not resident, and can be put into a
//! [`Fault`] while it runs — or killed and started again on its port
//! ([`ModelServer::stop`], [`ModelServer::start_on`]). It speaks a subset of the KServe v2 protocol,
//! Triton's repository index, the OpenAI-compatible inference routes
//! (chat completions, completions, embeddings, responses), the OpenAI model list and
//! Prometheus metrics
//! in vLLM's and Triton's names, so the probers of
//! `tower_model_balance::health::probe` (feature `probe`) can ask it what they ask real servers; all of it is
//! described in [`protocol`].
//!
//! In the [explicit mode](ServerConfigBuilder::explicit_load) a server
//! behaves like Triton with `--model-control-mode=explicit`, MLServer, or
//! vLLM serving LoRA adapters: a request for a model that is not loaded
//! is answered 404, and models load only when a client asks through the
//! KServe v2 repository API or vLLM's LoRA adapter routes — one load per
//! model at a time, with [`ServerStats`] counting the load calls so that
//! a client's single-flighting can be checked from the server's side.
//!
//! The `sims` binary (`src/main.rs`) starts a few as a program, for a
//! gateway to be pointed at: `sims --count 3` prints each as `NAME=URL`,
//! a gateway's `--backend` value, and serves until Ctrl-C or SIGTERM.

#![deny(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![forbid(unsafe_code)]

mod config;
mod control;
mod fault;
mod handle;
mod loads;
mod lora;
mod metrics;
mod openai;
mod prefill;
mod prefix_cache;
mod prompt;
pub mod protocol;
mod queue;
mod reply;
mod repository;
mod residency;
mod server;
mod state;
mod stats;
mod stream;
mod wire;

pub use self::config::{InferenceTimes, ServerConfig, ServerConfigBuilder};
pub use self::fault::Fault;
pub use self::server::ModelServer;
pub use self::stats::ServerStats;
