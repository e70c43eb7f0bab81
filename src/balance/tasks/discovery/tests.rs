//! Staged ring changes, driven through the discovery task on a paused
//! clock and read from the published snapshots.

use std::convert::Infallible;
use std::task::Waker;
use std::time::Duration;

use futures_util::stream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::*;
use crate::backend::BackendId;
use crate::balance::config::fields::StagingConfig;
use crate::ring::RingConfig;
use crate::route::ModelId;

const COOLDOWN: Duration = Duration::from_secs(10);
const MODELS: usize = 10_000;

type Tx = mpsc::UnboundedSender<Change<String, Backend<()>>>;

/// A registry fed by a channel, driven by its task as the balancer does.
struct Fixture {
    tx: Tx,
    shared: Arc<Shared<()>>,
    task: JoinHandle<()>,
    /// The table last seen by [`Fixture::next`].
    seen: Arc<Table>,
}

impl Fixture {
    fn start(max_share: f64) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let changes = stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|c| (Ok::<_, Infallible>(c), rx))
        });
        let staging = StagingConfig::new(max_share, COOLDOWN).unwrap();
        let config = BalanceConfig::builder().staging(staging).build().unwrap();
        let mut discover = Box::pin(changes);
        let mut registry = Registry::new(config.clone());
        registry.drain(discover.as_mut(), &mut Context::from_waker(Waker::noop()));
        registry.step();
        let (gone, on_gone) = tokio::sync::watch::channel(());
        let shared = Arc::new(Shared::new(registry.snapshot(), config, gone));
        let task = tokio::spawn(run(discover, registry, Arc::downgrade(&shared), on_gone));
        let seen = shared.snapshot.load().table.clone();
        Self {
            tx,
            shared,
            task,
            seen,
        }
    }

    fn insert(&self, name: &str, weight: u32) {
        let meta = BackendMeta::new(BackendId::new(name).unwrap())
            .with_weight(weight)
            .unwrap();
        let change = Change::Insert(name.to_string(), Backend::with_meta(meta, ()));
        self.tx.send(change).unwrap();
    }

    fn table(&self) -> Arc<Table> {
        self.shared.snapshot.load().table.clone()
    }

    /// The next table the task publishes; fails, never hangs, when none
    /// comes within a bounded number of turns.
    async fn next(&mut self) -> Arc<Table> {
        for _ in 0..1_000 {
            let table = self.table();
            if !Arc::ptr_eq(&table, &self.seen) {
                self.seen = table.clone();
                return table;
            }
            tokio::task::yield_now().await;
        }
        panic!("the discovery task published nothing");
    }

    /// Lets the task run; asserts it publishes nothing.
    async fn quiet(&self) {
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(Arc::ptr_eq(&self.table(), &self.seen), "published early");
    }

    /// The table published after the next cooldown, and nothing before.
    async fn after_cooldown(&mut self) -> Arc<Table> {
        tokio::time::advance(COOLDOWN - Duration::from_millis(1)).await;
        self.quiet().await;
        tokio::time::advance(Duration::from_millis(1)).await;
        self.next().await
    }
}

fn names(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("backend-{i}")).collect()
}

fn models() -> Vec<u64> {
    (0..MODELS)
        .map(|i| ModelId::new(&format!("model-{i}")).unwrap().hash64())
        .collect()
}

/// Each model's primary owner on `table`'s ring.
fn primaries(table: &Table, models: &[u64]) -> Vec<Option<BackendId>> {
    let ring = &table.ring;
    models
        .iter()
        .map(|&key| ring.primary(key).map(|i| ring.member(i).clone()))
        .collect()
}

/// Every model's first three owners, by ID.
fn owner_ids(ring: &Ring, models: &[u64]) -> Vec<Vec<BackendId>> {
    let owners = |key| ring.owners(key, 3).map(|i| ring.member(i).clone());
    models.iter().map(|&key| owners(key).collect()).collect()
}

/// Starts with `n` backends of weight 1, published at once.
async fn fleet(n: usize, max_share: f64) -> Fixture {
    let mut f = Fixture::start(max_share);
    for name in names(0..n) {
        f.insert(&name, 1);
    }
    let table = f.next().await;
    assert_eq!(table.ring.points(), n * 150, "the first set is not staged");
    f
}

