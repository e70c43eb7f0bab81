//! The access log's writer: each line goes to standard output from a
//! thread of its own, through a bounded queue, so that a reader of the
//! gateway's standard output that is slow or stopped (a log shipper
//! stalled, a full pipe) never blocks a request, readiness or the exit.
//! Past [`QUEUE`] lines waiting, a line is dropped and counted
//! ([`DROPPED_SERIES`]); a write that fails (the reader gone) loses that
//! line and the writer goes on.

use std::io::Write;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::OnceLock;

/// Lines that may wait for the writer: with values clipped
/// (`access_log.rs`), a few MiB at most.
pub const QUEUE: usize = 8_192;

/// The counter of access-log lines dropped, the writer behind.
pub const DROPPED_SERIES: &str = "gateway_access_log_dropped_total";

/// Queues lines for a writer thread.
#[derive(Debug, Clone)]
pub struct Sink(SyncSender<String>);

impl Sink {
    /// A writer thread on `out`, with room for `queue` lines waiting. If
    /// the thread cannot start, every line is dropped and counted.
    pub fn new(queue: usize, out: impl Write + Send + 'static) -> Self {
        let (sender, lines) = sync_channel(queue);
        let spawned = std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || write_all(&lines, out));
        if let Err(error) = spawned {
            tracing::warn!(%error, "the access log's writer did not start: its lines are dropped");
        }
        Self(sender)
    }

    /// Queues `line` (without its newline); never waits. False, and
    /// counted, when it was dropped.
    pub fn send(&self, line: String) -> bool {
        match self.0.try_send(line) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                metrics::counter!(DROPPED_SERIES).increment(1);
                false
            }
        }
    }
}

/// The process's access log on standard output, started at its first
/// line.
pub fn stdout() -> &'static Sink {
    static SINK: OnceLock<Sink> = OnceLock::new();
    SINK.get_or_init(|| Sink::new(QUEUE, std::io::stdout()))
}

/// Writes each line as it comes, flushing once no more wait.
fn write_all(lines: &Receiver<String>, out: impl Write) {
    let mut out = std::io::BufWriter::new(out);
    while let Ok(line) = lines.recv() {
        let _ = writeln!(out, "{line}");
        while let Ok(line) = lines.try_recv() {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{channel, Sender};
    use std::sync::{Arc, Mutex};

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
    fn a_stopped_reader_never_blocks_a_line_past_the_queue_is_dropped() {
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
        drop(held);
    }

    /// Every line written, in order, each on a line of its own.
    #[test]
    fn lines_are_written_in_order() {
        let written = Arc::new(Mutex::new(Vec::new()));
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
        let sink = Sink::new(16, Shared(written.clone()));
        for i in 0..10 {
            assert!(sink.send(format!("line {i}")));
        }
        let want: String = (0..10).map(|i| format!("line {i}\n")).collect();
        // Bounded: 10 s of 1 ms waits.
        for _ in 0..10_000 {
            if written.lock().unwrap().len() >= want.len() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(
            String::from_utf8(written.lock().unwrap().clone()).unwrap(),
            want
        );
    }
}
