//! Gateways that share the backend set, weights and seed agree on every
//! model's static owner list — across processes, not just within one.
//!
//! The test runs this binary again as a child process (the "second
//! gateway"), which prints a digest of the owner lists of 10,000 model IDs;
//! both digests must match each other and the pinned golden value.

use std::process::Command;

use tower_model_balance::backend::BackendId;
use tower_model_balance::ring::{Ring, RingConfig};
use tower_model_balance::route::ModelId;

const CHILD: &str = "TOWER_MODEL_BALANCE_AGREEMENT_CHILD";
const MODELS: usize = 10_000;
const OWNERS: usize = 3;

/// xxh3 over the owner lists (IDs, in order) of `MODELS` model IDs on a
/// ring of 16 backends with mixed weights under seed 42.
fn digest() -> u64 {
    let members = (0..16).map(|i| {
        let id = BackendId::new(&format!("gpu-{i:02}.pool-a:8000")).unwrap();
        (id, 1 + i % 3)
    });
    let ring = Ring::build(&RingConfig::new(42, 150).unwrap(), members).unwrap();
    let mut bytes = Vec::new();
    for m in 0..MODELS {
        let model = ModelId::new(&format!("tenant-{}/model-{m}", m % 7)).unwrap();
        for owner in ring.owners(model.hash64(), OWNERS) {
            bytes.extend_from_slice(ring.member(owner).as_str().as_bytes());
            bytes.push(0xff);
        }
        bytes.push(0xfe);
    }
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// Changing this value changes which backends own which models: a breaking
/// change for every deployment that shares a ring across gateways.
const GOLDEN_DIGEST: u64 = 6_498_592_516_804_379_798;

#[test]
fn two_processes_agree_on_every_owner_list() {
    let here = digest();
    if std::env::var_os(CHILD).is_some() {
        println!("digest={here}");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let output = Command::new(exe)
        // The test's name alone selects it (no other test holds it), in
        // whatever module of the binary it sits.
        .args(["two_processes_agree_on_every_owner_list", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .expect("the test binary runs again");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let theirs: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("digest="))
        .expect("the child printed its digest")
        .parse()
        .unwrap();
    assert_eq!(here, theirs, "another process computed different owners");
    assert_eq!(here, GOLDEN_DIGEST, "the model → owners mapping changed");
}
