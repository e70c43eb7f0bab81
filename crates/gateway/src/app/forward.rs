//! The inference routes' handler: a request through the gateway's own
//! bounds (a slot among the requests in flight, room for its body, the
//! body's limit and deadline), then the stack, under the request's total
//! timeout and the drain; the answer's body on to the client
//! (`reply_body`), and the request's access-log line (`access_log`).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tower::ServiceExt;
use tower_model_balance::balance::RoutingReceipt;
use tower_model_balance::endpoint::strip_hop_by_hop;
use tower_model_balance::error::PayloadTooLarge;
use tower_model_balance::route::SendOnce;

use super::access_log::{Attempts, Deferred, Entry, Pending};
use super::errors::{self, ErrorReply};
use super::errors::{is_missing_model, no_model_served};
use super::limits::Reservation;
use super::phases::Streamed;
use super::reply_body::{Ending, ReplyBody};
use super::send_once::Keeps;
use super::shared::{App, RECEIPT_HEADER};

/// The stack's answer, before its body goes on.
struct Answer {
    parts: http::response::Parts,
    body: StackBody,
    slot: OwnedSemaphorePermit,
    deadline: Instant,
}

/// The stack's response body.
type StackBody =
    <<super::stack::Stack as tower::Service<http::Request<Full<Bytes>>>>::Response as BodyOf>::Body;

/// A response's body type.
trait BodyOf {
    type Body;
}

impl<B> BodyOf for http::Response<B> {
    type Body = B;
}

/// Sends the request through the stack and the backend's answer back; an
/// error of the stack (or a bound of the gateway's) becomes the gateway's
/// own answer, in the route's protocol's shape.
pub async fn forward(State(app): State<App>, mut req: Request) -> Response {
    let path = req.uri().path().to_owned();
    // The line `log_requests` began; written here, or when the body ends.
    let mut entry = Pending::new(req.extensions_mut().remove::<Entry>());
    let answer = proxy(&app, req, &path, entry.get_mut()).await;
    let mut response = match answer {
        Ok(Answer {
            mut parts,
            body,
            slot,
            deadline,
        }) => {
            strip_hop_by_hop(&mut parts.headers);
            let receipt = parts.extensions.get::<RoutingReceipt>();
            if app.receipt_header {
                if let Some(receipt) = receipt {
                    parts.headers.insert(RECEIPT_HEADER, receipt.header_value());
                }
            }
            if let Some(entry) = entry.get_mut() {
                entry.status = parts.status.as_u16();
                entry.receipt(receipt);
            }
            let event_stream = parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
            // The body streams on; the balancer counts the request done
            // when it ends.
            let body = ReplyBody::new(body, app.drain.when_cut(), deadline, app.timeouts.request)
                .event_stream(event_stream)
                .slot(slot)
                .log(entry.take());
            Response::from_parts(parts, Body::new(body))
        }
        Err(reply) => {
            if let Some(mut entry) = entry.take() {
                entry.status = reply.status.as_u16();
                entry.backend.clone_from(&reply.backend);
                entry.write(reply.code);
            }
            reply.for_path(&path).into_response()
        }
    };
    response.extensions_mut().insert(Deferred);
    response
}

