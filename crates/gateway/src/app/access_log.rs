//! The access log: one line per request of the client listener, every
//! route, on standard output (the gateway's own messages go to standard
//! error), as text (`key=value`, a value quoted with Rust's string
//! escapes when it has anything but visible ASCII, or `=`, `"`, `\`) or
//! JSON (`--access-log`). An inference
//! request's line is written when its answer's body ends; any other's when
//! its answer is made. Every answer carries the request's ID in
//! `x-request-id`, with the access log on or off.
//!
//! | key | what |
//! | --- | --- |
//! | `id` | the request's ID: the client's `x-request-id` (up to 128 visible ASCII characters), else one the gateway makes; sent to the backend and back to the client in `x-request-id` |
//! | `method`, `path` | the request's |
//! | `model` | the body's `model` (or the KServe v2 path's), if it names one |
//! | `status` | the answer's status |
//! | `backend`, `reason` | the backend the balancer picked and why (`resident_owner`, `cold_owner`, `spill`, `panic`, `update`): the routing receipt's |
//! | `attempts` | how many times the request went to a backend: 1, more with a hedge's backup or a retry, 0 when it was never sent (inference routes) |
//! | `ttft_ms` | from the request's arrival to the answer's first body frame (an event stream's first token) |
//! | `duration_ms` | from the request's arrival to the answer's end |
//! | `ended` | `complete`, or the gateway's error code: why it answered itself (`not_found`, `invalid_route`, …) or ended the answer early (`backend_stalled`, `gateway_draining`, `request_timeout`, `stream_failed`, `client_gone`) |

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::HeaderValue;
use tokio::time::Instant;
use tower_model_balance::balance::RoutingReceipt;

/// The access log's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AccessLog {
    /// No access log (the default).
    #[default]
    Off,
    /// `key=value` pairs, space-separated.
    Text,
    /// One JSON object a line.
    Json,
}

/// The header carrying the request's ID.
pub const REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");

/// A request's ID: the client's `x-request-id` when it is usable (1 to
/// 128 visible ASCII characters), else `gw-`, this process's random tag
/// (16 hex digits, drawn at its first ID) and a count: unique across the
/// replicas of a fleet and their restarts.
pub fn request_id(given: Option<&HeaderValue>) -> HeaderValue {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    static TAG: OnceLock<u64> = OnceLock::new();
    if let Some(value) = given {
        let bytes = value.as_bytes();
        if (1..=128).contains(&bytes.len()) && bytes.iter().all(|b| b.is_ascii_graphic()) {
            return value.clone();
        }
    }
    let tag = TAG.get_or_init(process_tag);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    HeaderValue::try_from(format!("gw-{tag:016x}-{n:x}")).unwrap_or(HeaderValue::from_static("gw"))
}

/// 64 random bits: std's per-process random hash keys (`RandomState`,
/// seeded from the OS), over the process ID and the time.
fn process_tag() -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    std::process::id().hash(&mut hasher);
    std::time::SystemTime::now().hash(&mut hasher);
    hasher.finish()
}

/// A response whose access-log line its body writes when it ends (the
/// inference routes', `forward.rs`): [`log_requests`] leaves it be.
#[derive(Debug, Clone, Copy)]
pub struct Deferred;

