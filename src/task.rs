//! The handle of a task the crate starts for the caller: one type for
//! every such task (the balancer's probes and repository refresh, the
//! metrics export, an etcd registration's residency tracking).
//!
//! ```
//! # #[cfg(feature = "metrics")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::time::Duration;
//! use futures_util::stream;
//! use tower::discover::Change;
//! use tower_model_balance::backend::{Backend, BackendId};
//! use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
//!
//! let gpu = Backend::new(BackendId::new("gpu-0").unwrap(), "10.0.0.1:8000");
//! let backends = stream::iter([Ok::<_, std::convert::Infallible>(Change::Insert(0, gpu))]);
//! let balancer = ModelBalancer::new(backends, BalanceConfig::default()).unwrap();
//! let task = tower_model_balance::metrics::export(balancer.handle(), Duration::from_secs(1)).unwrap();
//! assert!(!task.is_finished());
//! drop(task); // the export stops
//! # }
//! # #[cfg(not(feature = "metrics"))]
//! # fn main() {}
//! ```

use tokio::task::JoinHandle;

/// A task the crate started for the caller: it stops when this is
/// dropped, or when what it serves is gone (the balancer, for its probes
/// and repository refresh; the registration, for its residency tracking).
///
/// Returned by [`BalancerHandle::spawn_probes`](crate::balance::BalancerHandle::spawn_probes),
/// [`BalancerHandle::enable_placement`](crate::balance::BalancerHandle::enable_placement),
/// `metrics::export`, `metrics::export_hedge` and
/// `discover::etcd::Registration::track_residency`.
#[derive(Debug)]
#[must_use = "the task stops when it is dropped"]
pub struct BackgroundTask {
    task: JoinHandle<()>,
}

impl BackgroundTask {
    /// Holds `task`, aborting it when dropped.
    #[cfg_attr(
        not(any(feature = "balance", feature = "probe", feature = "metrics")),
        allow(dead_code)
    )]
    pub(crate) fn new(task: JoinHandle<()>) -> Self {
        Self { task }
    }

    /// Whether the task has stopped (what it served is gone).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Waits until the task stops on its own, when what it served is gone
    /// (it runs until then; dropping this stops it at once instead). A
    /// panic in the task is resumed here.
    pub async fn stopped(&mut self) {
        if let Err(error) = (&mut self.task).await {
            if error.is_panic() {
                std::panic::resume_unwind(error.into_panic());
            }
        }
    }
}

impl Drop for BackgroundTask {
    fn drop(&mut self) {
        self.task.abort();
    }
}