/// The request through the gateway's bounds and the stack, to its
/// answer's head.
async fn proxy(
    app: &App,
    req: Request,
    path: &str,
    entry: Option<&mut Entry>,
) -> Result<Answer, ErrorReply> {
    let (parts, body) = req.into_parts();
    // A slot among the requests in flight, held until the answer ends.
    let slot = app.limits.request_slot()?;
    let deadline = Instant::now() + app.timeouts.request;
    let limit = app.limits.body_limit(path);
    // A body announced over the limit is refused before it is read.
    let announced = parts.headers.get(header::CONTENT_LENGTH);
    let announced = announced.and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|length| length > limit as u64) {
        return Err(errors::classify(&PayloadTooLarge::new(limit)));
    }
    // The whole body first, under the limit and the deadline, its room
    // among the bodies held at once taken as its bytes arrive: a body the
    // client trickles is its error (408), found here, never a failure the
    // balancer would count against a backend. (The route layer reads the
    // body under the limit too, but has no deadline.)
    let mut buffered = app.limits.reserve();
    let read = read_body(body, limit, &mut buffered);
    let bytes = match tokio::time::timeout(app.body_timeout, read).await {
        Ok(read) => read?,
        Err(_) => return Err(errors::body_timeout(app.body_timeout)),
    };
    let peek = Peek::of(path, &bytes, entry.is_some());
    let mut req = Request::from_parts(parts, Full::new(bytes));
    if let Some(entry) = entry {
        entry.model = peek.model;
        let attempts = Attempts::default();
        req.extensions_mut().insert(attempts.clone());
        entry.attempts = Some(attempts);
    }
    if peek.stream {
        req.extensions_mut().insert(Streamed);
    }
    // Not safe to send twice (a stored response): no hedge, no retry but
    // of a refused connection.
    if peek.send_once {
        req.extensions_mut().insert(SendOnce);
    }
    let answer = tokio::select! {
        answer = app.stack.clone().oneshot(req) => answer,
        () = tokio::time::sleep_until(deadline) => {
            return Err(ended(Ending::RequestTimeout(app.timeouts.request)));
        }
        () = app.drain.when_cut() => return Err(ended(Ending::Draining)),
    };
    drop(buffered);
    match answer {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            Ok(Answer {
                parts,
                body,
                slot,
                deadline,
            })
        }
        // A body without `model` while no backend serves any model (all
        // down, or before the first probes): the fleet's outage, not the
        // client's error.
        Err(error) if is_missing_model(&*error) && app.catalog.models().is_empty() => {
            Err(no_model_served())
        }
        Err(error) => Err(errors::classify(&*error)),
    }
}

/// `body` whole, at most `limit` bytes (413 past it), `room` grown to
/// what has arrived before each frame is kept (503 past the gateway's
/// bound on bytes held at once).
async fn read_body(body: Body, limit: usize, room: &mut Reservation) -> Result<Bytes, ErrorReply> {
    let mut body = http_body_util::Limited::new(body, limit);
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut len = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| errors::unreadable_body(&*error, limit))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers: nothing to forward in a buffered body
        };
        len += data.len();
        room.grow_to(len)?;
        chunks.push(data);
    }
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().unwrap_or_default(),
        _ => chunks.concat().into(),
    })
}

/// What the gateway reads of a request's body itself, in one pass over
/// it: whether it asks for an event stream (the JSON body's `stream` is
/// `true`; KServe v2's `/v2/…` carry tensors and never stream), whether it
/// must be sent once (`send_once`), and, for the access log, its model.
#[derive(Debug, Default)]
struct Peek {
    stream: bool,
    send_once: bool,
    model: Option<String>,
}

impl Peek {
    fn of(path: &str, body: &[u8], model: bool) -> Self {
        #[derive(serde::Deserialize)]
        struct Fields<'a> {
            #[serde(default)]
            stream: bool,
            #[serde(default, borrow)]
            model: Option<std::borrow::Cow<'a, str>>,
            #[serde(default)]
            store: Option<serde_json::Value>,
            #[serde(default)]
            background: Option<serde_json::Value>,
        }
        if let Some(rest) = path.strip_prefix("/v2/models/") {
            let name = rest.split('/').next().filter(|_| model);
            return Peek {
                model: name.map(str::to_owned),
                ..Peek::default()
            };
        }
        match serde_json::from_slice::<Fields<'_>>(body) {
            Ok(fields) => {
                let keeps = Keeps {
                    store: fields.store,
                    background: fields.background,
                };
                Peek {
                    stream: fields.stream,
                    send_once: Keeps::send_once(Some(&keeps), path),
                    // Owned only for the log.
                    model: fields.model.filter(|_| model).map(|m| m.into_owned()),
                }
            }
            Err(_) => Peek {
                send_once: Keeps::send_once(None, path),
                ..Peek::default()
            },
        }
    }
}

/// The answer for a request whose head had not come when it ended.
fn ended(ending: Ending) -> ErrorReply {
    let (status, kind) = match ending {
        Ending::Draining => (StatusCode::SERVICE_UNAVAILABLE, "service_unavailable"),
        _ => (StatusCode::GATEWAY_TIMEOUT, "upstream_error"),
    };
    let mut reply = ErrorReply::new(status, kind, ending.code(), ending.message());
    if ending == Ending::Draining {
        reply.retry_after = Some(1);
    }
    reply
}
