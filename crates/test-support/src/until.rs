//! Waiting on the discovery task by events, never by sleeping.

/// Lets the discovery task run until `done` holds; fails, never hangs, if
/// it does not within a bounded number of turns.
pub async fn until(done: impl Fn() -> bool) {
    for _ in 0..1_000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the discovery task did not apply the changes");
}
