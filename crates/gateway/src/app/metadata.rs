//! KServe v2 model metadata and readiness (`GET /v2/models/{m}`, `/ready`,
//! and their `/versions/{v}` forms), answered by a backend that holds the
//! model — never routed as inference, so never a load.
//!
//! Why apart from the inference path: the balancer treats every request it
//! routes as the model's traffic — affinity, demand, residency marks, and
//! with placement a load on a backend that does not hold it. A metadata or
//! readiness GET is a question about the model, sent by monitoring loops
//! and clients' start-up checks, with any name in it; routed as inference,
//! every distinct name was a load (or a task queued for one). Here it is
//! asked of the backends the probes last saw holding the model (the
//! [`Catalog`](super::catalog::Catalog)), or that the balancer has loaded
//! it on since, sent straight to one of them: nothing in the balancer
//! moves, nothing is loaded, and a name no backend holds is answered 404
//! at once without a call — so a client asking about a million names grows
//! nothing and loads nothing.
//!
//! What a KServe v2 client sees (tritonclient's `is_model_ready` and
//! `get_model_metadata`): a model loaded on some backend answers as that
//! backend answers it; a model loaded nowhere is not ready — 404 with
//! `{"error": "…"}`, as MLServer answers for a model it has not loaded —
//! until an inference request loads it (with placement on).

use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::Full;
use tower::ServiceExt;
use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::{strip_hop_by_hop, Origin, SetOrigin};
use tower_model_balance::route::ModelId;

use super::errors::ErrorReply;
use super::shared::App;

/// The most backends one metadata GET is sent to: the first, and one more
/// when the first could not be reached or answered 404 (the probes' view
/// a second old).
pub const METADATA_TRIES: usize = 2;

/// Spreads metadata GETs over the backends that list a model.
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Answers a metadata or readiness GET of `model` (its path and query as
/// the client sent them, its headers passed on).
pub async fn answer(app: &App, model: &ModelId, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    let holders = app.catalog.holders(model);
    let mut order = holders.listed;
    // Loaded since the last probe (the balancer learns of its own loads
    // at once): served there too.
    let loaded = |(id, _): &(BackendId, Origin)| app.handle.is_resident(id, model);
    order.extend(holders.others.into_iter().filter(loaded));
    if !order.is_empty() {
        let turn = NEXT.fetch_add(1, Ordering::Relaxed) % order.len();
        order.rotate_left(turn);
    } else {
        // Servers that do not list their models: the model's owners first,
        // where its inference goes.
        let owners = app.handle.owners(model);
        let mut unlisted = holders.unlisted;
        unlisted.sort_by_key(|(id, _)| !owners.contains(id));
        order = unlisted;
    }
    order.truncate(METADATA_TRIES);
    if order.is_empty() {
        return not_served(model).for_path(&path).into_response();
    }
    let (parts, _) = req.into_parts();
    let mut last = None;
    for (_, origin) in order {
        let mut req = http::Request::new(Full::new(Bytes::new()));
        *req.method_mut() = parts.method.clone();
        *req.uri_mut() = parts.uri.clone();
        *req.headers_mut() = parts.headers.clone();
        match ask(app, origin, req).await {
            Ok(response) if response.status() != StatusCode::NOT_FOUND => return response,
            answer => last = Some(answer),
        }
    }
    match last {
        Some(Ok(not_found)) => not_found,
        _ => unreachable_backend(model).for_path(&path).into_response(),
    }
}

/// Sends `req` to `origin` under the gateway's backend timeout.
async fn ask(app: &App, origin: Origin, req: http::Request<Full<Bytes>>) -> Result<Response, ()> {
    let send = SetOrigin::to(app.client.clone(), origin).oneshot(req);
    match tokio::time::timeout(app.backend_timeout, send).await {
        Ok(Ok(response)) => {
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Ok(Response::from_parts(parts, Body::new(body)))
        }
        Ok(Err(error)) => {
            tracing::debug!(%error, "metadata request failed");
            Err(())
        }
        Err(_) => Err(()),
    }
}

/// A 404: no backend holds `model` now.
fn not_served(model: &ModelId) -> ErrorReply {
    let mut reply = ErrorReply::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "model_not_found",
        format!("the model `{model}` is not loaded on any backend"),
    );
    reply.param = Some("model");
    reply
}

/// A 502: the backends that hold `model` did not answer.
fn unreachable_backend(model: &ModelId) -> ErrorReply {
    let mut reply = ErrorReply::new(
        StatusCode::BAD_GATEWAY,
        "server_error",
        "bad_gateway",
        format!("no backend holding the model `{model}` answered"),
    );
    reply.retry_after = Some(1);
    reply
}
