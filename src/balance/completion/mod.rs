//! What happens when a picked request ends: its guard takes the outcome
//! back to the backend's breaker, health, latency estimate and residency.
//!
//! | File | Does |
//! |---|---|
//! | `guard.rs` | [`Guard`](guard::Guard): in flight from the pick until the outcome is recorded (dropped: cancelled) |
//! | `finish.rs` | [`Finish`](finish::Finish): the answer handed on — an HTTP response's head read and its body wrapped ([`AtEndOfBody`](crate::classify::AtEndOfBody)), or any response classified when it arrives ([`AtResponse`](crate::classify::AtResponse)) |
//! | `body.rs` | [`ResponseBody`](body::ResponseBody): the response body whose end (last frame, trailers, error, drop) is the request's end |

pub(crate) mod body;
pub(crate) mod finish;
pub(crate) mod guard;
