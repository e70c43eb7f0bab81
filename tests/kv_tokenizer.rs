//! `kv::prompt::PromptTokenizer` against vLLM itself: for chat and
//! completion bodies, the token IDs (and the chat's rendered text) must be
//! the ones vLLM 0.32 computes, through its own code path
//! (`tests/kv_tokenizer/vllm_prompt.py`, one Python process for all the
//! cases), with the tiny model the real-vLLM tests serve and with two
//! realistic templates (a Llama 3.1 one, string content; a Qwen2-VL-style
//! one, OpenAI list content, tools and reasoning) over its tokenizer.
//!
//! Needs the virtual environment of `scripts/vllm-venv` and the tiny model
//! (`tests/real_vllm/build_model.py`) under `target/`: skipped without
//! them, except under `CI`, where their absence fails.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tokio::time::Instant;

use serde_json::{json, Value};
use tower_model_balance::kv::prompt::{PromptError, PromptKind, PromptTokenizer};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's Python and the tiny model's folder, or why not.
fn installed() -> Result<(PathBuf, PathBuf), String> {
    let venv = root().join("target").join("venv-vllm");
    let python = venv.join("bin").join("python");
    let model = root().join("target").join("vllm-model").join("tiny");
    if !(python.exists() && venv.join(".installed").exists()) {
        return Err(format!("vLLM is not installed at {}", venv.display()));
    }
    if !model.join("tokenizer.json").exists() {
        return Err(format!("no tiny model at {}", model.display()));
    }
    Ok((python, model))
}

fn installed_or_skip() -> Option<(PathBuf, PathBuf)> {
    match installed() {
        Ok(found) => Some(found),
        Err(reason) if std::env::var_os("CI").is_some() => {
            panic!("{reason}: under CI the vLLM comparison must run")
        }
        Err(reason) => {
            eprintln!("skipped: {reason} (`bash scripts/vllm-venv` installs it)");
            None
        }
    }
}

/// A model folder with the tiny model's tokenizer and `template`, under
/// the test's temporary directory: as a string, or as a list of named
/// templates.
fn folder(tiny: &Path, name: &str, template: &str, listed: bool) -> PathBuf {
    folder_with(tiny, name, template, listed, json!({}))
}

/// As [`folder`], with `extra` entries in `tokenizer_config.json`.
fn folder_with(tiny: &Path, name: &str, template: &str, listed: bool, extra: Value) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("kv_tokenizer")
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(tiny.join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(tiny.join("tokenizer_config.json")).unwrap())
            .unwrap();
    config["chat_template"] = if listed {
        json!([{"name": "default", "template": template}, {"name": "rag", "template": "x"}])
    } else {
        json!(template)
    };
    // The object form (transformers: an `AddedToken`).
    config["bos_token"] = json!({"__type": "AddedToken", "content": "<s>", "lstrip": false,
        "normalized": false, "rstrip": false, "single_word": false, "special": true});
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    dir
}

fn template(name: &str) -> String {
    std::fs::read_to_string(root().join("tests").join("kv_tokenizer").join(name)).unwrap()
}

