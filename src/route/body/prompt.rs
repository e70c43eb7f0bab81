//! The leading bytes of an OpenAI-style request's prompt, captured while
//! the body is skimmed for its model: a chat's messages in order (each its
//! `role`, a newline, its text, a newline) or a completion's `prompt`, up
//! to a limit. Shapes it does not know are skipped, never an error: the
//! prefix key is a routing hint, and the server judges the body.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The prompt's first bytes, up to `limit`.
#[derive(Debug)]
pub(super) struct Prompt {
    pub(super) bytes: Vec<u8>,
    limit: usize,
}

impl Prompt {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(limit.min(4096)),
            limit,
        }
    }

    /// Whether it holds `limit` bytes: the prompt was at least as long.
    pub(super) fn full(&self) -> bool {
        self.bytes.len() >= self.limit
    }

    fn push(&mut self, bytes: &[u8]) {
        let room = self.limit.saturating_sub(self.bytes.len());
        self.bytes
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

/// Which top-level field holds the prompt.
#[derive(Debug, Clone, Copy)]
pub(super) enum Field {
    /// `"messages"`: chat completions.
    Messages,
    /// `"prompt"`: completions (a string, a list of strings — the first
    /// counts — or token IDs).
    Prompt,
}

/// Captures the value of a prompt field into a [`Prompt`].
pub(super) struct Capture<'a>(pub(super) &'a mut Prompt, pub(super) Field);

impl<'de> DeserializeSeed<'de> for Capture<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self.1 {
            Field::Messages => d.deserialize_any(Messages(self.0)),
            Field::Prompt => d
                .deserialize_any(Text {
                    prompt: self.0,
                    first_only: true,
                    ids: true,
                    depth: 0,
                })
                .map(drop),
        }
    }
}

/// A chat's `messages`: a list of `{role, content}` objects.
struct Messages<'a>(&'a mut Prompt);

impl<'de> Visitor<'de> for Messages<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of messages")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while !self.0.full() {
            let mut message = Prompt::new(self.0.limit - self.0.bytes.len());
            let mut role = Prompt::new(64);
            match seq.next_element_seed(Message {
                role: &mut role,
                content: &mut message,
            })? {
                Some(false) => {}
                Some(true) => {
                    self.0.push(&role.bytes);
                    self.0.push(b"\n");
                    self.0.push(&message.bytes);
                    self.0.push(b"\n");
                }
                None => return Ok(()),
            }
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
}

/// One message: its `role` and `content` kept, other fields skipped.
struct Message<'a> {
    role: &'a mut Prompt,
    content: &'a mut Prompt,
}

impl<'de> DeserializeSeed<'de> for Message<'_> {
    /// Whether the element was a message (an object).
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Message<'_> {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while let Some(key) = map.next_key::<MessageKey>()? {
            match key {
                MessageKey::Role if self.role.bytes.is_empty() => {
                    map.next_value_seed(Text {
                        prompt: self.role,
                        first_only: true,
                        ids: false,
                        depth: MAX_DEPTH,
                    })?;
                }
                MessageKey::Content if self.content.bytes.is_empty() => {
                    map.next_value_seed(Text {
                        prompt: self.content,
                        first_only: false,
                        ids: false,
                        depth: 0,
                    })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(true)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
}

enum MessageKey {
    Role,
    Content,
    Other,
}

impl<'de> de::Deserialize<'de> for MessageKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = MessageKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MessageKey, E> {
                Ok(match v {
                    "role" => MessageKey::Role,
                    "content" => MessageKey::Content,
                    _ => MessageKey::Other,
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// Text: a string; a list of strings (the first only, or all in order);
/// content parts (`{"type": "text", "text": …}`: their `text`); token
/// IDs (each as 4 little-endian bytes). Anything else adds nothing.
struct Text<'a> {
    prompt: &'a mut Prompt,
    first_only: bool,
    /// Whether numbers are token IDs (a completion's `prompt`).
    ids: bool,
    /// How deep in lists and parts: past [`MAX_DEPTH`] the value is
    /// skipped (serde_json skips without recursing; a visitor would hit its
    /// recursion limit, failing a body the server may take).
    depth: u8,
}

/// Lists and parts nest at most this deep in a prompt the key reads:
/// `content: [{"text": …}]` is 2.
const MAX_DEPTH: u8 = 2;

impl<'de> DeserializeSeed<'de> for Text<'_> {
    /// Whether the value was text (a string, or parts), not token IDs.
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Text<'_> {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("text")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        self.prompt.push(v.as_bytes());
        Ok(true)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
        if self.ids {
            self.prompt.push(&(v as u32).to_le_bytes());
        }
        Ok(false)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
        self.visit_u64(v as u64)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while self.depth < MAX_DEPTH && !self.prompt.full() {
            let seed = Text {
                prompt: &mut *self.prompt,
                first_only: false,
                ids: self.ids,
                depth: self.depth + 1,
            };
            match seq.next_element_seed(seed)? {
                None => return Ok(true),
                Some(true) if self.first_only => break,
                Some(_) => {}
            }
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(true)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        // A content part: its "text" (an image part adds nothing).
        while let Some(key) = map.next_key::<PartKey>()? {
            match key.0 && self.depth < MAX_DEPTH {
                true => {
                    map.next_value_seed(Text {
                        prompt: &mut *self.prompt,
                        first_only: true,
                        ids: false,
                        depth: MAX_DEPTH,
                    })?;
                }
                false => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(true)
    }
}

/// A content part's key: whether it is `"text"`.
struct PartKey(bool);

impl<'de> de::Deserialize<'de> for PartKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = PartKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PartKey, E> {
                Ok(PartKey(v == "text"))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}
