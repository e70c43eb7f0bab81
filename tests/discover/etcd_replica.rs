//! One gateway replica of the etcd agreement test (`tests/discover/etcd_agreement.rs`),
//! run as a child process: a `ModelBalancer` over the `Etcd` source, whose
//! owner lists for [`MODELS`] models it digests every [`POLL`], printing a
//! [`Line`] to stdout whenever the digest or a counter changes. It ends when
//! its stdin closes.
//!
//! The digest, the models and the balancer's configuration are shared with
//! the parent, which computes the digest every replica must reach.

use std::fmt;
use std::io::Read;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use futures_util::StreamExt;
use tower::discover::Change;
use tower_model_balance::balance::{BalanceConfig, BalancerHandle, ModelBalancer, StagingConfig};
use tower_model_balance::discover::etcd::Etcd;
use tower_model_balance::route::ModelId;

use crate::ready::Ready;

/// Models whose owner lists are digested.
pub const MODELS: usize = 10_000;

/// Owners per model (fixed: no traffic moves them).
pub const OWNERS: usize = 3;

/// How often a replica digests its owner lists.
pub const POLL: Duration = Duration::from_millis(20);

/// The replica's environment: its name, etcd's URL (or a proxy's) and the
/// key prefix.
pub const REPLICA: &str = "TMB_ETCD_REPLICA";
pub const URL: &str = "TMB_ETCD_URL";
pub const PREFIX: &str = "TMB_ETCD_PREFIX";

/// `tenant-{m % 7}/model-{m}` for every `m` below [`MODELS`].
pub fn models() -> Vec<ModelId> {
    (0..MODELS)
        .map(|m| ModelId::new(&format!("tenant-{}/model-{m}", m % 7)).unwrap())
        .collect()
}

/// Every balancer's configuration: [`OWNERS`] owners per model, the
/// default seed and points, and `staging`.
pub fn config(staging: StagingConfig) -> BalanceConfig {
    BalanceConfig::builder()
        .owners(OWNERS)
        .min_owners(OWNERS)
        .staging(staging)
        .build()
        .unwrap()
}

/// The replicas' staging: a step moves at most 5% of the ring's points,
/// 50 ms after the last, so that a single join or weight change lands in
/// two or more steps, each seen by a replica's poll, and a burst's in
/// well under a second.
pub fn replica_staging() -> StagingConfig {
    StagingConfig::new(0.05, Duration::from_millis(50)).unwrap()
}

/// xxh3 over every model's owner list (IDs in walk order).
pub fn digest(handle: &BalancerHandle, models: &[ModelId]) -> u64 {
    let mut bytes = Vec::with_capacity(models.len() * OWNERS * 8);
    for model in models {
        for owner in handle.owners(model) {
            bytes.extend_from_slice(owner.as_bytes());
            bytes.push(0xff);
        }
        bytes.push(0xfe);
    }
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// What a replica reports: its digest, and its source's counters and
/// the changes the source yielded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Line {
    pub digest: u64,
    /// Backends the balancer holds.
    pub backends: usize,
    pub revision: i64,
    pub events: u64,
    pub snapshots: u64,
    pub resumes: u64,
    pub compactions: u64,
    pub stale: u64,
    pub invalid: u64,
    /// `Insert`s and `Remove`s the source yielded to the balancer.
    pub inserts: u64,
    pub removes: u64,
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "digest={} backends={} revision={} events={} snapshots={} resumes={} \
             compactions={} stale={} invalid={} inserts={} removes={}",
            self.digest,
            self.backends,
            self.revision,
            self.events,
            self.snapshots,
            self.resumes,
            self.compactions,
            self.stale,
            self.invalid,
            self.inserts,
            self.removes
        )
    }
}