/// ~`words` words of prose with code, numbers and some non-ASCII text.
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

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn chat_cases(doc: &str) -> Vec<Value> {
    vec![
        json!({"model": "tiny", "messages": [user("Hello!")]}),
        json!({"model": "tiny", "messages": [
            {"role": "system", "content": "You are terse."}, user("What is a KV cache?")]}),
        json!({"model": "tiny", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "First part."}, {"type": "text", "text": "Second part."}]}]}),
        json!({"model": "tiny", "messages": [
            {"role": "system", "content": "Be precise."}, user("2+2?"),
            {"role": "assistant", "content": "4."}, user("And 3+3?"),
            {"role": "assistant", "content": "6.", "name": "calc"}, user("Thanks")]}),
        json!({"model": "tiny", "messages": [user("Ünïcödé: 日本語のテキスト, 한국어, العربية, emoji 🚀🔥👩‍💻, e\u{301}, tabs\tand  spaces  ")]}),
        json!({"model": "tiny", "messages": [
            {"role": "system", "content": doc}, user("Summarise the document above.")]}),
        json!({"model": "tiny", "messages": [user(doc)], "max_tokens": 5}),
        json!({"model": "tiny", "messages": [user("Write a haiku."),
            {"role": "assistant", "content": "Blocks of tokens fall"}],
            "add_generation_prompt": false, "continue_final_message": true}),
        json!({"model": "tiny", "messages": [user("no prompt")], "add_generation_prompt": false}),
        json!({"model": "tiny", "messages": [user("with BOS")], "add_special_tokens": true}),
        json!({"model": "tiny", "messages": [user("hi"), {"role": "assistant", "content": null}, user("again")]}),
        json!({"model": "tiny", "messages": [{"role": "developer", "content": "Dev rules."}, user("hi")]}),
        json!({"model": "tiny", "messages": [{"role": "system", "content": "A"}, user("hi"),
            {"role": "developer", "content": [{"type": "text", "text": "B"}]}]}),
        json!({"model": "tiny", "messages": [{"role": "system", "content": [
            {"type": "text", "text": "x-anthropic-billing-header: cch=123\nReal system prompt."},
            {"type": "text", "text": "More."}]}, user("hi")]}),
        json!({"model": "tiny", "messages": [user("  leading and trailing  \n\n")],
            "chat_template_kwargs": {"custom": 1, "add_generation_prompt": false}}),
    ]
}

fn completion_cases(doc: &str) -> Vec<Value> {
    vec![
        json!({"model": "tiny", "prompt": "def fibonacci(n):"}),
        json!({"model": "tiny", "prompt": [1, 500, 42, 7]}),
        json!({"model": "tiny", "prompt": ["Once upon a time"]}),
        json!({"model": "tiny", "prompt": "no specials", "add_special_tokens": false}),
        json!({"model": "tiny", "prompt": format!("Ünïcödé 🚀 {doc}")}),
    ]
}

fn llama_cases() -> Vec<Value> {
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "description": "The weather in a city", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"]}}}]);
    vec![
        json!({"model": "m", "messages": [{"role": "system", "content": "  You help.  "}, user("Hi there")]}),
        json!({"model": "m", "messages": [user("Weather in Paris?"),
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"unit\": \"c\", \"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "18 degrees"}], "tools": tools}),
        json!({"model": "m", "messages": [user("date?")],
            "chat_template_kwargs": {"date_string": "01 Jan 2030"}}),
        json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]}]}),
        // No user message to put the tools in: the template raises.
        json!({"model": "m", "messages": [{"role": "system", "content": "s"}], "tools": tools}),
        json!({"model": "m", "messages": [user("tools in system")], "tools": tools,
            "chat_template_kwargs": {"tools_in_user_message": false}}),
    ]
}

fn qwen_cases() -> Vec<Value> {
    let tools = json!([{"type": "function", "function": {"name": "search",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}, "strict": true}},
        {"type": "function", "function": {"name": "now", "description": "Die Zeit — jetzt"}}]);
    vec![
        json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Look:"}, {"type": "text", "text": " twice"}]}]}),
        json!({"model": "m", "messages": [{"role": "system", "content": "  padded system \n"}, user("q")]}),
        json!({"model": "m", "tools": tools, "messages": [
            {"role": "system", "content": "Use tools."}, user("Find rust docs"),
            {"role": "assistant", "content": "", "reasoning": "\nI should search.\n", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "search", "arguments": "{\"q\": \"rust\", \"lang\": \"en\"}"}},
                {"id": "b", "type": "function", "function": {"name": "now", "arguments": ""}}]},
            {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "result 1"}, {"type": "text", "text": "result 2"}]},
            {"role": "tool", "tool_call_id": "b", "content": "12:00"},
            {"role": "assistant", "content": "Done.", "reasoning": "ok"}, user("thanks")]}),
        json!({"model": "m", "messages": [user("think less")],
            "chat_template_kwargs": {"enable_thinking": false}}),
        json!({"model": "m", "messages": [user("Continue:"), {"role": "assistant", "content": [
            {"type": "text", "text": "The answer is"}]}],
            "add_generation_prompt": false, "continue_final_message": true}),
        json!({"model": "m", "messages": [user("<tool_response>x</tool_response>"), user("real")]}),
    ]
}

