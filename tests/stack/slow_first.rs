//! A service whose first call is slow and every later call fast, and a
//! hedge policy that fires after 10 ms: a backup sent after the delay
//! answers first.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tower::{service_fn, BoxError, Service};
use tower_model_balance::hedge::{HedgeConfig, HedgeConfigBuilder};

/// The first attempt's time, ms.
pub const FIRST_MS: u64 = 50;
/// A later attempt's time, ms.
pub const LATER_MS: u64 = 1;

/// A service answering its first call after [`FIRST_MS`] and each later
/// one after [`LATER_MS`] (on Tokio's clock), the body being that time in
/// ms; and the count of calls.
pub fn slow_first<Req>() -> (
    impl Service<Req, Response = http::Response<u64>, Error = BoxError, Future: Send> + Clone,
    Arc<AtomicUsize>,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let service = service_fn(move |_req: Req| {
        let first = counted.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            let ms = if first { FIRST_MS } else { LATER_MS };
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, BoxError>(http::Response::new(ms))
        }
    });
    (service, calls)
}

/// Hedges after 10 ms from the first request on (no minimum of samples, a
/// 10 ms floor and ceiling).
pub fn after_10ms() -> HedgeConfigBuilder {
    HedgeConfig::builder()
        .min_samples(0)
        .floor(Duration::from_millis(10))
        .ceiling(Duration::from_millis(10))
}

/// An inference request for `llama`.
pub fn inference() -> http::Request<()> {
    http::Request::post("/infer")
        .header("x-model-id", "llama")
        .body(())
        .expect("a valid request")
}
