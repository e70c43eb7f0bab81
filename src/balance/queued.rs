//! A request waiting for room under admission: queued by urgency, it
//! retries its pick when a request that ends wakes it, until it gets a
//! backend, its wait runs out, or a more urgent request takes its place.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

use crate::balance::choose::decide::{Local, Picked, Timed};
use crate::balance::error::Overloaded;
use crate::balance::mix::mix;
use crate::balance::refused::Refused;
use crate::balance::state::clock::Now;
use crate::balance::state::queue::Waiter;
use crate::balance::state::shared::Shared;
use crate::error::BoxError;
use crate::route::Routable;

/// One queued request, boxed in its response future (only saturation
/// builds one).
pub(crate) struct Queued<E, Req> {
    shared: Arc<Shared<E>>,
    local: Local,
    /// SplitMix64's state: the retried picks' P2C draws.
    seed: u64,
    req: Option<Req>,
    waiter: Arc<Waiter>,
    until: Pin<Box<Sleep>>,
    arrived: Instant,
    /// What it fails with, once it gives up (its `waited` set then).
    shed: Overloaded,
}

impl<E, Req> Queued<E, Req> {
    /// Queues `req`, refused as `shed` at `arrived`, to wait at most its
    /// urgency's wait; `None` (and `req` back) when the queue has no place.
    pub(crate) fn enter(
        shared: &Arc<Shared<E>>,
        req: Req,
        shed: Overloaded,
        seed: u64,
    ) -> Result<Self, (Req, Overloaded)> {
        let snapshot = shared.snapshot.load();
        let fleet = &snapshot.table.fleet;
        let wait = match fleet.admission() {
            Some(admission) => admission.max_wait(shed.urgency),
            None => return Err((req, shed)),
        };
        if wait.is_zero() {
            return Err((req, shed));
        }
        let model = shed.model.hash64();
        let Ok(waiter) = fleet
            .queue
            .enter(shed.urgency, model, std::task::Waker::noop())
        else {
            return Err((req, shed));
        };
        let arrived = Instant::now();
        Ok(Self {
            shared: shared.clone(),
            local: Local::for_retries(seed),
            seed,
            req: Some(req),
            waiter,
            until: Box::pin(tokio::time::sleep_until(arrived + wait)),
            arrived,
            shed,
        })
    }

    fn give_up(&mut self) -> BoxError {
        self.leave();
        self.shared.stats.shed(self.shed.urgency);
        let mut shed = self.shed.clone();
        shed.waited = self.arrived.elapsed();
        shed.into()
    }

    fn leave(&self) {
        self.shared
            .snapshot
            .load()
            .table
            .fleet
            .queue
            .leave(&self.waiter);
    }
}

impl<E: Clone, Req: Routable> Queued<E, Req> {
    /// Retries the pick: the backend and the request once there is room.
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(Picked<E>, Req), BoxError>> {
        if self.waiter.evicted() {
            return Poll::Ready(Err(self.give_up()));
        }
        // Registered before the pick: room freed after it wakes this task.
        self.waiter.register(cx.waker());
        let Some(req) = self.req.take() else {
            return Poll::Ready(Err("queued request polled after completion".into()));
        };
        let route = match req.route() {
            Ok(route) => route,
            Err(error) => {
                self.leave();
                return Poll::Ready(Err(error.into()));
            }
        };
        let seed = &mut self.seed;
        let mut random = || {
            let z = *seed;
            *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            mix(z)
        };
        let picked = self.local.route(
            &self.shared,
            &route,
            &Now::lazy(),
            Timed::Sampled,
            &mut random,
        );
        match picked {
            Ok(picked) => {
                self.leave();
                return Poll::Ready(Ok((picked, req)));
            }
            Err(Refused::Saturated(_)) => self.req = Some(req),
            Err(other) => {
                self.leave();
                return Poll::Ready(Err(other.into()));
            }
        }
        match self.until.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(self.give_up())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<E, Req> Drop for Queued<E, Req> {
    fn drop(&mut self) {
        // Cancelled while waiting: out of the queue (a no-op if out
        // already).
        self.leave();
    }
}

impl<E, Req> std::fmt::Debug for Queued<E, Req> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued")
            .field("urgency", &self.shed.urgency)
            .field("since", &self.arrived)
            .finish_non_exhaustive()
    }
}
