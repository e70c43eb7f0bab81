//! A TCP proxy on 127.0.0.1 in front of one address, to break a client's
//! connections on purpose: [`CutProxy::cut`] closes every proxied
//! connection at once (a reset, as a dropped network path or a restarted
//! load balancer would), [`CutProxy::pause`] also turns new connections
//! away until [`CutProxy::resume`]. Real sockets, both ways, no mocks.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// What the connections obey: each was let through under one
/// `generation` and is cut when it moves on.
#[derive(Debug, Clone, Copy, Default)]
struct Gate {
    generation: u64,
    paused: bool,
}

#[derive(Debug, Default)]
struct Counts {
    accepted: AtomicU64,
    refused: AtomicU64,
    cut: AtomicU64,
    open: AtomicU64,
    /// Woken on every count's change.
    changed: Notify,
}

impl Counts {
    fn add(&self, count: &AtomicU64) {
        count.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }
}

/// A proxy on `127.0.0.1:0` that forwards every connection to its target.
/// Dropping it cuts every connection and stops listening.
#[derive(Debug)]
pub struct CutProxy {
    addr: SocketAddr,
    gate: watch::Sender<Gate>,
    counts: Arc<Counts>,
    accept: JoinHandle<()>,
}

impl CutProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `target`.
    /// Needs a Tokio runtime (it spawns its accept loop).
    pub fn start(target: SocketAddr) -> Self {
        let std = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        std.set_nonblocking(true).expect("a non-blocking listener");
        let addr = std.local_addr().expect("the proxy's address");
        let listener = TcpListener::from_std(std).expect("a Tokio listener");
        let (gate, gates) = watch::channel(Gate::default());
        let counts = Arc::new(Counts::default());
        let accept = tokio::spawn(accept(listener, target, gates, counts.clone()));
        Self {
            addr,
            gate,
            counts,
            accept,
        }
    }

    /// `http://127.0.0.1:PORT`, the proxy's address as a client URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Closes every proxied connection now (with a reset, both sides); new
    /// connections are let through as before.
    pub fn cut(&self) {
        self.gate.send_modify(|g| g.generation += 1);
    }

    /// Cuts every proxied connection and, until [`resume`](Self::resume),
    /// closes each new one as soon as it is accepted, before any byte
    /// reaches the target: the client sees its connection reset.
    pub fn pause(&self) {
        self.gate.send_modify(|g| {
            g.generation += 1;
            g.paused = true;
        });
    }

    /// Lets new connections through again.
    pub fn resume(&self) {
        self.gate.send_modify(|g| g.paused = false);
    }

    /// Connections accepted and forwarded so far.
    pub fn accepted(&self) -> u64 {
        self.counts.accepted.load(Ordering::SeqCst)
    }

    /// Connections turned away while paused, so far.
    pub fn refused(&self) -> u64 {
        self.counts.refused.load(Ordering::SeqCst)
    }

    /// Forwarded connections closed by a cut or a pause, so far.
    pub fn cuts(&self) -> u64 {
        self.counts.cut.load(Ordering::SeqCst)
    }

    /// Forwarded connections open now.
    pub fn open(&self) -> u64 {
        self.counts.open.load(Ordering::SeqCst)
    }

    /// Waits until `done` holds of the counts, checking it again on every
    /// connection accepted, refused, cut or closed.
    pub async fn until(&self, done: impl Fn(&Self) -> bool) {
        loop {
            // Registered before the check: no change in between is missed.
            let changed = self.counts.changed.notified();
            if done(self) {
                return;
            }
            changed.await;
        }
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.pause();
    }
}

/// Accepts until aborted; each connection is forwarded by a task of its
/// own, or closed at once while paused.
async fn accept(
    listener: TcpListener,
    target: SocketAddr,
    mut gates: watch::Receiver<Gate>,
    counts: Arc<Counts>,
) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            continue;
        };
        // One read of both: a connection is either refused, or let through
        // under a generation that a later pause or cut moves past.
        let gate = *gates.borrow_and_update();
        if gate.paused {
            counts.add(&counts.refused);
            let _ = inbound.set_zero_linger();
            drop(inbound);
            continue;
        }
        counts.open.fetch_add(1, Ordering::SeqCst);
        counts.add(&counts.accepted);
        tokio::spawn(forward(
            inbound,
            target,
            gates.clone(),
            gate.generation,
            counts.clone(),
        ));
    }
}

/// Copies both ways until either side closes or the generation moves past
/// `generation`; then resets both sockets.
async fn forward(
    mut inbound: TcpStream,
    target: SocketAddr,
    mut gates: watch::Receiver<Gate>,
    generation: u64,
    counts: Arc<Counts>,
) {
    if let Ok(mut outbound) = TcpStream::connect(target).await {
        let _ = inbound.set_nodelay(true);
        let _ = outbound.set_nodelay(true);
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
            // Checks the value now first: a cut between the accept and
            // here still closes this connection.
            _ = gates.wait_for(|g| g.generation != generation) => {
                counts.add(&counts.cut);
            }
        }
        let _ = outbound.set_zero_linger();
    }
    let _ = inbound.set_zero_linger();
    counts.open.fetch_sub(1, Ordering::SeqCst);
    counts.changed.notify_waiters();
}