impl FromStr for Line {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut line = Line::default();
        for field in s.split_whitespace() {
            let (name, value) = field.split_once('=').ok_or(s)?;
            let bad = |_| format!("{name} in {s}");
            match name {
                "digest" => line.digest = value.parse().map_err(bad)?,
                "backends" => line.backends = value.parse().map_err(bad)?,
                "revision" => line.revision = value.parse().map_err(bad)?,
                "events" => line.events = value.parse().map_err(bad)?,
                "snapshots" => line.snapshots = value.parse().map_err(bad)?,
                "resumes" => line.resumes = value.parse().map_err(bad)?,
                "compactions" => line.compactions = value.parse().map_err(bad)?,
                "stale" => line.stale = value.parse().map_err(bad)?,
                "invalid" => line.invalid = value.parse().map_err(bad)?,
                "inserts" => line.inserts = value.parse().map_err(bad)?,
                "removes" => line.removes = value.parse().map_err(bad)?,
                _ => return Err(format!("unknown field {name} in {s}")),
            }
        }
        Ok(line)
    }
}

/// The child's side: runs one replica until stdin closes.
pub fn run() {
    let url = std::env::var(URL).expect("the replica's etcd URL");
    let prefix = std::env::var(PREFIX).expect("the replica's key prefix");
    // The watch and the discovery task run beside the digest, not behind it.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(replica(url, prefix));
}

/// Models whose owners a replica reads every poll, to notice the ring move
/// without digesting all of them: a staged step moves about 5% of the
/// models, so one that moves none of these 256 is one in a million.
const SAMPLE: usize = 256;

/// How long after the ring last moved a replica keeps digesting every
/// model at least every [`TAIL_EVERY`]: longer than staging's cooldown,
/// so a last step too small to move a sampled model is seen too.
const TAIL: Duration = Duration::from_millis(300);
const TAIL_EVERY: Duration = Duration::from_millis(60);

/// The longest between two digests of every model, moving or not.
const EVERY: Duration = Duration::from_secs(1);

async fn replica(url: String, prefix: String) {
    let source = Etcd::builder([url], prefix)
        .backoff(Duration::from_millis(50), Duration::from_millis(500))
        .build(|_origin| Ready)
        .unwrap();
    let counters = source.handle();
    // What the source hands the balancer, counted on the way.
    let yielded = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let counted = yielded.clone();
    let source = source.inspect(move |change| {
        let i = usize::from(matches!(change, Ok(Change::Remove(_))));
        counted[i].fetch_add(1, Ordering::SeqCst);
    });
    let balancer = ModelBalancer::new(source, config(replica_staging())).unwrap();
    let handle = balancer.handle();
    let models = models();
    let sample: Vec<ModelId> = models.iter().step_by(MODELS / SAMPLE).cloned().collect();

    let (closed_tx, mut closed) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        let _ = closed_tx.send(());
    });
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut line = Line::default();
    let mut printed = None;
    let (mut moved, mut digested) = (Instant::now(), Instant::now());
    let mut glance = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut closed => break,
        }
        let now = Instant::now();
        let seen = (
            yielded[0].load(Ordering::SeqCst),
            yielded[1].load(Ordering::SeqCst),
            digest(&handle, &sample),
        );
        let full = if glance != Some(seen) {
            moved = now;
            true
        } else if now < moved + TAIL {
            now >= digested + TAIL_EVERY
        } else {
            now >= digested + EVERY
        };
        glance = Some(seen);
        if full {
            line.digest = digest(&handle, &models);
            digested = Instant::now();
        }
        line.backends = handle.backends().len();
        (line.inserts, line.removes) = (seen.0, seen.1);
        line.revision = counters.stats().revision;
        line.events = counters.stats().events;
        line.snapshots = counters.stats().snapshots;
        line.resumes = counters.stats().resumes;
        line.compactions = counters.stats().compactions;
        line.stale = counters.stats().stale_events;
        line.invalid = counters.stats().invalid_records;
        if printed != Some(line) {
            println!("{line}");
            printed = Some(line);
        }
    }
    drop(balancer);
}
