//! [`PrefixKey`]: what a request shares with earlier ones beyond its model —
//! a prompt's leading bytes, a conversation — hashed once.
//!
//! ```
//! use tower_model_balance::route::{ModelId, PrefixKey, RouteInfo};
//!
//! let model = ModelId::new("llama-3-8b").unwrap();
//! let system = b"system\nYou are a helpful assistant for ACME's billing team.\n";
//! // Two prompts that start alike share a group: the same owners.
//! let a = PrefixKey::from_prompt(&model, system);
//! let b = PrefixKey::from_prompt(&model, system);
//! assert_eq!(a.group(), b.group());
//! // Another model (or LoRA adapter, which vLLM and SGLang name in the
//! // same `model` field) with the same prompt is another group.
//! let other = PrefixKey::from_prompt(&ModelId::new("llama-3-8b-lora-sql").unwrap(), system);
//! assert_ne!(a.group(), other.group());
//!
//! // A conversation's turns share a session within the group.
//! let turn = a.with_session(b"conv-7f3a");
//! assert_eq!(turn.group(), a.group());
//! assert!(turn.session().is_some());
//!
//! let mut route = RouteInfo::new(model);
//! route.prefix = Some(turn);
//! assert_eq!(route.prefix, Some(turn));
//! ```
//!
//! A balancer routes a request whose route carries a prefix key by the
//! key's **group** where it would route by the model ID: the group's
//! owners come from the ring, their number from the group's demand, and
//! among them a backend that recently served the same session, else the
//! same group, comes first (while the model's residency and the
//! bounded-load cap still decide before either). See
//! [`balance`](crate::balance#prefix-affinity) (feature `balance`).
//!
//! [`ModelFromBodyLayer`](super::ModelFromBodyLayer) (feature `body`)
//! reads the key from an OpenAI-compatible body and a session header;
//! any other layer can set one in [`RouteInfo::prefix`](super::RouteInfo::prefix).

use super::model::ModelId;

/// Mixed into a session's hash so that a session ID equal to a prompt
/// prefix is not the same key.
const SESSION_SALT: u64 = 0x5e55_1011_c0ff_ee00;

/// A request's affinity key beyond its model: the group it routes by, and
/// optionally the conversation it continues.
///
/// * **group** — the xxh3 64-bit hash of the bytes given, seeded with the
///   model ID's hash: requests of one model whose prompts start with the
///   same bytes (a system prompt, a shared document, the first turn) share
///   a group. The caller chooses how many bytes (the body layer's
///   [`prefix_bytes`](super::ModelFromBodyBuilder::prefix_bytes)); the
///   model ID — which names a LoRA adapter too, in vLLM's and SGLang's
///   APIs — is always part of it.
/// * **session** — optional, the xxh3 hash of a conversation's ID (a
///   session header), seeded from the group's hash: the turns of one
///   conversation go back to the backend that served the last one, within
///   their group's owners.
///
/// Both are computed once, at construction; the balancer never hashes the
/// prompt. Two gateways that read the same bytes compute the same key.
/// `Copy`: 24 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrefixKey {
    group: u64,
    session: Option<u64>,
}

impl PrefixKey {
    /// The key of a prompt of `model` that starts with `prefix`. Pass the
    /// bytes that should decide the group — typically the first few hundred
    /// bytes or so of the prompt: long enough to tell system prompts and
    /// documents apart, short enough that a conversation's later turns
    /// (which extend its first) keep the group of its first.
    pub fn from_prompt(model: &ModelId, prefix: &[u8]) -> Self {
        Self::with_seed(model.hash64(), prefix)
    }

    /// A key whose group is the conversation `session` itself, for a
    /// request with a session ID but no prompt to read: each conversation
    /// is its own group, and sticks to one backend.
    pub fn from_session(model: &ModelId, session: &[u8]) -> Self {
        let session = session_hash(model.hash64(), session);
        Self {
            group: session,
            session: Some(session),
        }
    }

    /// The key of `prefix` under a model with hash `model`.
    pub(crate) fn with_seed(model: u64, prefix: &[u8]) -> Self {
        Self {
            group: xxhash_rust::xxh3::xxh3_64_with_seed(prefix, model),
            session: None,
        }
    }

    /// The same group, continuing conversation `session` (a session or
    /// conversation ID, as its header carries it). The model is the one
    /// the group was made with.
    pub fn with_session(self, session: &[u8]) -> Self {
        Self {
            // The group's hash stands for the model: one more seed.
            session: Some(session_hash(self.group, session)),
            ..self
        }
    }

    /// The group's hash: what the balancer's ring and demand are keyed by
    /// in place of the model ID's.
    pub fn group(&self) -> u64 {
        self.group
    }

    /// The session's hash, if the request continues a conversation.
    pub fn session(&self) -> Option<u64> {
        self.session
    }
}

fn session_hash(seed: u64, session: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(session, seed ^ SESSION_SALT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> ModelId {
        ModelId::new(name).unwrap()
    }

    #[test]
    fn the_group_depends_on_the_model_and_the_bytes() {
        let m = model("m");
        assert_eq!(
            PrefixKey::from_prompt(&m, b"abc"),
            PrefixKey::from_prompt(&m, b"abc")
        );
        assert_ne!(
            PrefixKey::from_prompt(&m, b"abc").group(),
            PrefixKey::from_prompt(&m, b"abd").group()
        );
        assert_ne!(
            PrefixKey::from_prompt(&m, b"abc").group(),
            PrefixKey::from_prompt(&model("n"), b"abc").group()
        );
        // Not the model's own hash, even for an empty prefix.
        assert_ne!(PrefixKey::from_prompt(&m, b"").group(), m.hash64());
    }

    #[test]
    fn a_session_keeps_its_group_and_differs_by_id() {
        let key = PrefixKey::from_prompt(&model("m"), b"system");
        let a = key.with_session(b"a");
        let b = key.with_session(b"b");
        assert_eq!(a.group(), key.group());
        assert_eq!(key.session(), None);
        assert_ne!(a.session(), b.session());
        assert_eq!(a, key.with_session(b"a"));
        // A session ID equal to a prompt is another hash.
        let m = model("m");
        assert_ne!(
            PrefixKey::from_session(&m, b"system").group(),
            PrefixKey::from_prompt(&m, b"system").group()
        );
        let s = PrefixKey::from_session(&m, b"conv");
        assert_eq!(s.session(), Some(s.group()));
    }
}