struct Case {
    dir: PathBuf,
    kind: PromptKind,
    body: Value,
}

#[test]
fn prompt_ids_are_vllms() {
    let Some((python, tiny)) = installed_or_skip() else {
        return;
    };
    let llama = folder(&tiny, "llama3", &template("llama3.jinja"), false);
    let qwen = folder(&tiny, "qwen2vl", &template("qwen2vl.jinja"), true);
    // Flags transformers' model-specific tokenizer classes rebuild the
    // post-processor from (its generic one does not).
    let bos = folder_with(
        &tiny,
        "bos",
        &template("qwen2vl.jinja"),
        false,
        json!({"add_bos_token": true, "add_eos_token": false}),
    );
    let doc = document(630);
    let mut cases = Vec::new();
    for body in chat_cases(&doc) {
        cases.push(Case {
            dir: tiny.clone(),
            kind: PromptKind::Chat,
            body,
        });
    }
    for body in completion_cases(&doc) {
        cases.push(Case {
            dir: tiny.clone(),
            kind: PromptKind::Completion,
            body,
        });
    }
    for body in llama_cases() {
        cases.push(Case {
            dir: llama.clone(),
            kind: PromptKind::Chat,
            body,
        });
    }
    for body in qwen_cases() {
        cases.push(Case {
            dir: qwen.clone(),
            kind: PromptKind::Chat,
            body,
        });
    }
    for body in completion_cases(&doc) {
        cases.push(Case {
            dir: bos.clone(),
            kind: PromptKind::Completion,
            body,
        });
    }
    for body in [
        json!({"model": "m", "messages": [user("BOS from the flag")], "add_special_tokens": true}),
        json!({"model": "m", "messages": [user("no BOS: chat default")]}),
    ] {
        cases.push(Case {
            dir: bos.clone(),
            kind: PromptKind::Chat,
            body,
        });
    }

    let input: String = cases
        .iter()
        .map(|c| {
            let kind = if c.kind == PromptKind::Chat {
                "chat"
            } else {
                "completion"
            };
            json!({"dir": c.dir, "kind": kind, "body": c.body}).to_string() + "\n"
        })
        .collect();
    let mut child = Command::new(&python)
        .arg(
            root()
                .join("tests")
                .join("kv_tokenizer")
                .join("vllm_prompt.py"),
        )
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start vllm_prompt.py");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let answers: Vec<Value> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert!(child.wait().unwrap().success(), "vllm_prompt.py failed");
    assert_eq!(answers.len(), cases.len(), "one answer a case");

    let tokenizers =
        [&tiny, &llama, &qwen, &bos].map(|d| (d.clone(), PromptTokenizer::from_dir(d).unwrap()));
    let (mut ids_compared, mut errors_compared) = (0, 0);
    for (i, (case, want)) in cases.iter().zip(&answers).enumerate() {
        let tok = &tokenizers.iter().find(|(d, _)| d == &case.dir).unwrap().1;
        let body = case.body.to_string();
        let got = match case.kind {
            PromptKind::Chat => tok.chat(body.as_bytes()),
            _ => tok.completion(body.as_bytes()),
        };
        let short: String = body.chars().take(160).collect();
        let label = format!("case {i} ({}): {short}", case.dir.display());
        match (&got, want.get("error")) {
            (Err(_), Some(_)) => errors_compared += 1,
            (Ok(ids), None) => {
                if case.kind == PromptKind::Chat {
                    let text = tok.chat_text(body.as_bytes()).unwrap();
                    assert_eq!(
                        text,
                        want["text"].as_str().unwrap(),
                        "rendered text differs: {label}"
                    );
                }
                let want: Vec<u32> = serde_json::from_value(want["ids"].clone()).unwrap();
                assert_eq!(ids, &want, "token IDs differ: {label}");
                ids_compared += 1;
            }
            (got, want) => panic!("{label}: ours {got:?}, vLLM's {want:?}"),
        }
    }
    eprintln!("{ids_compared} prompts with vLLM's IDs, {errors_compared} rejected by both");
    assert!(ids_compared >= 37 && errors_compared >= 1);

    // transformers 5's generic tokenizer class (`TokenizersBackend`, the
    // tiny model's) leaves `tokenizer.json`'s post-processor as it is
    // whatever `add_bos_token` says: no BOS there, none here.
    let no_bos = tokenizers[3].1.completion(br#"{"prompt": "x"}"#).unwrap();
    assert_eq!(no_bos, [91]);

    // The long chat is some 2,000 tokens.
    let long = tokenizers[0]
        .1
        .chat(cases[5].body.to_string().as_bytes())
        .unwrap();
    assert!((1500..3000).contains(&long.len()), "{} tokens", long.len());
}

/// Figures, not a check: microseconds a chat of ~200 and ~2,000 tokens
/// takes to render and tokenize (`cargo test --release --test
/// kv_tokenizer -- --nocapture cost`).
#[test]
fn cost() {
    let Some((_, tiny)) = installed_or_skip() else {
        return;
    };
    let tok = PromptTokenizer::from_dir(&tiny).unwrap();
    for words in [60, 630] {
        let body = json!({"model": "tiny", "messages": [
            {"role": "system", "content": "You are terse."}, user(&document(words))]})
        .to_string();
        let n = tok.chat(body.as_bytes()).unwrap().len();
        let runs = 200;
        let start = Instant::now();
        for _ in 0..runs {
            std::hint::black_box(tok.chat(body.as_bytes()).unwrap());
        }
        let each = start.elapsed() / runs;
        eprintln!(
            "chat of {n} tokens: {:.1} µs a request",
            each.as_secs_f64() * 1e6
        );
    }
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let Some((_, tiny)) = installed_or_skip() else {
        return;
    };
    let tok = PromptTokenizer::from_dir(&tiny).unwrap();
    for body in [
        &b"not json"[..],
        b"[]",
        b"{}",
        br#"{"messages": "x"}"#,
        br#"{"messages": []}"#,
        br#"{"messages": [{"content": "no role"}]}"#,
        br#"{"messages": [{"role": "user", "content": 5}]}"#,
        br#"{"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": "yes"}"#,
        br#"{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"tokenize": true}}"#,
        br#"{"messages": [{"role": "user", "content": "x"}], "continue_final_message": true}"#,
        br#"{"messages": [{"role": "user", "content": "x"}], "chat_template": "{% for %}"}"#,
    ] {
        assert!(tok.chat(body).is_err(), "{}", String::from_utf8_lossy(body));
    }
    // A request's own template is never run: this one would loop 10^10 times.
    let costly = br#"{"messages": [{"role": "user", "content": "x"}], "chat_template": "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}x"}"#;
    assert!(matches!(tok.chat(costly), Err(PromptError::Unsupported(_))));
    let image = br#"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}"#;
    assert!(matches!(tok.chat(image), Err(PromptError::Unsupported(_))));
    assert!(matches!(
        tok.completion(br#"{"prompt": ["a", "b"]}"#),
        Err(PromptError::Unsupported(_))
    ));
    assert!(tok.completion(br#"{"prompt": [1, -2]}"#).is_err());
    assert_eq!(tok.tokens_of("/v1/models", b"{}"), Ok(None));
    assert_eq!(
        tok.tokens_of("/v1/completions", br#"{"prompt": [5, 6]}"#),
        Ok(Some(vec![5, 6]))
    );
    let no_template = folder(&tiny, "bare", "", false);
    std::fs::write(
        no_template.join("tokenizer_config.json"),
        r#"{"bos_token": "<s>"}"#,
    )
    .unwrap();
    let bare = PromptTokenizer::from_dir(&no_template).unwrap();
    assert_eq!(
        bare.chat(br#"{"messages": [{"role": "user", "content": "x"}]}"#),
        Err(PromptError::NoTemplate)
    );
    assert!(PromptTokenizer::from_dir(Path::new("/nonexistent")).is_err());
}
