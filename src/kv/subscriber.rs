//! The IO of a backend's KV-cache events: a ZeroMQ SUB socket on vLLM's
//! publisher, a DEALER on its replay socket, the batches handed to the
//! tracker (`tracker.rs`) that writes the backend's set in [`KvIndex`].
//! How it connects and replays: [`subscribe`]'s docs.

use std::future::poll_fn;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use zeromq::{DealerSocket, Socket, SocketEvent, SocketRecv, SocketSend, SubSocket, ZmqMessage};

use super::endpoint::KvEndpoint;
use super::events::decode_batch;
use super::index::KvIndex;
use super::tracker::{Input, Step, Tracker};
use crate::backend::BackendId;
use crate::error::NoRuntime;
use crate::task::BackgroundTask;

/// The first wait before a new socket, after a failed one: 100 ms.
pub const RETRY_MIN: Duration = Duration::from_millis(100);
/// The longest wait before a new socket: 5 s.
pub const RETRY_MAX: Duration = Duration::from_secs(5);
/// How long a replay may take, from its request to its end marker: 30 s.
pub const REPLAY_TIMEOUT: Duration = Duration::from_secs(30);

/// Batches a replay may give, at most (vLLM keeps 10,000).
const MAX_REPLAYED: usize = 20_000;
/// vLLM's end-of-replay sequence number.
const END_SEQ: u64 = u64::MAX;

/// Keeps backend `backend`'s blocks in `index` as the KV-cache events of
/// the vLLM server at `endpoint` describe them, until the returned task
/// is dropped. Warnings go through `tracing`.
///
/// # Connections
///
/// zeromq 0.7's SUB socket reconnects on its own: when the publisher's
/// connection ends (vLLM stopped, or restarted on the same port), a
/// background task of the socket reconnects with exponential backoff
/// (100 ms doubling, at most 30 s between tries, jittered) and subscribes
/// again, and the socket's monitor reports `Disconnected` and then
/// `Connected`. The subscriber watches that monitor: on each
/// reconnection it clears the backend's blocks (the server may have
/// restarted with an empty cache, and batches were lost in between) and
/// starts over with a replay from 0. Should the socket fail instead (its
/// first connection refused for 30 s, or an error), the subscriber drops
/// it and connects a new one, waiting [`RETRY_MIN`] doubling to
/// [`RETRY_MAX`] between tries.
///
/// # Replays
///
/// On each connection the subscriber asks the replay socket for every
/// batch from 0 (what vLLM published before this subscriber joined, up to
/// its last 10,000), and on each gap in the sequence numbers for the
/// batches from the first missing one; a replay that gets no answer within
/// [`REPLAY_TIMEOUT`] counts as lost (the blocks are cleared). Live
/// batches received meanwhile are held, and applied after it.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use tower_model_balance::backend::BackendId;
/// use tower_model_balance::kv::{subscribe, KvEndpoint, KvIndex, PromptBlocks};
///
/// let index = KvIndex::default();
/// let gpu = BackendId::new("gpu-0").unwrap();
/// // vLLM: --kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq",
/// //   "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558"}'
/// let endpoint = KvEndpoint::new("tcp://10.0.0.7:5557")
///     .unwrap()
///     .with_replay("tcp://10.0.0.7:5558")
///     .unwrap();
/// let events = subscribe(index.clone(), gpu.clone(), endpoint).unwrap();
/// let prompt: Vec<u32> = (0..512).collect();
/// let blocks = PromptBlocks::new(&prompt, index.block_size().unwrap_or(16));
/// println!("gpu-0 holds {} leading blocks", index.matched(&gpu, &blocks));
/// drop(events); // the subscription ends
/// # }
/// ```
///
/// # Errors
///
/// [`NoRuntime`] when called outside a Tokio runtime.
pub fn subscribe(
    index: KvIndex,
    backend: BackendId,
    endpoint: KvEndpoint,
) -> Result<BackgroundTask, NoRuntime> {
    let runtime = NoRuntime::current()?;
    let tracker = Tracker::new(index, backend, endpoint.replay().is_some());
    Ok(BackgroundTask::new(runtime.spawn(run(tracker, endpoint))))
}

type Replay = Pin<Box<dyn std::future::Future<Output = Option<Vec<(u64, Input)>>> + Send>>;

