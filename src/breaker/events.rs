//! What a breaker reports when its state changes.

use super::state::values::Transition;

/// Receives a breaker's transitions (in the manner of tower-http's
/// `OnResponse`): implemented for `()` (nothing) and for closures
/// `Fn(&Transition)`. Called after the breaker's lock is released, on the
/// task whose admission or outcome caused the transition; keep it short
/// (count, log, send to a channel).
pub trait OnTransition: Send + Sync + 'static {
    /// Called once per transition.
    fn on_transition(&self, transition: &Transition);
}

impl OnTransition for () {
    fn on_transition(&self, _: &Transition) {}
}

impl<H: OnTransition + ?Sized> OnTransition for std::sync::Arc<H> {
    fn on_transition(&self, transition: &Transition) {
        (**self).on_transition(transition)
    }
}

impl<F> OnTransition for F
where
    F: Fn(&Transition) + Send + Sync + 'static,
{
    fn on_transition(&self, transition: &Transition) {
        self(transition)
    }
}
