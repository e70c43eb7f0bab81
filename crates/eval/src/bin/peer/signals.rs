//! SIGINT and SIGTERM, caught so that the comparison stops cleanly: the
//! caller drops the run in progress and kills and reaps the router
//! (`router::stop_all`) before it exits. Without them the default action
//! ends the process at once and its router keeps running, orphaned.

use tokio::signal::unix::{signal, Signal as Stream, SignalKind};

/// A signal that stops the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Interrupt,
    Terminate,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        }
    }

    /// Its number, for the exit code (128 + it), as a shell reports it.
    pub fn number(self) -> u8 {
        match self {
            Signal::Interrupt => 2,
            Signal::Terminate => 15,
        }
    }
}

/// The handlers of SIGINT and SIGTERM, installed.
#[derive(Debug)]
pub struct Signals {
    interrupt: Stream,
    terminate: Stream,
}

impl Signals {
    /// Installs both handlers: from here on the signals no longer end the
    /// process by themselves. Inside a Tokio runtime.
    pub fn install() -> Result<Self, String> {
        let handler = |kind| signal(kind).map_err(|e| format!("cannot catch signals: {e}"));
        Ok(Signals {
            interrupt: handler(SignalKind::interrupt())?,
            terminate: handler(SignalKind::terminate())?,
        })
    }

    /// The next of the two to arrive.
    pub async fn received(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::Interrupt,
            _ = self.terminate.recv() => Signal::Terminate,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead as _, BufReader};
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    use tokio::time::Instant;

    /// The environment variable that holds the child's flags (separated
    /// by newlines): set, `peer_child` runs the program with them.
    const CHILD_ARGS: &str = "PEER_SIGNAL_TEST_ARGS";

    /// A stand-in for either router: answers every GET 200 (their health
    /// routes) and never answers a POST, so that the run is still going
    /// when the signal comes.
    const FAKE_ROUTER: &str = r#"#!/usr/bin/env python3
import http.server, sys, time
a = sys.argv
port = int(a[a.index('--port') + 1]) if '--port' in a else int(a[a.index('--listen') + 1].rsplit(':', 1)[1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header('content-length', '0'); self.end_headers()
    def do_POST(self):
        time.sleep(3600)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(('127.0.0.1', port), H).serve_forever()
"#;

    /// Not a test by itself: the program the test below starts, in a
    /// process of its own (this test binary run again), with the flags
    /// of [`CHILD_ARGS`].
    #[test]
    #[ignore = "run by sigterm_kills_and_reaps_the_router, in a child process"]
    fn peer_child() {
        let Ok(args) = std::env::var(CHILD_ARGS) else {
            return;
        };
        let code = crate::entry(args.lines().map(str::to_owned));
        std::process::exit(i32::from(code));
    }

    fn alive(pid: u32) -> bool {
        Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn sigterm_kills_and_reaps_the_router() {
        let dir = std::env::temp_dir().join(format!("peer-signal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("fake-router");
        std::fs::write(&fake, FAKE_ROUTER).unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let fake = fake.to_str().unwrap();
        let logs = dir.join("logs");
        let mut args = vec!["--logs", logs.to_str().unwrap()];
        for program in ["--gateway", "--bare-proxy", "--vllm-router"] {
            args.extend([program, fake]);
        }
        // Rows of 5 s: the bare proxy's still runs when its PID is read and
        // checked, however slow the machine (the signal ends it at once).
        args.extend(["--rates", "20", "--duration", "5", "--no-max-rate"]);
        args.extend(["--policies", "round_robin", "--backends", "2"]);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "signals::tests::peer_child",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_ARGS, args.join("\n"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The direct row first (5 s), then the bare proxy's row:
        // its router's PID on stderr.
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = Vec::new();
        let mut router = None;
        for line in stderr.by_ref() {
            let line = line.unwrap();
            if let Some(pid) = line.split("started, pid ").nth(1) {
                router = pid.split(',').next().and_then(|p| p.parse::<u32>().ok());
                break;
            }
            seen.push(line);
        }
        // The rest read until the end, so that the program's writes to its
        // stderr do not fail.
        let rest = std::thread::spawn(move || stderr.map_while(Result::ok).collect::<Vec<_>>());
        let Some(router) = router else {
            let _ = child.kill();
            panic!("no router started: {seen:#?}");
        };
        assert!(alive(router), "the router {router} runs before the signal");
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let until = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > until {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The router is gone, reaped, by the time the program has exited.
        let survived = alive(router);
        if survived {
            // Not left behind by a failing test: the router this test
            // started, by its PID.
            let _ = Command::new("kill")
                .args(["-KILL", &router.to_string()])
                .status();
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!survived, "router {router} survived the SIGTERM");
        let status = status.expect("the program exits within 20 s of SIGTERM");
        let rest = rest.join().unwrap();
        assert_eq!(status.code(), Some(128 + 15), "{status}: {rest:#?}");
        assert!(
            rest.iter().any(|line| line.contains("stopped by SIGTERM")),
            "{rest:#?}"
        );
    }
}
