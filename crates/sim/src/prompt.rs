//! The prompt of an OpenAI-style request as the simulated prefix cache sees
//! it: its text, its tokens and its blocks. Re-exported from
//! [`protocol`](super::protocol), so that a client (an oracle, a router)
//! computes exactly the blocks the server caches.
//!
//! The tokenizer is deliberately simple: a token is 4 bytes of the prompt
//! text, so a prompt of `len` bytes is `ceil(len / 4)` tokens. A block is
//! [`BLOCK_TOKENS`] tokens ([`BLOCK_BYTES`] bytes); only full blocks are
//! cached, as vLLM's automatic prefix caching does. Each block's key is a
//! chained hash — xxh3 of the previous block's key (8 bytes, little-endian;
//! 0 before the first block) followed by this block's bytes — so a block
//! matches only together with everything before it.

use xxhash_rust::xxh3::xxh3_64;

/// Bytes of prompt text per token.
pub const TOKEN_BYTES: usize = 4;
/// Tokens per cached block.
pub const BLOCK_TOKENS: u64 = 16;
/// Bytes of prompt text per cached block (`BLOCK_TOKENS × TOKEN_BYTES`).
pub const BLOCK_BYTES: usize = BLOCK_TOKENS as usize * TOKEN_BYTES;

/// The prompt text of an OpenAI-style request body, `None` when the body
/// holds none (not JSON, no `messages` array or `prompt` string, a
/// message without a string `role`, or content that is neither a string
/// nor an array of parts).
///
/// For a chat completion (`"messages"`), each message in order: its
/// `role`, a newline, its `content`, a newline — where an array content
/// is the concatenation of the `text` of its `{"type": "text"}` parts
/// (other parts are skipped) and a `null` content is empty. For a
/// completion, the `"prompt"` string as it is.
///
/// ```
/// use tower_model_balance_sim::protocol;
///
/// let chat = br#"{"model": "m", "messages": [
///     {"role": "system", "content": "be brief"},
///     {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "!"}]}
/// ]}"#;
/// assert_eq!(protocol::prompt_text(chat).unwrap(), "system\nbe brief\nuser\nhi!\n");
/// assert_eq!(protocol::prompt_text(br#"{"model": "m", "prompt": "abc"}"#).unwrap(), "abc");
/// assert_eq!(protocol::prompt_text(br#"{"model": "m", "messages": [{"role": "user", "content": 7}]}"#), None);
/// ```
pub fn prompt_text(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    if let Some(messages) = value.get("messages") {
        let mut text = String::new();
        for message in messages.as_array()? {
            text.push_str(message.get("role")?.as_str()?);
            text.push('\n');
            match message.get("content") {
                None | Some(serde_json::Value::Null) => {}
                Some(serde_json::Value::String(content)) => text.push_str(content),
                Some(serde_json::Value::Array(parts)) => {
                    for part in parts {
                        if part.get("type").and_then(|t| t.as_str()) == Some("text") {
                            text.push_str(part.get("text")?.as_str()?);
                        }
                    }
                }
                Some(_) => return None,
            }
            text.push('\n');
        }
        return Some(text);
    }
    value.get("prompt")?.as_str().map(str::to_owned)
}

/// Tokens of a prompt text: `ceil(len / 4)`, `len` in bytes.
///
/// ```
/// use tower_model_balance_sim::protocol::prompt_tokens;
/// assert_eq!(prompt_tokens(""), 0);
/// assert_eq!(prompt_tokens("abcde"), 2);
/// ```
pub fn prompt_tokens(text: &str) -> u64 {
    text.len().div_ceil(TOKEN_BYTES) as u64
}

/// The keys of the full blocks of a prompt text, in order: `len / 64`
/// of them (a partial last block has none), each the xxh3 hash of the
/// previous block's key (8 bytes, little-endian; 0 before the first
/// block) followed by this block's bytes, so that a block matches only
/// together with everything before it.
///
/// ```
/// use tower_model_balance_sim::protocol::prompt_blocks;
///
/// let a: Vec<u64> = prompt_blocks(&"x".repeat(130)).collect();
/// assert_eq!(a.len(), 2);
/// // The same second block after another first one is another key.
/// let b: Vec<u64> = prompt_blocks(&format!("{}{}", "y".repeat(64), "x".repeat(64))).collect();
/// assert_ne!(a[1], b[1]);
/// ```
pub fn prompt_blocks(text: &str) -> impl Iterator<Item = u64> + '_ {
    let mut previous = 0u64;
    let mut input = [0u8; 8 + BLOCK_BYTES];
    text.as_bytes().chunks_exact(BLOCK_BYTES).map(move |block| {
        input[..8].copy_from_slice(&previous.to_le_bytes());
        input[8..].copy_from_slice(block);
        previous = xxh3_64(&input);
        previous
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_text_joins_roles_and_contents() {
        let body = br#"{"messages": [{"role": "user", "content": null}, {"role": "assistant", "content": [{"type": "image_url"}, {"type": "text", "text": "ok"}]}]}"#;
        assert_eq!(prompt_text(body).unwrap(), "user\n\nassistant\nok\n");
        assert_eq!(prompt_text(br#"{"messages": []}"#).unwrap(), "");
        for bad in [
            &b"not json"[..],
            br#"{"model": "m"}"#,
            br#"{"messages": {}}"#,
            br#"{"messages": [{"content": "x"}]}"#,
            br#"{"messages": [{"role": "user", "content": {"a": 1}}]}"#,
            br#"{"prompt": ["a", "b"]}"#,
        ] {
            assert_eq!(prompt_text(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn blocks_are_full_and_chained() {
        assert_eq!(prompt_blocks(&"a".repeat(63)).count(), 0);
        assert_eq!(prompt_blocks(&"a".repeat(64)).count(), 1);
        let long = "abcd".repeat(64);
        let head: Vec<u64> = prompt_blocks(&long[..128]).collect();
        let all: Vec<u64> = prompt_blocks(&long).collect();
        assert_eq!(all.len(), 4);
        assert_eq!(&all[..2], &head[..]);
        // Equal bytes in every block, distinct keys: the chain.
        assert_ne!(all[0], all[1]);
        assert_eq!(prompt_tokens(&long), 64);
    }
}
