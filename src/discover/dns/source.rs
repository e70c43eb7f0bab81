//! [`Dns`]: the source, re-resolving its hostname on an interval and
//! yielding the changes.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use tokio::time::{Instant, Sleep};
use tower::discover::Change;

use super::resolve::{HickoryResolver, Resolve};
use crate::backend::BackendId;
use crate::backend::{Backend, BackendMeta};
use crate::discover::counters::DiscoverHandle;
use crate::discover::diff::Known;
use crate::endpoint::Origin;
use crate::error::BoxError;

type Lookup = Pin<Box<dyn Future<Output = Result<Vec<IpAddr>, BoxError>> + Send>>;
type MakeEndpoint<E> = Arc<dyn Fn(&SocketAddr) -> E + Send + Sync>;

/// A discovery source that re-resolves a hostname on an interval: each
/// address it resolves to, with the given port, is a backend.
///
/// A backend's ID is its socket address, `ip:port` (`[v6]:port` for IPv6),
/// its [`address`](BackendMeta::address) is `http://ip:port`, its other
/// metadata comes from the builder (weight, model slots, GPU memory), and
/// its endpoint from your closure, called once per new address.
///
/// The first resolution starts when the source is first polled; each next
/// one an interval (default 5 s) after the last finished. After each:
///
/// * an answer yields `Insert` for every new address and `Remove` for
///   every address gone (first); unchanged addresses yield nothing;
/// * a failure — NXDOMAIN, a name server unreachable, no answer within the
///   timeout (default 10 s) — **keeps the backends as they are**, logs a
///   `tracing` warning and counts in [`DiscoverStats::failures`](crate::discover::DiscoverStats::failures): a DNS blip
///   must not empty the fleet (stale addresses fail requests, which the
///   breakers and health scores handle);
/// * an answer with no address is treated like a failure by default (kept,
///   warned, counted in [`DiscoverStats::empty_answers`](crate::discover::DiscoverStats::empty_answers)): a registry that
///   briefly lists no endpoint, mid-rollout, is more often wrong than a
///   fleet scaled to zero. [`DnsBuilder::clear_on_empty`](super::DnsBuilder::clear_on_empty) removes every
///   backend instead.
///
/// The interval is not jittered: resolutions are cheap and served from
/// the resolver's cache while a record's TTL lasts, so gateways resolving
/// in step load nothing but their own cache. Never yields an error and
/// never ends.
///
/// ```no_run
/// use std::net::SocketAddr;
/// use std::time::Duration;
///
/// use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
/// use tower_model_balance::discover::Dns;
/// use tower_model_balance::endpoint::{Origin, SetOrigin};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower::BoxError> {
/// # let client = tower::service_fn(|_req: http::Request<String>| async {
/// #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// # });
/// // `client` is one HTTP client for every backend (hyper-util's, say).
/// let dns = Dns::builder("triton.models.svc.cluster.local", 8000)
///     .interval(Duration::from_secs(10))
///     .model_slots(8)
///     .build(move |addr: &SocketAddr| SetOrigin::to(client.clone(), Origin::http(*addr)))?;
/// let balancer = ModelBalancer::new(dns, BalanceConfig::default())?;
/// # drop(balancer); Ok(()) }
/// ```
pub struct Dns<E, R = HickoryResolver> {
    pub(super) resolver: Arc<R>,
    pub(super) hostname: Arc<str>,
    pub(super) port: u16,
    pub(super) interval: Duration,
    pub(super) timeout: Duration,
    pub(super) clear_on_empty: bool,
    pub(super) template: BackendMeta,
    pub(super) make_endpoint: MakeEndpoint<E>,
    pub(super) known: Known,
    pub(super) pending: VecDeque<Change<BackendId, Backend<E>>>,
    /// The resolution in progress, if any.
    pub(super) lookup: Option<Pin<Box<tokio::time::Timeout<Lookup>>>>,
    /// When the next resolution starts; none before the first (at once).
    pub(super) next: Option<Pin<Box<Sleep>>>,
    pub(super) counters: DiscoverHandle,
}

impl<E, R> Dns<E, R> {
    /// A handle on this source's counters (resolutions, failures, empty
    /// answers), readable after the source was handed to a balancer.
    pub fn handle(&self) -> DiscoverHandle {
        self.counters.clone()
    }
}

