//! What happens when a picked request ends: its guard takes the outcome
//! back to the backend's breaker, health, latency estimate and residency.
//!
//! | File | Does |
//! |---|---|
//! | `guard.rs` | [`Guard`](guard::Guard): in flight from the pick until the outcome is recorded (dropped: cancelled) |
//! | `body.rs` | [`ResponseBody`](body::ResponseBody): the response body whose end (last frame, trailers, error, drop) is the request's end |

pub(crate) mod body;
pub(crate) mod guard;
