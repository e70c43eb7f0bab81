//! The DNS discovery source: over a mock resolver with paused time, and
//! over hickory for names that never leave the machine.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use hickory_resolver::config::ResolverConfig;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;
use tokio_test::task;
use tower::discover::Change;
use tower::BoxError;
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::discover::{Dns, HickoryResolver, Resolve};
use tower_model_balance::error::InvalidConfig;

type Answer = Result<Vec<IpAddr>, &'static str>;

/// A resolver answering whatever the test set last, counting its calls.
#[derive(Clone, Default)]
struct Mock {
    answer: Arc<Mutex<Option<Answer>>>,
    calls: Arc<AtomicUsize>,
}

impl Mock {
    fn set(&self, answer: Answer) {
        *self.answer.lock().unwrap() = Some(answer);
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }

    /// The resolver: `None` set means it never answers.
    fn resolver(&self) -> impl Resolve {
        let mock = self.clone();
        move |name: &str| {
            assert_eq!(name, "models.test");
            mock.calls.fetch_add(1, Ordering::Relaxed);
            let answer = mock.answer.lock().unwrap().clone();
            async move {
                match answer {
                    Some(answer) => answer.map_err(BoxError::from),
                    None => std::future::pending().await,
                }
            }
        }
    }
}

fn ips(list: &[&str]) -> Answer {
    Ok(list.iter().map(|ip| ip.parse().unwrap()).collect())
}

type Item = Option<Result<Change<BackendId, Backend<String>>, std::convert::Infallible>>;

/// `+id/endpoint address` or `-id`.
fn show(item: Poll<Item>) -> String {
    match item {
        Poll::Ready(Some(Ok(Change::Insert(key, backend)))) => {
            assert_eq!(&key, backend.meta.id());
            let address = backend.meta.address().map(|a| a.to_string());
            format!(
                "+{key}/{} {}",
                backend.endpoint,
                address.unwrap_or_default()
            )
        }
        Poll::Ready(Some(Ok(Change::Remove(key)))) => format!("-{key}"),
        Poll::Ready(Some(Err(never))) => match never {},
        Poll::Ready(None) => "end".to_owned(),
        Poll::Pending => "pending".to_owned(),
    }
}

fn drain<R: Resolve>(dns: &mut task::Spawn<Dns<String, R>>) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let shown = show(dns.poll_next());
        let last = shown == "pending" || shown == "end";
        seen.push(shown);
        if last {
            return seen;
        }
    }
}

/// The endpoint of an address: `ep-` and the address.
fn endpoint(addr: &SocketAddr) -> String {
    format!("ep-{addr}")
}

