//! The etcd agreement test's run (`tests/discover/etcd_agreement.rs`): the writer
//! and the replicas together, each change written and waited on until the
//! replicas agree, the waits measured, and the figures at the end.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;
use tower_model_balance::route::ModelId;

use crate::etcd_fleet::Replicas;
use crate::etcd_truth::{expected, Truth};

/// The run so far: the writer, the replicas, and what was measured.
pub struct Run {
    pub truth: Truth,
    pub replicas: Replicas,
    pub models: Vec<ModelId>,
    /// Each wait for agreement: what changed, and how long it took.
    pub samples: Vec<(&'static str, Duration)>,
    /// Membership changes written, by kind.
    pub changes: BTreeMap<&'static str, usize>,
    /// Single joins and weight changes, and those a replica was seen to
    /// reach in more than one step.
    pub staged: (usize, usize),
    /// From a `Registration`'s drop until every replica's ring was
    /// without it.
    pub dropped_gone: Duration,
    pub next_id: usize,
}

impl Run {
    /// A run over `replicas`, its first `next_id` backends written.
    pub fn new(truth: Truth, replicas: Replicas, next_id: usize) -> Self {
        Self {
            truth,
            replicas,
            models: crate::etcd_replica::models(),
            samples: Vec::new(),
            changes: BTreeMap::new(),
            staged: (0, 0),
            dropped_gone: Duration::ZERO,
            next_id,
        }
    }

    /// Every replica.
    pub fn all(&self) -> Vec<usize> {
        (0..self.replicas.len()).collect()
    }

    /// Waits until the replicas of `which` print the digest of the
    /// membership now, measured from `from`; counts `kind`.
    pub async fn agree(&mut self, kind: &'static str, from: Instant, which: &[usize]) {
        *self.changes.entry(kind).or_default() += 1;
        self.wait(kind, from, which).await;
    }

    /// As `agree`, without counting a change.
    pub async fn wait(&mut self, kind: &'static str, from: Instant, which: &[usize]) {
        let digest = expected(&self.truth.members, &self.models).await;
        let settled = self.replicas.settle(kind, digest, from, which).await;
        if kind == "join" || kind == "weight" {
            self.staged.0 += 1;
            self.staged.1 += usize::from(settled.steps > 0);
        }
        self.samples.push((kind, settled.took));
    }

    pub fn fresh_id(&mut self) -> String {
        self.next_id += 1;
        format!("gpu-{:02}", self.next_id)
    }

    /// A member, chosen by `k`.
    pub fn member(&self, k: usize) -> (String, u32) {
        let members: Vec<_> = self.truth.members.iter().collect();
        let (id, &weight) = members[k * 7 % members.len()];
        (id.clone(), weight)
    }

    pub async fn join(&mut self, kind: &'static str, weight: u32) {
        let id = self.fresh_id();
        let (at, _) = self.truth.put(&id, weight, None).await;
        self.agree(kind, at, &self.all()).await;
    }

    pub async fn reweigh(&mut self, k: usize) {
        let (id, weight) = self.member(k);
        let (at, _) = self.truth.put(&id, weight % 3 + 1, None).await;
        self.agree("weight", at, &self.all()).await;
    }

    pub async fn leave(&mut self, k: usize) {
        let (id, _) = self.member(k);
        let at = self.truth.delete(&id).await;
        self.agree("leave", at, &self.all()).await;
    }
}

/// Prints the figures, then checks the bound on each.
pub fn report(run: &Run, started: Instant, bound: Duration, ttl: Duration) {
    let mut took: Vec<Duration> = run.samples.iter().map(|s| s.1).collect();
    took.sort();
    let rank = |p: usize| took[(took.len() * p).div_ceil(100).max(1) - 1];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let total: usize = run.changes.values().sum();
    println!(
        "etcd agreement: {total} changes {:?}; {} waits; disagreement p50 {:.0} ms, \
         p99 {:.0} ms, max {:.0} ms; {} of {} single joins and weight changes seen staged; \
         a dropped registration gone from every ring in {:.0} ms (TTL {:?}); {:.1} s",
        run.changes,
        took.len(),
        ms(rank(50)),
        ms(rank(99)),
        ms(rank(100)),
        run.staged.1,
        run.staged.0,
        ms(run.dropped_gone),
        ttl,
        started.elapsed().as_secs_f64()
    );
    let mut slowest: BTreeMap<&str, Duration> = BTreeMap::new();
    for &(kind, took) in &run.samples {
        let max = slowest.entry(kind).or_default();
        *max = (*max).max(took);
    }
    let slowest: Vec<String> = slowest
        .iter()
        .map(|(kind, took)| format!("{kind} {:.0}", ms(*took)))
        .collect();
    println!(
        "etcd agreement, slowest by kind (ms): {}",
        slowest.join(", ")
    );
    assert!(total >= 50, "at least 50 membership changes");
    for (kind, took) in &run.samples {
        assert!(
            *took <= bound,
            "{kind}: the replicas disagreed for {took:?}"
        );
    }
    // Without staging none is; a replica may miss a step now and then.
    assert!(
        run.staged.1 * 4 >= run.staged.0 * 3,
        "the replicas stage their ring changes: {:?}",
        run.staged
    );
}
