//! What computing a request's prompt token IDs costs
//! (`kv::prompt::PromptTokenizer`, feature `tokenizer`), with the tiny
//! model the real-vLLM tests serve (`target/vllm-model/tiny`, built by
//! `tests/real_vllm/build_model.py`; the bench prints why and does
//! nothing without it).
//!
//! Group `kv_tokenizer`, one row each, a chat of a short system prompt
//! and one user message of mixed prose, code and non-ASCII text:
//!
//! * `chat_200` and `chat_2000`: `PromptTokenizer::chat` on the request
//!   body — parsing the JSON, rendering the chat template, tokenizing —
//!   for chats of about 200 and 2,000 tokens;
//! * `render_2000`: `chat_text`, the same without tokenizing;
//! * `blocks_2000`: `PromptBlocks::new` on the 2,000 IDs at 16 tokens a
//!   block, what the router does next.

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;
use tower_model_balance::kv::prompt::PromptTokenizer;
use tower_model_balance::kv::PromptBlocks;

/// ~`words` words of prose with code, numbers and some non-ASCII text
/// (as `tests/kv_tokenizer.rs`'s documents).
fn document(words: usize) -> String {
    let vocabulary = [
        "the",
        "router",
        "caches",
        "blocks",
        "of",
        "tokens,",
        "and",
        "def",
        "main():",
        "return",
        "42",
        "3.14159",
        "naïve",
        "café",
        "日本語",
        "🚀",
        "prefix",
        "self.index",
        "{\"k\":",
        "1}",
        "\n",
        "\tindent",
        "vLLM",
        "KV-cache",
        "événement",
        "Straße",
        "—",
        "x+y",
        "#",
        "import os\n",
    ];
    (0..words)
        .map(|i| vocabulary[(i * 7 + i / 3) % vocabulary.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

fn body(words: usize) -> Vec<u8> {
    json!({"model": "tiny", "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": document(words)}]})
    .to_string()
    .into_bytes()
}

fn bench(c: &mut Criterion) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/vllm-model/tiny");
    let tokenizer = match PromptTokenizer::from_dir(&dir) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("kv_tokenizer bench skipped: {e} (tests/real_vllm/build_model.py builds it)");
            return;
        }
    };
    let (short, long) = (body(60), body(630));
    let ids = tokenizer.chat(&long).expect("the long chat");
    let mut group = c.benchmark_group("kv_tokenizer");
    group.bench_function("chat_200", |b| b.iter(|| tokenizer.chat(&short).unwrap()));
    group.bench_function("chat_2000", |b| b.iter(|| tokenizer.chat(&long).unwrap()));
    group.bench_function("render_2000", |b| {
        b.iter(|| tokenizer.chat_text(&long).unwrap())
    });
    group.bench_function("blocks_2000", |b| b.iter(|| PromptBlocks::new(&ids, 16)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