#[tokio::test(start_paused = true)]
async fn dns_follows_the_answers_and_keeps_the_set_through_failures() {
    let mock = Mock::default();
    mock.set(ips(&["10.0.0.1", "10.0.0.2", "10.0.0.1"]));
    let dns = Dns::builder("models.test", 8000)
        .build_with(mock.resolver(), endpoint)
        .unwrap();
    let counters = dns.handle();
    let mut dns = task::spawn(dns);
    // The first resolution at once; a repeated address counts once.
    assert_eq!(
        drain(&mut dns),
        [
            "+10.0.0.1:8000/ep-10.0.0.1:8000 http://10.0.0.1:8000",
            "+10.0.0.2:8000/ep-10.0.0.2:8000 http://10.0.0.2:8000",
            "pending",
        ]
    );
    assert_eq!(mock.calls(), 1);

    // The next one an interval later: one address gone, one new.
    mock.set(ips(&["10.0.0.2", "10.0.0.3"]));
    tokio::time::advance(Duration::from_millis(4_999)).await;
    assert!(!dns.is_woken());
    assert_eq!(drain(&mut dns), ["pending"]);
    assert_eq!(mock.calls(), 1);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(dns.is_woken());
    assert_eq!(
        drain(&mut dns),
        [
            "-10.0.0.1:8000",
            "+10.0.0.3:8000/ep-10.0.0.3:8000 http://10.0.0.3:8000",
            "pending"
        ]
    );
    assert_eq!(mock.calls(), 2);

    // Unchanged (in another order): nothing.
    mock.set(ips(&["10.0.0.3", "10.0.0.2"]));
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(drain(&mut dns), ["pending"]);

    // A failure, then an empty answer: the set stays.
    mock.set(Err("NXDOMAIN"));
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(drain(&mut dns), ["pending"]);
    assert_eq!(counters.stats().failures, 1);
    mock.set(ips(&[]));
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(drain(&mut dns), ["pending"]);
    assert_eq!(counters.stats().empty_answers, 1);

    // Back: compared with the set kept, not with nothing.
    mock.set(ips(&["10.0.0.3", "::1"]));
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(
        drain(&mut dns),
        [
            "-10.0.0.2:8000",
            "+[::1]:8000/ep-[::1]:8000 http://[::1]:8000",
            "pending"
        ]
    );
    assert_eq!(mock.calls(), 6);
    assert_eq!(
        (counters.stats().resolutions, counters.stats().failures),
        (5, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_resolution_that_hangs_times_out_and_keeps_the_set() {
    let mock = Mock::default();
    mock.set(ips(&["10.0.0.1"]));
    let dns = Dns::builder("models.test", 9000)
        .interval(Duration::from_secs(1))
        .timeout(Duration::from_secs(3))
        .build_with(mock.resolver(), endpoint)
        .unwrap();
    let counters = dns.handle();
    let mut dns = task::spawn(dns);
    assert_eq!(drain(&mut dns).len(), 2);

    *mock.answer.lock().unwrap() = None;
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(drain(&mut dns), ["pending"]);
    assert_eq!(mock.calls(), 2);
    tokio::time::advance(Duration::from_millis(2_999)).await;
    assert_eq!(drain(&mut dns), ["pending"]);
    assert_eq!(counters.stats().failures, 0, "still waiting");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(dns.is_woken());
    assert_eq!(drain(&mut dns), ["pending"]);
    assert_eq!(counters.stats().failures, 1);

    // The next resolution an interval after the timeout.
    mock.set(ips(&["10.0.0.2"]));
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(drain(&mut dns)[0], "-10.0.0.1:9000");
    assert_eq!(mock.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn clear_on_empty_removes_every_backend() {
    let mock = Mock::default();
    mock.set(ips(&["10.0.0.1", "10.0.0.2"]));
    let dns = Dns::builder("models.test", 8000)
        .clear_on_empty(true)
        .build_with(mock.resolver(), endpoint)
        .unwrap();
    let mut dns = task::spawn(dns);
    assert_eq!(drain(&mut dns).len(), 3);
    mock.set(ips(&[]));
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(
        drain(&mut dns),
        ["-10.0.0.1:8000", "-10.0.0.2:8000", "pending"]
    );
}

#[test]
fn the_builder_validates() {
    let field = |builder: tower_model_balance::discover::DnsBuilder| {
        builder
            .build_with(Mock::default().resolver(), endpoint)
            .unwrap_err()
            .field
    };
    assert_eq!(field(Dns::builder("", 8000)), "hostname");
    assert_eq!(field(Dns::builder("a b", 8000)), "hostname");
    assert_eq!(field(Dns::builder("x".repeat(254), 8000)), "hostname");
    assert_eq!(field(Dns::builder("models.test", 0)), "port");
    let zero = Duration::ZERO;
    assert_eq!(
        field(Dns::builder("models.test", 1).interval(zero)),
        "interval"
    );
    assert_eq!(
        field(Dns::builder("models.test", 1).timeout(zero)),
        "timeout"
    );
    let huge = Duration::MAX;
    assert_eq!(
        field(Dns::builder("models.test", 1).interval(huge)),
        "interval",
        "now + interval would overflow the clock"
    );
    assert_eq!(
        field(Dns::builder("models.test", 1).timeout(huge)),
        "timeout"
    );
    assert_eq!(field(Dns::builder("models.test", 1).weight(0)), "weight");
    assert_eq!(
        field(Dns::builder("models.test", 1).model_slots(17)),
        "model_slots"
    );
    // Through `build` too, before any resolver is made.
    let error = Dns::builder("models.test", 0).build(endpoint).unwrap_err();
    assert_eq!(error.downcast_ref::<InvalidConfig>().unwrap().field, "port");
}

#[tokio::test(start_paused = true)]
async fn the_template_applies_to_every_backend() {
    let mock = Mock::default();
    mock.set(ips(&["10.0.0.1"]));
    let dns = Dns::builder("models.test", 8000)
        .weight(3)
        .model_slots(8)
        .gpu_memory_bytes(80 << 30)
        .build_with(mock.resolver(), endpoint)
        .unwrap();
    let mut dns = task::spawn(dns);
    let Poll::Ready(Some(Ok(Change::Insert(_, backend)))) = dns.poll_next() else {
        panic!("an insert first");
    };
    assert_eq!(backend.meta.weight(), 3);
    assert_eq!(backend.meta.model_slots(), 8);
    assert_eq!(backend.meta.gpu_memory_bytes(), Some(80 << 30));
}

/// A hickory resolver with no name server at all: whatever it answers, it
/// answered without the network.
fn offline() -> HickoryResolver {
    let config = ResolverConfig::from_name_servers(Vec::new());
    let builder = TokioResolver::builder_with_config(config, TokioRuntimeProvider::default());
    HickoryResolver::new(builder.build().unwrap())
}

#[tokio::test]
async fn hickory_resolves_localhost_and_literals_offline() {
    let resolver = offline();
    let localhost = resolver.resolve("localhost").await.unwrap();
    assert!(
        localhost.contains(&"127.0.0.1".parse().unwrap()),
        "{localhost:?}"
    );
    let literal = resolver.resolve("127.0.0.1").await.unwrap();
    assert_eq!(literal, ["127.0.0.1".parse::<IpAddr>().unwrap()]);
    // No name server: a name outside the hosts file is an error.
    assert!(resolver.resolve("models.invalid").await.is_err());
}

#[tokio::test]
async fn a_balancer_fed_by_dns_over_hickory() {
    let dns = Dns::builder("localhost", 8000)
        .build_with(offline(), |addr: &SocketAddr| addr.to_string())
        .unwrap();
    let balancer = ModelBalancer::new(dns, BalanceConfig::default()).unwrap();
    let handle = balancer.handle();
    for _ in 0..1_000 {
        if !handle.backends().is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    let ids: Vec<_> = handle.backends().iter().map(|b| b.id.to_string()).collect();
    assert!(ids.contains(&"127.0.0.1:8000".to_owned()), "{ids:?}");
}

#[test]
fn the_system_configuration_is_read_or_refused() {
    // Reads /etc/resolv.conf and queries nothing. Where the file is absent
    // this is the typed error instead.
    match HickoryResolver::from_system_conf() {
        Ok(resolver) => assert!(format!("{resolver:?}").contains("HickoryResolver")),
        Err(error) => {
            assert!(std::error::Error::source(&error).is_some());
            assert!(
                !std::path::Path::new("/etc/resolv.conf").exists(),
                "{error}"
            );
        }
    }
}
