//! What an attempt's result is to the race: an answer, which wins, a
//! failure or an overload; and whether a failed first attempt is worth a
//! backup at once.

use super::refusal::{refused, shed};
use crate::classify::{Classified, Classify, Outcome};
use crate::error::{BoxError, InvalidRoute, PayloadTooLarge};

/// What an attempt's result is to the race.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// An answer, which wins: classified [`Outcome::Success`] or
    /// [`Outcome::Ignored`] (the caller's own 4xx: another backend would
    /// say the same), or deferred to the end of its body (a success as far
    /// as its head goes).
    Answer,
    /// A failure: an error, or a response classified [`Outcome::Failure`].
    /// It waits for an attempt still running, and before the backup's
    /// delay sends the backup at once.
    Failure,
    /// A backend that shed the call ([`Outcome::Overload`]: 429, gRPC
    /// `RESOURCE_EXHAUSTED`): it waits for an attempt still running, but
    /// never sends a backup — one during an overload adds load where there
    /// is no room for it.
    Overload,
}

/// The verdict on `result` by `classify`. Errors are failures, except the
/// balancer's [`Overloaded`](crate::error::Overloaded) (its admission
/// shed the call): an overload.
pub(super) fn verdict<C, R>(classify: &C, result: &Result<R, BoxError>) -> Verdict
where
    C: Classify<R, BoxError>,
{
    match result {
        Err(error) if shed(error) => Verdict::Overload,
        Err(_) => Verdict::Failure,
        Ok(response) => match classify.classify_response(response) {
            Classified::Ready(Outcome::Failure) => Verdict::Failure,
            Classified::Ready(Outcome::Overload) => Verdict::Overload,
            _ => Verdict::Answer,
        },
    }
}

/// Whether a failed first attempt is worth a backup sent at once: a
/// response the classifier calls a failure (5xx by default), or an error
/// other than the balancer's refusals that every backend would give alike
/// (no backend, an unreadable route or body, a model no repository
/// knows, a backup with nowhere to go, every backend at its admission
/// limit).
pub(super) fn worth_a_backup<R>(result: &Result<R, BoxError>) -> bool {
    match result {
        Ok(_) => true,
        Err(error) => {
            !(error.is::<InvalidRoute>() || error.is::<PayloadTooLarge>() || refused(error))
        }
    }
}