impl<E, R: Resolve> Dns<E, R> {
    fn start_lookup(&mut self) {
        let (resolver, hostname) = (self.resolver.clone(), self.hostname.clone());
        let lookup: Lookup = Box::pin(async move { resolver.resolve(&hostname).await });
        self.lookup = Some(Box::pin(tokio::time::timeout(self.timeout, lookup)));
    }

    /// Queues the changes an outcome calls for.
    fn apply(
        &mut self,
        outcome: Result<Result<Vec<IpAddr>, BoxError>, tokio::time::error::Elapsed>,
    ) {
        let host = &*self.hostname;
        let mut ips = match outcome {
            Ok(Ok(ips)) => ips,
            Ok(Err(error)) => {
                self.counters.add_failure();
                tracing::warn!(%host, %error, "DNS resolution failed; keeping the last backend set");
                return;
            }
            Err(_elapsed) => {
                self.counters.add_failure();
                let timeout_ms = self.timeout.as_millis();
                tracing::warn!(%host, timeout_ms, "DNS resolution timed out; keeping the last backend set");
                return;
            }
        };
        self.counters.add_resolution(ips.is_empty());
        if ips.is_empty() && !self.clear_on_empty {
            tracing::warn!(%host, "DNS answered no address; keeping the last backend set");
            return;
        }
        // Drop repeats, keeping the resolver's order.
        let mut seen = std::collections::HashSet::with_capacity(ips.len());
        ips.retain(|ip| seen.insert(*ip));
        let entries: Vec<(SocketAddr, BackendMeta)> = ips
            .into_iter()
            .filter_map(|ip| {
                let addr = SocketAddr::new(ip, self.port);
                // A socket address has no whitespace or control character
                // and is far below the length limit: always an ID.
                let id = BackendId::new(&addr.to_string()).ok()?;
                let meta = BackendMeta {
                    id,
                    address: Some(Origin::http(addr)),
                    ..self.template.clone()
                };
                Some((addr, meta))
            })
            .collect();
        let make_endpoint = &self.make_endpoint;
        self.known.diff(
            &entries,
            |(_, meta)| meta,
            |(addr, meta)| Backend::with_meta(meta.clone(), make_endpoint(addr)),
            &mut self.pending,
        );
        tracing::debug!(%host, backends = self.known.len(), "DNS resolution applied");
    }

    fn schedule_next(&mut self) {
        let at = Instant::now() + self.interval;
        match &mut self.next {
            Some(sleep) => sleep.as_mut().reset(at),
            None => self.next = Some(Box::pin(tokio::time::sleep_until(at))),
        }
    }
}

// No field is pinned (the futures are boxed).
impl<E, R> Unpin for Dns<E, R> {}

impl<E, R: Resolve> Stream for Dns<E, R> {
    type Item = Result<Change<BackendId, Backend<E>>, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(change) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(change)));
            }
            if let Some(lookup) = &mut this.lookup {
                let outcome = ready!(lookup.as_mut().poll(cx));
                this.lookup = None;
                this.schedule_next();
                this.apply(outcome);
                continue;
            }
            if let Some(next) = &mut this.next {
                ready!(next.as_mut().poll(cx));
            }
            this.start_lookup();
        }
    }
}

impl<E, R> fmt::Debug for Dns<E, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dns")
            .field("hostname", &self.hostname)
            .field("port", &self.port)
            .field("interval", &self.interval)
            .field("timeout", &self.timeout)
            .field("clear_on_empty", &self.clear_on_empty)
            .field("template", &self.template)
            .field("resolver", &std::any::type_name::<R>())
            .field("announced", &self.known.len())
            .field("resolving", &self.lookup.is_some())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::future::{ready, Ready};
    use std::net::{IpAddr, SocketAddr};
    use std::time::Duration;

    use super::Dns;
    use crate::error::BoxError;

    fn nothing(_name: &str) -> Ready<Result<Vec<IpAddr>, BoxError>> {
        ready(Ok(Vec::new()))
    }

    #[test]
    fn a_source_resolves_every_5_s_by_default() {
        let dns = Dns::builder("models.test", 8000)
            .build_with(nothing, |_: &SocketAddr| ())
            .unwrap();
        assert_eq!(dns.interval, Duration::from_secs(5));
    }
}
