//! Probe failures as warnings, rate-limited: the first failure of a
//! backend's signal is logged at `warn`, then at most one a minute while it
//! keeps failing (each at `debug`); a success re-arms the first warning.

use std::collections::HashMap;
use std::error::Error;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::BackendId;

/// Least time between two warnings of one backend's signal.
const EVERY: Duration = Duration::from_secs(60);
/// Most (backend, signal) pairs remembered; past it the memory is cleared
/// (a fleet churning through backends gets a warning again, not a leak).
const MAX_KEYS: usize = 4096;

static LAST: Mutex<Option<HashMap<(BackendId, &'static str), Instant>>> = Mutex::new(None);

/// Whether a failure of `signal` on `backend` at `now` should be a
/// warning (false: only debug).
fn due(backend: &BackendId, signal: &'static str, now: Instant) -> bool {
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    let last = last.get_or_insert_with(HashMap::new);
    if last.len() >= MAX_KEYS {
        last.clear();
    }
    match last.get(&(backend.clone(), signal)) {
        Some(&at) if now.saturating_duration_since(at) < EVERY => false,
        _ => {
            last.insert((backend.clone(), signal), now);
            true
        }
    }
}

/// Logs a failed probe of `signal` (`"readiness"`, `"repository index"`,
/// `"metrics"`) on `backend`, with the error's whole `source()` chain: a
/// transport error's cause (`invalid peer certificate: UnknownIssuer`) is
/// in its sources, not in its message (`client error (Connect)`).
pub(crate) fn failed(backend: &BackendId, signal: &'static str, error: &(dyn Error + 'static)) {
    let error = Chain(error);
    if due(backend, signal, Instant::now()) {
        tracing::warn!(backend = %backend, signal, %error, "probe failed (warned at most once a minute per backend and signal)");
    } else {
        tracing::debug!(backend = %backend, signal, %error, "probe failed");
    }
}

/// An error and its sources, `: `-separated; a source whose message
/// already ends the line (an error that prints its cause too) is not
/// repeated.
struct Chain<'a>(&'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = self.0.to_string();
        let mut next = self.0.source();
        while let Some(source) = next {
            let message = source.to_string();
            if !line.ends_with(&message) {
                line.push_str(": ");
                line.push_str(&message);
            }
            next = source.source();
        }
        f.write_str(&line)
    }
}

/// `signal` answered on `backend`: its next failure warns at once.
pub(crate) fn recovered(backend: &BackendId, signal: &'static str) {
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(last) = last.as_mut() {
        last.remove(&(backend.clone(), signal));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_logged_with_its_causes_each_once() {
        let tls = std::io::Error::other("invalid peer certificate: UnknownIssuer");
        #[derive(Debug)]
        struct Connect(std::io::Error);
        impl fmt::Display for Connect {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("client error (Connect)")
            }
        }
        impl Error for Connect {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let error = crate::health::probe::ProbeError::Transport(Box::new(Connect(tls)));
        assert_eq!(
            Chain(&error).to_string(),
            "probe transport error: client error (Connect): invalid peer certificate: UnknownIssuer"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn one_warning_a_minute_per_backend_and_signal() {
        let a = BackendId::new("warn-test-a").unwrap();
        let b = BackendId::new("warn-test-b").unwrap();
        let t0 = Instant::now();
        assert!(due(&a, "metrics", t0));
        assert!(!due(&a, "metrics", t0 + Duration::from_secs(59)));
        assert!(due(&a, "readiness", t0), "another signal");
        assert!(due(&b, "metrics", t0), "another backend");
        assert!(due(&a, "metrics", t0 + EVERY));
        recovered(&a, "metrics");
        assert!(due(&a, "metrics", t0 + EVERY), "re-armed by a success");
    }
}
