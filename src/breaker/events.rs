//! What a breaker reports when its state changes.

use std::fmt;
use std::sync::Arc;

use super::state::values::Transition;

/// Receives a breaker's transitions (in the manner of tower-http's
/// `OnResponse`): implemented for `()` (nothing) and for closures
/// `Fn(&Transition)`. The same hook serves a standalone [`Breaker`], a
/// [`CircuitBreakerLayer`] and the balancer's backend breakers (whose
/// transitions carry the backend in [`Transition::backend`]). Called after
/// the breaker's lock is released, on the task whose admission or outcome
/// caused the transition; keep it short (count, log, send to a channel).
///
/// [`Breaker`]: crate::breaker::Breaker
/// [`CircuitBreakerLayer`]: crate::breaker::CircuitBreakerLayer
pub trait OnTransition: Send + Sync + 'static {
    /// Called once per transition.
    fn on_transition(&self, transition: &Transition);
}

impl OnTransition for () {
    fn on_transition(&self, _: &Transition) {}
}

impl<H: OnTransition + ?Sized> OnTransition for Arc<H> {
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

/// A stored [`OnTransition`], shared by the breakers a layer or a
/// balancer makes. Compared by identity (two configs are equal when they
/// share the same hook).
#[derive(Clone)]
pub(crate) struct Hook(Arc<dyn OnTransition>);

impl Hook {
    pub(crate) fn new(hook: impl OnTransition) -> Self {
        Self(Arc::new(hook))
    }

    pub(crate) fn call(&self, transition: &Transition) {
        self.0.on_transition(transition)
    }
}

impl fmt::Debug for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hook")
    }
}

impl PartialEq for Hook {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.0), Arc::as_ptr(&other.0))
    }
}
