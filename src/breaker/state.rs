//! The breaker's state machine: pure logic, no clock, no locks, no IO.
//!
//! * **Closed → Open** when the window holds at least `minimum_calls` and
//!   its failure rate (failures and overloads over calls) or its slow-call
//!   rate (slow calls over timed calls) reaches its threshold; or, if set,
//!   after `consecutive_failures` failures in a row (overloads neither
//!   count nor break the run).
//! * **Open → HalfOpen** once the open duration has passed (on the next
//!   admission). The `n`-th reopening in a row waits up to `open_duration ×
//!   2^n`, at most `max_open_duration`; with jitter on (the default) each
//!   open time is drawn in `[d / 2, d]` of that ceiling `d` ("equal
//!   jitter").
//! * **HalfOpen** lets `half_open_permits` probe calls through. As soon as
//!   their failures, or their slow calls, alone reach the threshold share
//!   of the permits it opens again; when all have reported below both
//!   thresholds it closes, with an empty window and the backoff reset. A
//!   round not finished within `half_open_max_wait` opens it again.
//! * **Modes** set by hand: forced open (nothing admitted), disabled
//!   (everything admitted, nothing counted), metrics only (everything
//!   admitted and counted, no transition), normal.
//!
//! Every admission returns a [`Ticket`](values::Ticket) stamped with the current epoch; the
//! epoch advances on every transition, so an outcome from an earlier state
//! (a call admitted while closed that ends after the breaker opened) is not
//! counted against the new state. A ticket given back without an outcome
//! (a cancelled call) frees its half-open permit and counts nothing.

pub(super) mod machine;
pub(super) mod values;

#[cfg(test)]
mod model_check;