/// The error code of an answer the gateway made itself, for its line's
/// `ended` (set by `ErrorReply`).
#[derive(Debug, Clone, Copy)]
pub struct ErrorCode(pub &'static str);

/// The client listener's middleware: gives the request its ID (sent on to
/// a backend, and back in the answer), and with the log on an [`Entry`] in
/// its extensions, which the inference handler takes; for any other route
/// writes the line once the answer is made.
pub async fn log_requests(
    State(format): State<AccessLog>,
    mut req: Request,
    next: Next,
) -> Response {
    let id = request_id(req.headers().get(&REQUEST_ID));
    req.headers_mut().insert(REQUEST_ID, id.clone());
    let entry = (format != AccessLog::Off).then(|| Entry {
        format,
        id: id.clone(),
        method: req.method().clone(),
        path: req.uri().path().to_owned(),
        model: None,
        started: Instant::now(),
        status: 0,
        backend: None,
        reason: None,
        attempts: None,
        first_frame: None,
    });
    if let Some(entry) = &entry {
        req.extensions_mut().insert(entry.clone());
    }
    let mut response = next.run(req).await;
    response.headers_mut().insert(REQUEST_ID, id);
    if let Some(mut entry) = entry {
        if response.extensions().get::<Deferred>().is_none() {
            entry.status = response.status().as_u16();
            let code = response.extensions().get::<ErrorCode>();
            entry.write(code.map_or("complete", |code| code.0));
        }
    }
    response
}

/// An inference request's line until its answer's head: written on drop
/// as `client_gone` with status 499 (nginx's "client closed request") if
/// the client hung up before then, as the handler's future is dropped.
#[derive(Debug)]
pub struct Pending(Option<Entry>);

impl Pending {
    /// `entry`, written on drop unless taken.
    pub fn new(entry: Option<Entry>) -> Self {
        Self(entry)
    }

    /// The line, to fill in.
    pub fn get_mut(&mut self) -> Option<&mut Entry> {
        self.0.as_mut()
    }

    /// The line, no longer written on drop.
    pub fn take(&mut self) -> Option<Entry> {
        self.0.take()
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut entry) = self.0.take() {
            entry.status = 499;
            entry.write("client_gone");
        }
    }
}

/// One request's line, filled in as the request goes.
#[derive(Debug, Clone)]
pub struct Entry {
    pub format: AccessLog,
    pub id: HeaderValue,
    pub method: http::Method,
    pub path: String,
    pub model: Option<String>,
    pub started: Instant,
    pub status: u16,
    pub backend: Option<String>,
    pub reason: Option<&'static str>,
    /// Counted by the backends' endpoints (inference routes only).
    pub attempts: Option<Attempts>,
    pub first_frame: Option<Instant>,
}

/// How many times a request went to a backend — its first attempt, a
/// hedge's backup, each retry — counted by the backend's endpoint
/// (`phases.rs`) from the request's extensions, which its copies share.
#[derive(Debug, Clone, Default)]
pub struct Attempts(Arc<AtomicU32>);

