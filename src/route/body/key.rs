//! Where [`ModelFromBody`](super::ModelFromBody) finds a request's prefix
//! key: the prompt's first bytes, a session header.

use http::header::{HeaderName, HeaderValue};

use super::prompt::Prompt;
use crate::error::{InvalidReason, InvalidRoute};
use crate::route::{PrefixKey, RouteInfo};

/// Largest accepted `prefix_bytes`: 64 KiB.
pub(super) const MAX_PREFIX_BYTES: usize = 64 * 1024;
/// Longest accepted session ID, in bytes.
const MAX_SESSION_BYTES: usize = 256;

/// Where the prefix key comes from (see
/// [`ModelFromBodyBuilder::prefix_bytes`](super::ModelFromBodyBuilder::prefix_bytes)).
#[derive(Debug, Clone, Default)]
pub(super) struct PrefixSource {
    /// The prompt's first bytes that make the group; 0: none.
    pub(super) bytes: usize,
    /// The header naming the conversation.
    pub(super) session: Option<HeaderName>,
}

impl PrefixSource {
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

/// `route` with the prefix key of its prompt's first bytes and its
/// session, if either is known.
pub(super) fn with_prefix(
    route: RouteInfo,
    prompt: Option<Prompt>,
    session: Option<&HeaderValue>,
) -> RouteInfo {
    let prompt = prompt.filter(|p| !p.bytes.is_empty());
    let key = match (prompt, session) {
        (Some(prompt), session) => {
            let key = PrefixKey::from_prompt(&route.model, &prompt.bytes);
            match session {
                Some(s) => key.with_session(s.as_bytes()),
                None => key,
            }
        }
        (None, Some(session)) => PrefixKey::from_session(&route.model, session.as_bytes()),
        (None, None) => return route,
    };
    route.with_prefix(key)
}
