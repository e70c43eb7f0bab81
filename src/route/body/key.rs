//! Where [`ModelFromBody`](super::ModelFromBody) finds a request's prefix
//! key: the prompt's first bytes, a session header.

use http::header::{HeaderName, HeaderValue};

use super::prompt::Prompt;
use crate::route::error::{InvalidReason, InvalidRoute};
use crate::route::prefix::PrefixKey;
use crate::route::view::RouteInfo;

/// Largest accepted `prefix_bytes`: 64 KiB.
pub(super) const MAX_PREFIX_BYTES: usize = 64 * 1024;
/// Longest accepted session ID, in bytes.
const MAX_SESSION_BYTES: usize = 256;

/// Where the prefix key comes from (see
/// [`ModelFromBodyBuilder::prefix_bytes`](super::ModelFromBodyBuilder::prefix_bytes)).
#[derive(Debug, Clone)]
pub(super) struct PrefixSource {
    /// The prompt's first bytes that make the group; 0: none.
    pub(super) bytes: usize,
    /// The header naming the conversation.
    pub(super) session: Option<HeaderName>,
}

impl PrefixSource {
    /// No prefix key (the default).
    pub(super) const OFF: Self = Self {
        bytes: 0,
        session: None,
    };

    pub(super) fn is_on(&self) -> bool {
        self.bytes > 0 || self.session.is_some()
    }
}

/// The session header's value, if the layer reads one and the request
/// has it.
pub(super) fn session_id(
    headers: &http::HeaderMap,
    name: Option<&HeaderName>,
) -> Result<Option<HeaderValue>, InvalidRoute> {
    let Some(name) = name else { return Ok(None) };
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let reason = if values.next().is_some() {
        InvalidReason::Duplicate
    } else if value.is_empty() {
        InvalidReason::Empty
    } else if value.len() > MAX_SESSION_BYTES {
        InvalidReason::TooLong(MAX_SESSION_BYTES)
    } else {
        return Ok(Some(value.clone()));
    };
    Err(InvalidRoute::new("session", reason))
}

/// `route` with its prefix key, from the prompt's first bytes (`prompt`,
/// captured under `prefix_bytes` when `by_prompt`, else one byte that says
/// a prompt is there) and its session:
///
/// * no prompt (a KServe v2 path, an embeddings body, a shape the capture
///   does not know): no key — a session alone would let a client choose
///   its model's backends;
/// * a prompt that fills `prefix_bytes`: its group, and the session in it;
/// * a prompt shorter than `prefix_bytes` (a conversation that opened
///   with "hi"), or a session header without `prefix_bytes`: with a
///   session, the session is the group, so that the turns stay together
///   while the conversation is short (it moves at most once, to its
///   prompt's group, when it grows past `prefix_bytes`); without one, the
///   short prompt's group.
pub(super) fn with_prefix(
    mut route: RouteInfo,
    prompt: Option<Prompt>,
    by_prompt: bool,
    session: Option<&HeaderValue>,
) -> RouteInfo {
    let Some(prompt) = prompt.filter(|p| !p.bytes.is_empty()) else {
        return route;
    };
    let key = match (by_prompt && prompt.full(), session) {
        (true, Some(s)) => {
            PrefixKey::from_prompt(&route.model, &prompt.bytes).with_session(s.as_bytes())
        }
        (true, None) => PrefixKey::from_prompt(&route.model, &prompt.bytes),
        (false, Some(s)) => PrefixKey::from_session(&route.model, s.as_bytes()),
        (false, None) if by_prompt => PrefixKey::from_prompt(&route.model, &prompt.bytes),
        (false, None) => return route,
    };
    route.prefix = Some(key);
    route
}