impl Attempts {
    /// One more attempt sent.
    pub fn note(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// The attempts sent so far.
    pub fn count(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Entry {
    /// Notes the routing receipt of the answer, if it carries one.
    pub fn receipt(&mut self, receipt: Option<&RoutingReceipt>) {
        if let Some(receipt) = receipt {
            self.backend = Some(receipt.backend.to_string());
            self.reason = Some(receipt.reason.as_str());
        }
    }

    /// Writes the line, the answer having ended as `ended` says.
    pub fn write(&self, ended: &str) {
        let line = match self.format {
            AccessLog::Off => return,
            AccessLog::Text => self.text(ended),
            AccessLog::Json => self.json(ended),
        };
        // Never blocks on a reader of standard output (`log_sink.rs`).
        super::log_sink::stdout().send(line);
    }

    fn millis(&self, at: Option<Instant>) -> Option<f64> {
        at.map(|at| (at - self.started).as_secs_f64() * 1e3)
    }

    fn text(&self, ended: &str) -> String {
        let mut line = format!(
            "access id={} method={} path={} status={}",
            String::from_utf8_lossy(self.id.as_bytes()),
            self.method,
            logfmt(&clip(&self.path, MAX_PATH)),
            self.status
        );
        let mut field = |key: &str, value: Option<String>| {
            if let Some(value) = value {
                let _ = write!(line, " {key}={}", logfmt(&value));
            }
        };
        field(
            "model",
            self.model
                .as_deref()
                .map(|m| clip(m, MAX_MODEL).into_owned()),
        );
        field("backend", self.backend.clone());
        field("reason", self.reason.map(str::to_owned));
        field(
            "attempts",
            self.attempts.as_ref().map(|a| a.count().to_string()),
        );
        field(
            "ttft_ms",
            self.millis(self.first_frame).map(|ms| format!("{ms:.1}")),
        );
        field(
            "duration_ms",
            self.millis(Some(Instant::now()))
                .map(|ms| format!("{ms:.1}")),
        );
        field("ended", Some(ended.to_owned()));
        line
    }

    fn json(&self, ended: &str) -> String {
        serde_json::json!({
            "id": String::from_utf8_lossy(self.id.as_bytes()),
            "method": self.method.as_str(),
            "path": clip(&self.path, MAX_PATH),
            "model": self.model.as_deref().map(|m| clip(m, MAX_MODEL)),
            "status": self.status,
            "backend": self.backend,
            "reason": self.reason,
            "attempts": self.attempts.as_ref().map(Attempts::count),
            "ttft_ms": self.millis(self.first_frame),
            "duration_ms": self.millis(Some(Instant::now())),
            "ended": ended,
        })
        .to_string()
    }
}

/// The most bytes of a path, and of a model name, a line keeps: a valid
/// model ID has at most 256; a longer one (refused) is cut, so that a
/// client's 8 MiB name makes no 8 MiB line.
const MAX_PATH: usize = 512;
const MAX_MODEL: usize = 256;

/// `value` cut to at most `max` bytes (at a character's boundary), with
/// `…` where it was cut.
fn clip(value: &str, max: usize) -> Cow<'_, str> {
    if value.len() <= max {
        return value.into();
    }
    let mut end = max;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &value[..end]).into()
}

/// `value` as a logfmt value: as it is when it is plain (visible ASCII
/// but `"`, `=` and `\\`), else quoted with Rust's string escapes
/// (control and format characters such as U+202E escaped), so that a
/// model name from a client's body cannot forge a field or a line.
fn logfmt(value: &str) -> Cow<'_, str> {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '=' | '\\'));
    if plain {
        value.into()
    } else {
        format!("{value:?}").into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_value_that_could_forge_a_field_or_a_line_is_quoted() {
        assert_eq!(logfmt("llama-3.1-8b"), "llama-3.1-8b");
        assert_eq!(logfmt("a b"), r#""a b""#);
        assert_eq!(logfmt("m status=200"), r#""m status=200""#);
        assert_eq!(logfmt("m\naccess id=forged"), r#""m\naccess id=forged""#);
        assert_eq!(logfmt(r#"say "hi""#), r#""say \"hi\"""#);
        assert_eq!(logfmt(""), r#""""#);
        // A right-to-left override would garble the line on a terminal.
        assert_eq!(logfmt("m\u{202e}x"), r#""m\u{202e}x""#);
        assert_eq!(logfmt("模型"), r#""模型""#);
    }

    #[test]
    fn a_long_value_is_cut_at_a_character() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "abc…");
        // "é" is two bytes: cut before it, not inside.
        assert_eq!(clip("abé", 3), "ab…");
        let huge = "m".repeat(8 << 20);
        assert_eq!(clip(&huge, MAX_MODEL).len(), MAX_MODEL + '…'.len_utf8());
    }

    #[test]
    fn a_usable_client_id_is_kept_else_one_is_made() {
        let given = HeaderValue::from_static("abc-123");
        assert_eq!(request_id(Some(&given)), given);
        let long = HeaderValue::try_from("x".repeat(129)).unwrap();
        for bad in [
            HeaderValue::from_static(""),
            HeaderValue::from_static("a b"),
            long,
        ] {
            let made = request_id(Some(&bad));
            assert!(made.to_str().unwrap().starts_with("gw-"), "{made:?}");
        }
        assert_ne!(request_id(None), request_id(None));
    }

    #[tokio::test]
    async fn a_line_in_each_format() {
        let entry = Entry {
            format: AccessLog::Text,
            id: HeaderValue::from_static("r1"),
            method: http::Method::POST,
            path: "/v1/completions".into(),
            model: Some("tiny".into()),
            started: Instant::now(),
            status: 200,
            backend: Some("vllm-0".into()),
            reason: Some("resident_owner"),
            attempts: Some(Attempts::default()),
            first_frame: Some(Instant::now()),
        };
        let attempts = entry.attempts.clone().unwrap();
        attempts.note();
        attempts.note();
        let text = entry.text("complete");
        assert!(text.starts_with("access id=r1 method=POST path=/v1/completions status=200 model=tiny backend=vllm-0 reason=resident_owner attempts=2 ttft_ms="), "{text}");
        assert!(text.ends_with(" ended=complete"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&entry.json("backend_stalled")).unwrap();
        assert_eq!(json["id"], "r1");
        assert_eq!(json["backend"], "vllm-0");
        assert_eq!(json["attempts"], 2);
        assert_eq!(json["ended"], "backend_stalled");
        assert!(json["duration_ms"].as_f64().unwrap() >= 0.0);
    }
}
