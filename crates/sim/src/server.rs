//! The simulated model server: a real HTTP/1 server on 127.0.0.1.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Notify, Semaphore};

use super::config::ServerConfig;
use super::fault::Fault;
use super::handle::handle;
use super::metrics::{self};
use super::prefill;
use super::residency::Residency;
use super::state::{lock, Loads, State};
use super::stats::{Counters, ServerStats};

/// A running simulated model server; stops when dropped (or, waiting until
/// its port is free, with [`stop`](Self::stop)).
///
/// ```
/// use tower_model_balance_sim::{ModelServer, ServerConfig};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let server = ModelServer::start("node-0", ServerConfig::default()).await.unwrap();
/// assert!(server.addr().ip().is_loopback());
/// assert_eq!(server.stats().requests, 0);
///
/// // Killed, then started again on the same port: a fresh process.
/// let (addr, config) = (server.addr(), server.config().clone());
/// server.stop().await;
/// let server = ModelServer::start_on("node-0", config, addr).await.unwrap();
/// assert_eq!(server.addr(), addr);
/// # }
/// ```
#[derive(Debug)]
pub struct ModelServer {
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: watch::Sender<bool>,
    /// Closed once the accept task and every connection task have ended
    /// (each holds a sender).
    tasks: mpsc::Receiver<()>,
}

impl ModelServer {
    /// Binds 127.0.0.1 on a free port and serves until dropped.
    ///
    /// # Errors
    ///
    /// The I/O error when the socket cannot be bound.
    pub async fn start(name: &str, config: ServerConfig) -> std::io::Result<Self> {
        Self::start_on(name, config, (std::net::Ipv4Addr::LOCALHOST, 0).into()).await
    }

    /// Binds `addr` and serves until dropped: with port 0 a free port, as
    /// [`start`](Self::start) does; with the address of a server
    /// [stopped](Self::stop), the same port again — a restart. A restarted
    /// server is a fresh process: no model resident, no fault, its
    /// counters from zero.
    ///
    /// # Errors
    ///
    /// The I/O error when the socket cannot be bound (e.g. the port is in
    /// use).
    pub async fn start_on(
        name: &str,
        config: ServerConfig,
        addr: SocketAddr,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (shutdown, watch) = watch::channel(false);
        let prefill = (config.prefix_cache > 0)
            .then(|| prefill::spawn(config.prefix_cache, config.prefill_rate, watch.clone()));
        let state = Arc::new(State {
            name: name.to_owned(),
            slots: Arc::new(Semaphore::new(config.concurrency)),
            residency: Mutex::new(Residency::new(config.resident_slots)),
            fault: watch::Sender::new(None),
            counters: Counters::default(),
            gpu_uuid: metrics::gpu_uuid(name),
            config,
            loads: Mutex::new(Loads::default()),
            changed: Notify::new(),
            shutdown: watch.clone(),
            prefill,
        });
        let (alive, tasks) = mpsc::channel(1);
        tokio::spawn(accept(listener, state.clone(), watch, alive));
        Ok(Self {
            addr,
            state,
            shutdown,
            tasks,
        })
    }

    /// Kills the server: stops accepting, and cuts every connection — the
    /// requests in flight are dropped unanswered, their clients see the
    /// connection closed. Returns once the listening socket and every
    /// connection are closed, so that [`start_on`](Self::start_on) can
    /// bind the same address at once; clients connecting meanwhile are
    /// refused.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        // Every task holds a sender: `None` once all have ended.
        while self.tasks.recv().await.is_some() {}
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's name, as sent in [`BACKEND_HEADER`](super::protocol::BACKEND_HEADER).
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// Puts the server in `fault`, or back to normal with `None`.
    pub fn set_fault(&self, fault: Option<Fault>) {
        self.state.fault.send_replace(fault);
    }

    /// Counters so far, and the requests waiting and running now.
    pub fn stats(&self) -> ServerStats {
        let c = &self.state.counters;
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ServerStats {
            requests: read(&c.requests),
            work: read(&c.work),
            cold_loads: read(&c.cold_loads),
            unavailable: read(&c.unavailable),
            waiting: read(&c.waiting),
            max_waiting: read(&c.max_waiting),
            running: read(&c.running),
            not_found: read(&c.not_found),
            load_calls: read(&c.load_calls),
            loads_started: read(&c.loads_started),
            loads_failed: read(&c.loads_failed),
            max_concurrent_loads_per_model: lock(&self.state.loads).max_calls(),
            unloads: read(&c.unloads),
            hung: read(&c.hung),
            streams: read(&c.streams),
            streams_completed: read(&c.streams_completed),
            streams_cancelled: read(&c.streams_cancelled),
            tokens_sent: read(&c.tokens_sent),
            prompt_tokens: read(&c.prompt_tokens),
            cached_tokens: read(&c.cached_tokens),
            evictions: lock(&self.state.residency).evictions(),
        }
    }

    /// Waits until `done` holds for the server's [`stats`](Self::stats)
    /// and returns them: an event hook for tests (no sleeping). The stats
    /// are checked at once, then each time a request is answered, starts
    /// or stops hanging ([`Fault::Hang`]), each time a streamed answer
    /// starts, sends a token, ends or is dropped, and each
    /// time a load call arrives, a load starts or a load ends — so a
    /// condition on the gauges `waiting` and `running` alone may be seen
    /// late. Bound it with a timeout: it waits as long as `done` is false.
    pub async fn wait_for_stats(&self, done: impl Fn(&ServerStats) -> bool) -> ServerStats {
        loop {
            let changed = self.state.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let stats = self.stats();
            if done(&stats) {
                return stats;
            }
            changed.await;
        }
    }

    /// The config it serves by.
    pub fn config(&self) -> &ServerConfig {
        &self.state.config
    }

    /// Models resident now (loaded or loading).
    pub fn resident_models(&self) -> Vec<String> {
        lock(&self.state.residency)
            .models()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

/// Accepts connections until the server stops; `alive` is held by this
/// task and by every connection task.
async fn accept(
    listener: TcpListener,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
    alive: mpsc::Sender<()>,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::debug!(%error, "sim accept failed");
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let mut shutdown = shutdown.clone();
        let alive = alive.clone();
        tokio::spawn(async move {
            let _alive = alive;
            let service = service_fn(move |req| {
                let state = state.clone();
                async move {
                    let response = handle(state.clone(), req).await;
                    state.changed.notify_waiters();
                    response
                }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = shutdown.changed() => {}
            }
        });
    }
}