#[tokio::test(start_paused = true)]
async fn four_joining_eight_move_a_bounded_share_of_models_per_step() {
    let mut f = fleet(8, 0.1).await;
    let models = models();
    let mut before = primaries(&f.seen, &models);
    for name in names(8..12) {
        f.insert(&name, 1);
    }
    let joiners: Vec<BackendId> = names(8..12)
        .iter()
        .map(|n| BackendId::new(n).unwrap())
        .collect();
    let mut moved_per_step = Vec::new();
    let mut table = f.next().await;
    loop {
        assert_eq!(table.backends.len(), 12, "every joiner is in the table");
        let after = primaries(&table, &models);
        let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
        for (b, a) in before.iter().zip(&after).filter(|(b, a)| b != a) {
            let to = a.as_ref().unwrap();
            assert!(joiners.contains(to), "{b:?} -> {to}: only to a joiner");
        }
        moved_per_step.push(moved);
        before = after;
        if table.ring.points() == 1_800 {
            break;
        }
        table = f.after_cooldown().await;
    }
    eprintln!("models moved per step: {moved_per_step:?}");
    // A step adds a tenth of the ring in force: about 1/11 of the models.
    assert!(
        moved_per_step.iter().all(|&m| m <= MODELS * 11 / 100),
        "{moved_per_step:?}"
    );
    assert_eq!(moved_per_step.len(), 5, "{moved_per_step:?}");
    let total: usize = moved_per_step.iter().sum();
    let all = names(0..12)
        .into_iter()
        .map(|n| (BackendId::new(&n).unwrap(), 1));
    let full = Ring::build(&RingConfig::default(), all).unwrap();
    assert_eq!(owner_ids(&table.ring, &models), owner_ids(&full, &models));
    assert!(total <= MODELS * 4 / 10, "moved {total} in all");
    // Settled: no further step.
    tokio::time::advance(COOLDOWN * 2).await;
    f.quiet().await;
}

#[tokio::test(start_paused = true)]
async fn one_joining_eight_lands_in_one_step_at_a_fifth() {
    let mut f = fleet(8, 0.2).await;
    f.insert("backend-8", 1);
    let table = f.next().await;
    assert_eq!(table.ring.points(), 1_350);
    tokio::time::advance(COOLDOWN * 2).await;
    f.quiet().await;
}

#[tokio::test(start_paused = true)]
async fn a_whole_share_turns_staging_off() {
    let mut f = fleet(2, 1.0).await;
    for name in names(2..10) {
        f.insert(&name, 3);
    }
    assert_eq!(f.next().await.ring.points(), 300 + 8 * 450);
}

#[tokio::test(start_paused = true)]
async fn a_change_during_the_cooldown_is_published_at_once_and_steps_later() {
    let mut f = fleet(8, 0.1).await;
    f.insert("backend-8", 1);
    assert_eq!(f.next().await.ring.points(), 1_320, "120 of its 150 points");
    // A removal within the cooldown is published at once; the joiner keeps
    // its points until the cooldown is over.
    tokio::time::advance(Duration::from_secs(1)).await;
    f.tx.send(Change::Remove("backend-0".into())).unwrap();
    let table = f.next().await;
    assert_eq!((table.backends.len(), table.ring.points()), (8, 1_170));
    // A weight change re-targets the next step, and keeps the state.
    let state = table.backends[table.ring.primary(0).unwrap()].clone();
    let name = state.id.to_string();
    f.insert(&name, 2);
    let table = f.next().await;
    assert_eq!(table.ring.points(), 1_170, "no step before the cooldown");
    let same = table.backends.iter().find(|b| b.id == state.id).unwrap();
    assert!(Arc::ptr_eq(same, &state), "breaker and state kept");
    tokio::time::advance(Duration::from_secs(9)).await;
    let table = f.next().await;
    // ceil(0.1 × 1 170) = 117 points, shared between the joiner (30 to
    // go) and the heavier backend (150 to go).
    assert_eq!(table.ring.points(), 1_287);
    assert_eq!(f.after_cooldown().await.ring.points(), 1_350);
}

#[tokio::test(start_paused = true)]
async fn staging_finishes_after_the_source_ends() {
    let mut f = fleet(8, 0.1).await;
    f.insert("backend-8", 1);
    drop(std::mem::replace(&mut f.tx, mpsc::unbounded_channel().0));
    assert_eq!(f.next().await.ring.points(), 1_320);
    assert!(!f.task.is_finished(), "a step is still to come");
    assert_eq!(f.after_cooldown().await.ring.points(), 1_350);
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(f.task.is_finished());
}

#[tokio::test(start_paused = true)]
async fn a_removal_is_not_staged() {
    let mut f = fleet(8, 0.1).await;
    for name in names(0..4) {
        f.tx.send(Change::Remove(name)).unwrap();
    }
    let table = f.next().await;
    assert_eq!((table.backends.len(), table.ring.points()), (4, 600));
}

#[tokio::test(start_paused = true)]
async fn backends_still_joining_count_for_the_share_of_the_ring_they_hold() {
    let mut f = fleet(8, 0.1).await;
    assert_eq!(f.seen.in_ring, 8.0);
    for name in names(8..12) {
        f.insert(&name, 1);
    }
    // Steps of a tenth of the ring in force: 1,320 points, then 1,452, ...
    let mut table = f.next().await;
    let mut in_ring = vec![table.in_ring];
    while table.ring.points() < 1_800 {
        table = f.after_cooldown().await;
        in_ring.push(table.in_ring);
    }
    let expected: Vec<f64> = [1_320.0, 1_452.0, 1_598.0, 1_758.0, 1_800.0]
        .iter()
        .map(|points| points / 150.0)
        .collect();
    let close = in_ring
        .iter()
        .zip(&expected)
        .all(|(a, b)| (a - b).abs() < 1e-9);
    assert!(close, "each joiner by its points over 150: {in_ring:?}");
    assert_eq!(in_ring.len(), 5);
    assert_eq!(table.backends.len(), 12);
}
