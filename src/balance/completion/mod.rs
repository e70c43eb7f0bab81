//! What happens when a picked request ends: its guard takes the outcome
//! back to the backend's breaker, health, latency estimate and residency.
//!
//! | File | Does |
//! |---|---|
//! | `guard.rs` | [`Guard`](guard::Guard): in flight from the pick until the outcome is recorded (dropped: cancelled) |
//! | `finish.rs` | [`Finish`](finish::Finish): what the balancer reads of the answer — an HTTP response's head ([`AtEndOfBody`](crate::classify::AtEndOfBody)), or any response classified when it arrives ([`AtResponse`](crate::classify::AtResponse)) — before handing it on through `classify`'s completion mechanism |
//! | `body.rs` | [`ResponseBody`](body::ResponseBody): the response body whose end (last frame, trailers, error, drop) is the request's end |
//! | `not_found.rs` | what a backend's 404 says is missing (the model, a version, the route), read from its body's first bytes |

pub(crate) mod body;
pub(crate) mod finish;
pub(crate) mod guard;
pub(crate) mod not_found;
