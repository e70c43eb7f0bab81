use super::defaults::MAX_LIMIT;
use super::key::MAX_PREFIX_BYTES;
use super::parse::{decode_segment, kserve_v2_model, model_from_json};
use super::*;
use crate::route::error::InvalidReason;

fn reason(json: &str) -> InvalidReason {
    let err = model_from_json(json.as_bytes()).unwrap_err();
    assert_eq!(err.source, "body", "{json}");
    err.reason
}

#[test]
fn reads_top_level_model_only() {
    let json =
        r#"{"messages":[{"model":"inner"}],"opts":{"model":"nested"},"model":"llama-3-8b","n":1}"#;
    assert_eq!(
        model_from_json(json.as_bytes()).unwrap().as_str(),
        "llama-3-8b"
    );
    // Escapes are decoded (an owned string, not a borrow).
    let escaped = r#"{"model":"llama\u002d3"}"#;
    assert_eq!(
        model_from_json(escaped.as_bytes()).unwrap().as_str(),
        "llama-3"
    );
}

#[test]
fn classifies_bad_bodies() {
    let cases: &[(&str, InvalidReason)] = &[
        ("", InvalidReason::TruncatedJson),
        (
            "not json",
            InvalidReason::MalformedJson { line: 1, column: 2 },
        ),
        (r#"{"model":"m""#, InvalidReason::TruncatedJson),
        (
            "{\n\"model\":\"m\"} trailing",
            InvalidReason::MalformedJson {
                line: 2,
                column: 14,
            },
        ),
        (r#"["model","m"]"#, InvalidReason::NotJson),
        // Not an object, and cut short or malformed: said as such.
        ("[1,2", InvalidReason::TruncatedJson),
        (r#"["model","#, InvalidReason::TruncatedJson),
        ("[", InvalidReason::TruncatedJson),
        (
            "[1,2,]",
            InvalidReason::MalformedJson { line: 1, column: 6 },
        ),
        (
            "[1,2] x",
            InvalidReason::MalformedJson { line: 1, column: 7 },
        ),
        ("[1,2]", InvalidReason::NotJson),
        ("42", InvalidReason::NotJson),
        (r#""m""#, InvalidReason::NotJson),
        ("null", InvalidReason::NotJson),
        ("{}", InvalidReason::Missing),
        (r#"{"model":null}"#, InvalidReason::Missing),
        (r#"{"model":1}"#, InvalidReason::Unrecognized),
        (r#"{"model":{"name":"m"}}"#, InvalidReason::Unrecognized),
        (r#"{"model":["m"]}"#, InvalidReason::Unrecognized),
        (r#"{"model":true}"#, InvalidReason::Unrecognized),
        (r#"{"model":"a","model":"b"}"#, InvalidReason::Duplicate),
        (r#"{"model":""}"#, InvalidReason::Empty),
        (
            r#"{"model":"two words"}"#,
            InvalidReason::ForbiddenCharacter,
        ),
    ];
    for (json, expected) in cases {
        assert_eq!(reason(json), *expected, "{json}");
    }
}

#[test]
fn deep_nesting_is_skipped_without_overflow() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(
        reason(&format!(r#"{{"x":{deep}}}"#)),
        InvalidReason::Missing
    );
    let json = format!(r#"{{"x":{deep},"model":{deep}}}"#);
    assert_eq!(reason(&json), InvalidReason::Unrecognized);
    // Not an object, cut short: skimmed whole without overflow.
    assert_eq!(reason(&"[".repeat(100_000)), InvalidReason::TruncatedJson);
    assert_eq!(reason(&deep), InvalidReason::NotJson);
    let unclosed = format!(r#"{{"model":"m","x":{}}}"#, "[".repeat(100_000));
    // A hundred thousand arrays opened, closed by a `}`: a syntax error.
    assert!(
        matches!(
            reason(&unclosed),
            InvalidReason::MalformedJson { line: 1, .. }
        ),
        "{:?}",
        reason(&unclosed)
    );
}

#[test]
fn kserve_v2_paths() {
    let name = |path| kserve_v2_model(path).map(|r| r.map_err(|e| (e.source, e.reason)));
    assert_eq!(name("/v2/models/resnet/infer"), Some(Ok("resnet")));
    assert_eq!(
        name("/v2/models/resnet/versions/3/infer"),
        Some(Ok("resnet"))
    );
    assert_eq!(name("/v2/models//infer"), Some(Ok("")));
    for path in [
        "/v2/models/resnet/versions//infer",
        "/v2/models/resnet/versions/3/4/infer",
        "/v2/models/a/b/infer",
    ] {
        let wrong_shape = Err(("path", InvalidReason::Unrecognized));
        assert_eq!(name(path), Some(wrong_shape), "{path}");
    }
    for path in [
        "/v2/models/resnet",
        "/v2/models/resnet/ready",
        "/v1/models/resnet/infer",
        "/v2/models/resnet/infer/",
        "/",
    ] {
        assert_eq!(name(path), None, "{path}");
    }
}

#[test]
fn percent_escapes() {
    assert_eq!(decode_segment("a%2Fb").unwrap(), "a/b");
    assert_eq!(decode_segment("%25").unwrap(), "%");
    assert_eq!(decode_segment("%e6%a8%a1").unwrap(), "模");
    for bad in ["%", "%z1", "%1", "a%", "a%g0", "%%20"] {
        let err = decode_segment(bad).unwrap_err();
        assert_eq!(
            (err.source, err.reason),
            ("path", InvalidReason::BadEscape),
            "{bad}"
        );
    }
    let err = decode_segment("%FF").unwrap_err();
    assert_eq!(err.reason, InvalidReason::NotText);
}

#[test]
fn builder_bounds() {
    assert_eq!(ModelFromBodyLayer::default().limit(), 1024 * 1024);
    assert!(ModelFromBodyLayer::builder().limit(0).build().is_err());
    assert!(ModelFromBodyLayer::builder()
        .limit(MAX_LIMIT + 1)
        .build()
        .is_err());
    let err = ModelFromBodyLayer::builder().limit(0).build().unwrap_err();
    assert_eq!(err.field, "limit");
    assert_eq!(
        ModelFromBodyLayer::builder()
            .limit(1)
            .build()
            .unwrap()
            .limit(),
        1
    );
    assert_eq!(
        ModelFromBodyLayer::builder()
            .limit(MAX_LIMIT)
            .build()
            .unwrap()
            .limit(),
        MAX_LIMIT
    );
    let err = ModelFromBodyLayer::builder()
        .prefix_bytes(MAX_PREFIX_BYTES + 1)
        .build()
        .unwrap_err();
    assert_eq!(err.field, "prefix_bytes");
    assert!(ModelFromBodyLayer::builder()
        .prefix_bytes(MAX_PREFIX_BYTES)
        .build()
        .is_ok());
}

/// The prompt bytes `json` gives under `limit`, and its model.
fn prompt(json: &str, limit: usize) -> (String, Vec<u8>) {
    let mut p = super::prompt::Prompt::new(limit);
    let model = super::parse::read_json(json.as_bytes(), Some(&mut p)).unwrap();
    (model.to_string(), p.bytes)
}

#[test]
fn the_prompt_of_a_chat_is_its_messages_in_order() {
    let json = r#"{"messages":[{"content":"Be brief.","role":"system"},{"role":"user","content":"Hi"}],"model":"m"}"#;
    let (model, bytes) = prompt(json, 1024);
    assert_eq!(model, "m");
    assert_eq!(bytes, b"system\nBe brief.\nuser\nHi\n");
    // Cut at the limit, mid-message.
    assert_eq!(prompt(json, 10).1, b"system\nBe ");
    // Text parts are the content; other parts add nothing.
    let parts = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]}]}"#;
    assert_eq!(prompt(parts, 1024).1, b"user\nab\n");
}

#[test]
fn the_prompt_of_a_completion_is_its_first_prompt() {
    assert_eq!(
        prompt(r#"{"model":"m","prompt":"once upon"}"#, 64).1,
        b"once upon"
    );
    assert_eq!(prompt(r#"{"prompt":["a","b"],"model":"m"}"#, 64).1, b"a");
    // Token IDs, four bytes each.
    assert_eq!(
        prompt(r#"{"model":"m","prompt":[1,258]}"#, 64).1,
        [1, 0, 0, 0, 2, 1, 0, 0]
    );
}

#[test]
fn prompts_of_unknown_shapes_give_nothing_and_fail_nothing() {
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let nested = format!(r#"{{"text":{{"text":{{"text":{deep}}}}}}}"#);
    for json in [
        r#"{"model":"m","messages":"hi"}"#.to_owned(),
        r#"{"model":"m","messages":[1,null,{"role":7,"content":{"x":1}}]}"#.to_owned(),
        r#"{"model":"m","prompt":{"a":1}}"#.to_owned(),
        r#"{"model":"m","input":"embed me"}"#.to_owned(),
        format!(r#"{{"model":"m","prompt":{deep}}}"#),
        format!(r#"{{"model":"m","messages":[{{"role":"user","content":{deep}}}]}}"#),
        format!(r#"{{"model":"m","messages":[{{"role":"user","content":[{nested}]}}]}}"#),
    ] {
        let (model, bytes) = prompt(&json, 64);
        assert_eq!(model, "m", "{json}");
        assert!(
            bytes.iter().all(|&b| b == b'\n' || b.is_ascii_alphabetic()),
            "{json}: {bytes:?}"
        );
    }
    // A second `messages` is skipped, not appended.
    let twice = r#"{"model":"m","messages":[{"role":"a","content":"x"}],"messages":[{"role":"b","content":"y"}]}"#;
    assert_eq!(prompt(twice, 64).1, b"a\nx\n");
}
