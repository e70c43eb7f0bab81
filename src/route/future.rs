//! The response future of [`ModelFromBody`](super::ModelFromBody), as
//! tower names a middleware's future (`module::future::ResponseFuture`).

pub use super::body::service::ResponseFuture;