async fn run(mut tracker: Tracker, endpoint: KvEndpoint) {
    let mut wait = RETRY_MIN;
    loop {
        let mut socket = SubSocket::new();
        let mut monitor = socket.monitor();
        let connected = async {
            socket.connect(endpoint.publisher()).await?;
            socket.subscribe("").await
        }
        .await;
        match connected {
            Ok(()) => {
                wait = RETRY_MIN;
                // The first connection's own `Connected`.
                while next_now(&mut monitor).is_some() {}
                let step = tracker.connected();
                session(&mut tracker, &endpoint, &mut socket, &mut monitor, step).await;
            }
            Err(error) => tracing::warn!(
                backend = tracker.backend().as_str(),
                publisher = endpoint.publisher(),
                %error,
                "KV-cache event publisher unreachable"
            ),
        }
        drop(socket);
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RETRY_MAX);
    }
}

/// Receives on one socket until it fails.
async fn session(
    tracker: &mut Tracker,
    endpoint: &KvEndpoint,
    socket: &mut SubSocket,
    monitor: &mut (impl Stream<Item = SocketEvent> + Unpin),
    mut step: Step,
) {
    let mut replay: Option<Replay> = None;
    let mut monitoring = true;
    loop {
        if let Step::Replay(from) = step {
            replay = endpoint
                .replay()
                .map(|address| Box::pin(fetch_replay(address.to_owned(), from)) as Replay);
        }
        step = tokio::select! {
            biased;
            event = poll_fn(|cx| Pin::new(&mut *monitor).poll_next(cx)), if monitoring => match event {
                Some(SocketEvent::Connected(..)) => {
                    tracing::warn!(
                        backend = tracker.backend().as_str(),
                        publisher = endpoint.publisher(),
                        "KV-cache event publisher reconnected: blocks cleared"
                    );
                    replay = None;
                    tracker.connected()
                }
                Some(_) => Step::Continue,
                None => {
                    monitoring = false;
                    Step::Continue
                }
            },
            answer = async {
                match replay.as_mut() {
                    Some(replay) => replay.await,
                    None => std::future::pending().await,
                }
            }, if replay.is_some() => {
                replay = None;
                match answer {
                    Some(batches) => tracker.replayed(batches),
                    None => {
                        tracing::warn!(
                            backend = tracker.backend().as_str(),
                            replay = endpoint.replay(),
                            "KV-cache event replay failed: blocks cleared"
                        );
                        tracker.replay_failed()
                    }
                }
            }
            message = socket.recv() => match message {
                Ok(message) => match frames(&message) {
                    Some((seq, payload)) => tracker.live(seq, decode_batch(payload)),
                    None => Step::Continue,
                },
                Err(error) => {
                    // The peer's stream failed; the socket reconnects on
                    // its own, and a socket with no peer waits for one.
                    tracing::warn!(backend = tracker.backend().as_str(), %error, "KV-cache event stream failed");
                    if matches!(error, zeromq::ZmqError::NoMessage) {
                        return;
                    }
                    Step::Continue
                }
            },
        };
    }
}

/// `[topic, seq, payload]`'s sequence number and payload.
fn frames(message: &ZmqMessage) -> Option<(u64, &[u8])> {
    match (message.len(), message.get(1), message.get(2)) {
        (3, Some(seq), Some(payload)) => {
            Some((u64::from_be_bytes(seq[..].try_into().ok()?), payload))
        }
        _ => None,
    }
}

/// Every batch from `from` on, from the replay socket at `address`:
/// `None` on any failure or after [`REPLAY_TIMEOUT`].
async fn fetch_replay(address: String, from: u64) -> Option<Vec<(u64, Input)>> {
    let replay = async {
        let mut socket = DealerSocket::new();
        socket.connect(&address).await.ok()?;
        let request = vec![Bytes::new(), Bytes::copy_from_slice(&from.to_be_bytes())];
        socket
            .send(ZmqMessage::try_from(request).ok()?)
            .await
            .ok()?;
        let mut batches = Vec::new();
        loop {
            let message = socket.recv().await.ok()?;
            // `["", topic, seq, payload]`; the end: `["", "", END_SEQ, ""]`.
            if message.len() != 4 {
                return None;
            }
            let seq = u64::from_be_bytes(message.get(2)?[..].try_into().ok()?);
            if seq == END_SEQ {
                return Some(batches);
            }
            if batches.len() == MAX_REPLAYED {
                return None;
            }
            batches.push((seq, decode_batch(message.get(3)?)));
        }
    };
    tokio::time::timeout(REPLAY_TIMEOUT, replay)
        .await
        .ok()
        .flatten()
}

/// The monitor's next event if one is waiting; `None` if none is.
fn next_now<M: Stream<Item = SocketEvent> + Unpin>(monitor: &mut M) -> Option<SocketEvent> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match Pin::new(monitor).poll_next(&mut cx) {
        std::task::Poll::Ready(event) => event,
        std::task::Poll::Pending => None,
    }
}
