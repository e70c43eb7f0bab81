//! The one place the balancer starts its tasks ([`spawn`]), and the wait
//! every task ends on when the balancer is gone ([`sleep_or_gone`]).

use std::future::Future;

use tokio::task::JoinHandle;

use crate::task::BackgroundTask;

/// Starts `task` on `runtime`: the only place the balancer spawns.
pub(crate) fn spawn<F>(runtime: &tokio::runtime::Handle, task: F) -> JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    runtime.spawn(task)
}

/// Starts `task` on `runtime`, held by the caller as a [`BackgroundTask`].
pub(crate) fn spawn_held<F>(runtime: &tokio::runtime::Handle, task: F) -> BackgroundTask
where
    F: Future<Output = ()> + Send + 'static,
{
    BackgroundTask::new(spawn(runtime, task))
}

/// Waits until `deadline`; true if the balancer went first (every clone
/// and handle dropped, `gone` closed).
pub(crate) async fn sleep_or_gone(
    deadline: tokio::time::Instant,
    gone: &mut tokio::sync::watch::Receiver<()>,
) -> bool {
    use std::future::Future;
    let mut sleep = std::pin::pin!(tokio::time::sleep_until(deadline));
    // Nothing is ever sent: `changed` resolves only once the sender drops.
    let mut closed = std::pin::pin!(gone.changed());
    std::future::poll_fn(|cx| {
        if closed.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(true);
        }
        sleep.as_mut().poll(cx).map(|()| false)
    })
    .await
}
