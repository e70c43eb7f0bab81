//! The precise-routing check's workload (`precise.rs`): documents behind
//! one application's system prompt, conversations, one-shot prompts, and
//! the server an oracle sends each to.

use crate::text::{line, text};

/// One piece of the workload, and the server the oracle sends it to.
#[derive(Clone, Debug)]
pub enum Job {
    /// A question over a shared document behind the application's system
    /// prompt: longer than `--prefix-bytes`, so the first bytes name the
    /// application, not the document (about 1,100 tokens shared by every
    /// question over it).
    Document {
        system: String,
        document: String,
        question: String,
        oracle: usize,
    },
    /// A conversation: each turn sends the history so far.
    Session {
        id: String,
        opening: String,
        turns: u64,
        oracle: usize,
    },
    /// A prompt no other request shares.
    OneShot { prompt: String, oracle: usize },
}

/// The workload of `seed`: 8 documents (about 1,000 tokens each) behind
/// one application's system prompt of about 300 bytes (a RAG service's
/// instructions), 4 questions each, interleaved; 3 conversations of 4
/// turns from about 500 tokens and 6 one-shot prompts, each opening with
/// text of its own. About 100 KV blocks of 128 tokens in all: more than
/// one server's 64, less than two's.
///
/// What the prompt's first bytes cannot tell: two questions over
/// different documents share their first 256 bytes (the system prompt),
/// two over the same document 1,000 tokens. vLLM's cache holds a prefix,
/// so only the latter can hit.
pub fn workload(seed: u64) -> Vec<Job> {
    let system = text(seed * 100, 7);
    let documents: Vec<String> = (0..8).map(|d| text(seed * 1000 + 10 + d, 65)).collect();
    let mut jobs = Vec::new();
    for q in 0..4u64 {
        for (d, document) in documents.iter().enumerate() {
            jobs.push(Job::Document {
                system: system.clone(),
                document: document.clone(),
                question: line(seed * 7 + d as u64, 200 + q),
                oracle: d % 2,
            });
        }
    }
    for s in 0..3u64 {
        let session = Job::Session {
            id: format!("kv-{seed}-{s}"),
            opening: text(seed * 1000 + 500 + s, 35),
            turns: 4,
            oracle: s as usize % 2,
        };
        jobs.insert(s as usize * 9 + 2, session);
    }
    for o in 0..6u64 {
        let one = Job::OneShot {
            prompt: text(seed * 1000 + 700 + o, 20),
            oracle: o as usize % 2,
        };
        jobs.insert(o as usize * 6 + 5, one);
    }
    jobs
}

/// Each request `job` makes, in order: its messages, its session.
pub fn requests(job: &Job) -> Vec<(serde_json::Value, Option<String>)> {
    match job {
        Job::Document {
            system,
            document,
            question,
            ..
        } => vec![(
            serde_json::json!([
                {"role": "system", "content": system},
                {"role": "user", "content": format!("{document}\n# {question}")},
            ]),
            None,
        )],
        Job::Session {
            id, opening, turns, ..
        } => {
            let mut messages = vec![serde_json::json!({"role": "user", "content": opening})];
            let mut out = Vec::new();
            for turn in 0..*turns {
                out.push((serde_json::Value::Array(messages.clone()), Some(id.clone())));
                messages.push(serde_json::json!({"role": "assistant", "content": line(turn, 1)}));
                messages.push(serde_json::json!({"role": "user", "content": text(turn * 31, 2)}));
            }
            out
        }
        Job::OneShot { prompt, .. } => vec![(
            serde_json::json!([{"role": "user", "content": prompt}]),
            None,
        )],
    }
}

pub fn oracle_of(job: &Job) -> usize {
    match job {
        Job::Document { oracle, .. }
        | Job::Session { oracle, .. }
        | Job::OneShot { oracle, .. } => *oracle,
    }
}
