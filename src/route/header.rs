//! The names of the route headers a request's route is read from.

use http::header::HeaderName;

/// Header carrying the model ID.
pub const MODEL_ID_HEADER: HeaderName = HeaderName::from_static("x-model-id");
/// Header carrying the request kind (`inference` or `update`).
pub const REQUEST_KIND_HEADER: HeaderName = HeaderName::from_static("x-request-kind");
/// Header carrying the urgency (`normal`, `high` or `critical`).
pub const URGENCY_HEADER: HeaderName = HeaderName::from_static("x-urgency");
