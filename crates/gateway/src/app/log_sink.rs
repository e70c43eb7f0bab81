//! The access log's writer: each line goes to standard output from a
//! thread of its own, through a bounded queue, so that a reader of the
//! gateway's standard output that is slow or stopped (a log shipper
//! stalled, a full pipe) never blocks a request, readiness or the exit.
//! Past [`QUEUE`] lines waiting, a line is dropped and counted
//! ([`DROPPED_SERIES`]); so are the lines of a write that fails (the
//! reader gone), and the writer goes on. At the exit, the lines queued
//! get a bounded time to be written ([`Sink::flush`]); those that are not
//! are counted too, and the binary says how many were lost.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

/// Lines that may wait for the writer: with values clipped
/// (`access_log.rs`), a few MiB at most.
pub const QUEUE: usize = 8_192;

/// The counter of access-log lines lost: dropped with the writer behind,
/// or not written (standard output closed).
pub const DROPPED_SERIES: &str = "gateway_access_log_dropped_total";

/// What the writer thread is sent.
enum Message {
    Line(String),
    /// Answer once every line before it is written (or lost).
    Flush(SyncSender<()>),
}

/// Queues lines for a writer thread.
#[derive(Debug, Clone)]
pub struct Sink {
    queue: SyncSender<Message>,
    counts: Arc<Counts>,
}

/// Lines queued, and lines the writer is done with (written or lost).
#[derive(Debug, Default)]
struct Counts {
    queued: AtomicU64,
    done: AtomicU64,
    lost: AtomicU64,
}

impl Counts {
    fn lose(&self, lines: u64) {
        self.lost.fetch_add(lines, Ordering::Relaxed);
        metrics::counter!(DROPPED_SERIES).increment(lines);
    }
}

impl Sink {
    /// A writer thread on `out`, with room for `queue` lines waiting. If
    /// the thread cannot start, every line is dropped and counted.
    pub fn new(queue: usize, out: impl Write + Send + 'static) -> Self {
        let (sender, lines) = sync_channel(queue);
        let counts = Arc::new(Counts::default());
        // The series exists from the start, at 0.
        metrics::counter!(DROPPED_SERIES).increment(0);
        let writer = Arc::clone(&counts);
        let spawned = std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || write_all(&lines, out, &writer));
        if let Err(error) = spawned {
            tracing::warn!(%error, "the access log's writer did not start: its lines are dropped");
        }
        Self {
            queue: sender,
            counts,
        }
    }

    /// Queues `line` (without its newline); never waits. False, and
    /// counted, when it was dropped.
    pub fn send(&self, line: String) -> bool {
        match self.queue.try_send(Message::Line(line)) {
            Ok(()) => {
                self.counts.queued.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counts.lose(1);
                false
            }
        }
    }

    /// Waits at most `within` for the lines queued to be written (at the
    /// exit); the lines lost in all, those still queued counted lost.
    pub fn flush(&self, within: Duration) -> u64 {
        let (ack, acked) = sync_channel(1);
        let deadline = Instant::now() + within;
        let mut flush = Message::Flush(ack);
        // Room in the queue for the request, then its answer, by the
        // deadline (a writer blocked on a stopped reader never answers).
        loop {
            match self.queue.try_send(flush) {
                Ok(()) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let _ = acked.recv_timeout(left);
                    break;
                }
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    flush = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => break,
            }
        }
        let counts = &self.counts;
        let unwritten = counts
            .queued
            .load(Ordering::Relaxed)
            .saturating_sub(counts.done.load(Ordering::Relaxed));
        if unwritten > 0 {
            counts.lose(unwritten);
        }
        counts.lost.load(Ordering::Relaxed)
    }
}

/// The process's access log on standard output, its writer started at
/// the first call.
pub fn stdout() -> &'static Sink {
    static SINK: OnceLock<Sink> = OnceLock::new();
    SINK.get_or_init(|| Sink::new(QUEUE, std::io::stdout()))
}

/// Writes the lines as they come, in batches of those waiting; a batch
/// that cannot be written is counted lost.
fn write_all(queue: &Receiver<Message>, mut out: impl Write, counts: &Counts) {
    let mut batch = String::new();
    while let Ok(first) = queue.recv() {
        let mut lines = 0;
        let mut acks = Vec::new();
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Line(line) => {
                    batch.push_str(&line);
                    batch.push('\n');
                    lines += 1;
                }
                Message::Flush(ack) => acks.push(ack),
            }
            next = queue.try_recv().ok();
        }
        if lines > 0
            && out
                .write_all(batch.as_bytes())
                .and_then(|()| out.flush())
                .is_err()
        {
            counts.lose(lines);
        }
        counts.done.fetch_add(lines, Ordering::Relaxed);
        batch.clear();
        for ack in acks {
            let _ = ack.try_send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{channel, Sender};
    use std::sync::Mutex;

    /// A reader that stops reading: the first write says so and blocks
    /// until the test ends.
    struct Stuck {
        blocked: Sender<()>,
        release: Arc<Mutex<()>>,
    }

    impl Write for Stuck {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.blocked.send(());
            drop(self.release.lock());
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stopped_reader_blocks_no_line_and_the_lines_it_holds_are_counted_lost() {
        let release = Arc::new(Mutex::new(()));
        let held = release.lock().unwrap();
        let (blocked, writer_blocked) = channel();
        let sink = Sink::new(
            4,
            Stuck {
                blocked,
                release: release.clone(),
            },
        );
        // The writer takes the first line and blocks on it.
        assert!(sink.send("first".into()));
        writer_blocked.recv().unwrap();
        // Four wait; the next are dropped at once.
        for i in 0..4 {
            assert!(sink.send(format!("line {i}")), "line {i}");
        }
        assert!(!sink.send("dropped".into()));
        assert!(!sink.send("dropped too".into()));
        // At the exit: two dropped, five never written.
        assert_eq!(sink.flush(Duration::from_millis(50)), 7);
        drop(held);
    }

    /// Collects what is written.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_are_written_in_order_and_flushed_at_the_exit() {
        let written = Shared::default();
        let sink = Sink::new(16, written.clone());
        for i in 0..10 {
            assert!(sink.send(format!("line {i}")));
        }
        assert_eq!(sink.flush(Duration::from_secs(10)), 0);
        let want: String = (0..10).map(|i| format!("line {i}\n")).collect();
        assert_eq!(
            String::from_utf8(written.0.lock().unwrap().clone()).unwrap(),
            want
        );
    }

    /// A closed standard output.
    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_that_cannot_be_written_are_counted_lost() {
        let sink = Sink::new(16, Closed);
        for i in 0..3 {
            assert!(sink.send(format!("line {i}")));
        }
        assert_eq!(sink.flush(Duration::from_secs(10)), 3);
    }
}
