//! The stack's errors as gRPC statuses.
//!
//! tonic turns an error of the service under its client into `UNKNOWN`,
//! keeping the error as the status's source; the crate's typed errors say
//! more than that:
//!
//! | error | status |
//! | --- | --- |
//! | `InvalidRoute` (no or a bad model ID) | `INVALID_ARGUMENT`: the caller's |
//! | `NoHealthyBackend`, `BreakerOpen` | `UNAVAILABLE`: retry later |
//! | `PayloadTooLarge` (a message over the hedged client's limit) | `RESOURCE_EXHAUSTED`, as gRPC says of a message larger than the maximum |
//! | anything else | as tonic made it |
//!
//! The crate's error stays the source, so a caller can still
//! `status.source()?.downcast_ref::<NoHealthyBackend>()`.

use std::error::Error;
use std::sync::Arc;

use tonic::{Code, Status};
use tower_model_balance::error::{BreakerOpen, InvalidRoute, NoHealthyBackend, PayloadTooLarge};

/// The status for `status` as tonic's client returned it (see the module
/// docs).
pub fn status(status: Status) -> Status {
    if status.code() != Code::Unknown {
        return status;
    }
    let Some(source) = status.source() else {
        return status;
    };
    // The typed error, copied: `Status` lends its source, never gives it.
    let (code, source): (Code, Arc<dyn Error + Send + Sync>) =
        if let Some(error) = source.downcast_ref::<InvalidRoute>() {
            (Code::InvalidArgument, Arc::new(error.clone()))
        } else if let Some(error) = source.downcast_ref::<NoHealthyBackend>() {
            (Code::Unavailable, Arc::new(error.clone()))
        } else if let Some(error) = source.downcast_ref::<BreakerOpen>() {
            (Code::Unavailable, Arc::new(*error))
        } else if let Some(error) = source.downcast_ref::<PayloadTooLarge>() {
            (Code::ResourceExhausted, Arc::new(*error))
        } else {
            return status;
        };
    let mut mapped = Status::new(code, status.message().to_owned());
    mapped.set_source(source);
    mapped
}

/// A `model_name` that is no valid model ID: `INVALID_ARGUMENT` naming the
/// field, with `InvalidRoute` as the source.
pub fn invalid_model_name(error: InvalidRoute) -> Status {
    let mut status = Status::invalid_argument(format!("model_name: {}", error.reason));
    status.set_source(Arc::new(error));
    status
}
