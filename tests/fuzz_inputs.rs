//! The fuzz targets' inputs as proptest cases that run with `cargo test`:
//! arbitrary bytes through the same decoders, and generated shapes the
//! fuzzers find only slowly — header sets, KServe v2 paths with
//! percent-encoding, JSON with odd escapes, duplicate keys, huge numbers
//! and deep nesting, TOML with random keys and values. The invariants are
//! the fuzz targets' own (`support/fuzz_route.rs`, `support/fuzz_config.rs`).

#[path = "support/fuzz_config.rs"]
mod fuzz_config;
#[path = "support/fuzz_route.rs"]
mod fuzz_route;

use fuzz_config::{check_config, config_from_bytes, KEYS};
use fuzz_route::{
    body_from_bytes, check_body, check_headers, check_path, encode, headers_from_bytes,
    path_from_bytes, BodyCase, PathCase, NAMES, WORDS,
};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 128,
        ..ProptestConfig::default()
    }
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

/// A header value: a route word in random case, a number, a model-like
/// name, or any bytes a header value can hold (obs-text included).
fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (prop::sample::select(&WORDS[..]), any::<u64>()).prop_map(|(w, mask)| w
            .bytes()
            .enumerate()
            .map(|(i, b)| if mask >> (i % 64) & 1 == 1 {
                b.to_ascii_uppercase()
            } else {
                b
            })
            .collect()),
        any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        "[+-]?[0-9]{1,25}".prop_map(String::into_bytes),
        "[a-zA-Z0-9._:/-]{0,300}".prop_map(String::into_bytes),
        "\\PC{0,20}".prop_map(String::into_bytes),
        proptest::collection::vec(
            prop_oneof![Just(b'\t'), 0x20u8..=0x7e, 0x80u8..=0xff],
            0..40
        ),
    ]
}

/// Header sets of up to 8 route (or other) headers, repeats allowed.
fn header_map() -> impl Strategy<Value = HeaderMap> {
    proptest::collection::vec((prop::sample::select(&NAMES[..]), header_value()), 0..8).prop_map(
        |pairs| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
                if let Ok(value) = HeaderValue::from_bytes(&value) {
                    map.append(name, value);
                }
            }
            map
        },
    )
}

/// Model names as bytes: valid IDs, IDs at and past 256 bytes, whitespace
/// and control characters, non-ASCII, invalid UTF-8, `/` and `%`.
fn name_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[a-z0-9._:-]{1,40}".prop_map(String::into_bytes),
        (250usize..260).prop_map(|n| vec![b'm'; n]),
        "\\PC{0,12}".prop_map(String::into_bytes),
        "[a-z]{0,4}[ \t\u{0}\u{7f}\u{a0}\u{85}/%?#][a-z]{0,4}".prop_map(String::into_bytes),
        bytes(24),
    ]
}

/// Paths around `/v2/models/{name}/infer`, percent-encoded or with `%`
/// left raw, and near misses of the form.
fn kserve_path() -> impl Strategy<Value = PathCase> {
    let versioned = (name_bytes(), "[0-9a-z]{0,3}", any::<bool>());
    prop_oneof![
        (name_bytes(), any::<bool>()).prop_map(|(name, raw)| PathCase {
            path: format!("/v2/models/{}/infer", encode(&name, raw)),
            name: (!raw).then_some(name),
        }),
        versioned.prop_map(|(name, version, raw)| PathCase {
            path: format!("/v2/models/{}/versions/{version}/infer", encode(&name, raw)),
            name: (!raw && !version.is_empty()).then_some(name),
        }),
        (
            prop::sample::select(&["/v2/models/", "/v2/models", "/v1/models/", "/V2/models/"][..]),
            "[a-z%0-9]{0,6}",
            prop::sample::select(
                &[
                    "/infer",
                    "/infer/",
                    "/ready",
                    "/a/infer",
                    "",
                    "/infer?x=/y",
                    "/versions//infer"
                ][..]
            ),
        )
            .prop_map(|(head, mid, tail)| PathCase {
                path: format!("{head}{mid}{tail}"),
                name: None,
            }),
    ]
}

/// A JSON value as text, with escapes in strings and keys, huge and odd
/// numbers, nesting, and duplicate or escaped `"model"` keys.
fn json_value() -> impl Strategy<Value = String> {
    let string = prop_oneof![
        "[a-z0-9 -]{0,12}".prop_map(|s| format!("\"{s}\"")),
        Just(r#""llama\u002d3\/8b""#.to_string()),
        Just(r#""\ud83d\ude00""#.to_string()),
        Just(r#""\ud800""#.to_string()),
        Just(r#""tab\there""#.to_string()),
        Just("\"raw\u{1}control\"".to_string()),
    ];
    let leaf = prop_oneof![
        string.clone(),
        Just("null".to_string()),
        Just("true".to_string()),
        prop::sample::select(
            &[
                "0",
                "-0",
                "1e400",
                "-1e-400",
                "18446744073709551616",
                "1.5E+3",
                "01",
                "1.",
                "-"
            ][..]
        )
        .prop_map(str::to_string),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| f.to_string()),
    ];
    leaf.prop_recursive(6, 48, 6, move |inner| {
        let key = prop_oneof![
            Just(r#""model""#.to_string()),
            Just(r#""mod\u0065l""#.to_string()),
            Just(r#""Model""#.to_string()),
            "[a-z]{0,5}".prop_map(|s| format!("\"{s}\"")),
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6)
                .prop_map(|v| format!("[{}]", v.join(","))),
            proptest::collection::vec((key, inner), 0..6).prop_map(|entries| {
                let fields: Vec<String> = entries.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

/// JSON bodies: objects with a `"model"` among other fields, deep nesting
/// before or as the model, truncations, and raw bytes.
fn json_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (json_value(), json_value(), name_bytes()).prop_map(|(a, b, name)| {
            let name = String::from_utf8_lossy(&name).replace(['"', '\\'], "");
            format!(r#"{{"a":{a},"model":"{name}","b":{b}}}"#).into_bytes()
        }),
        json_value().prop_map(String::into_bytes),
        (
            1usize..3000,
            prop::sample::select(&["[", "{\"a\":"][..]),
            any::<bool>()
        )
            .prop_map(|(depth, open, closed)| {
                let close = if open == "[" { "]" } else { "}" };
                let inner = format!(
                    "{}1{}",
                    open.repeat(depth),
                    if closed {
                        close.repeat(depth)
                    } else {
                        String::new()
                    }
                );
                format!(r#"{{"model":"m","x":{inner}}}"#).into_bytes()
            }),
        (json_value(), 0usize..64).prop_map(|(v, cut)| {
            let text = format!(r#"{{"model":{v}}}"#).into_bytes();
            text[..text.len().saturating_sub(cut)].to_vec()
        }),
        bytes(200),
    ]
}

fn body_case() -> impl Strategy<Value = BodyCase> {
    let hint = prop_oneof![
        Just(None),
        Just(Some(0)),
        Just(Some(u64::MAX / 2)),
        any::<u64>().prop_map(Some)
    ];
    (1usize..=4096, 0usize..64, any::<bool>(), hint, json_body()).prop_map(
        |(limit, chunk, content_length, hint, body)| BodyCase {
            limit: limit.min(body.len().saturating_add(2)).max(1),
            chunk,
            content_length,
            hint,
            body,
        },
    )
}

/// A TOML value: every type, edge numbers, odd strings, arrays, inline
/// tables.
fn toml_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        prop::sample::select(
            &[
                "0",
                "-1",
                "1",
                "16",
                "17",
                "0.0",
                "1.0",
                "100.0",
                "100.5",
                "inf",
                "-inf",
                "nan",
                "1e400",
                "9223372036854775808",
                "18446744073709551615",
                "0x10",
                "1_000",
                "true",
                "false",
                "\"backend_model\"",
                "\"wait\"",
                "\"prefer_warm\"",
                "\"x\"",
                "1979-05-27",
                "''",
                "\"\\u0000\""
            ][..]
        )
        .prop_map(str::to_string),
        any::<f64>().prop_map(|f| format!("{f:?}")),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| format!("[{}]", v.join(", "))),
            proptest::collection::vec(("[a-z_]{1,8}", inner), 0..3).prop_map(|kv| {
                let fields: Vec<String> = kv.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                format!("{{ {} }}", fields.join(", "))
            }),
        ]
    })
}

/// A TOML file: sections of the format (and unknown ones), each with keys
/// of the format, unknown keys or `model_owners` entries, random values.
fn toml_file() -> impl Strategy<Value = String> {
    let section = (
        0..KEYS.len() + 1,
        proptest::collection::vec(
            (any::<prop::sample::Index>(), any::<bool>(), toml_value()),
            0..5,
        ),
    );
    proptest::collection::vec(section, 0..4).prop_map(|sections| {
        let mut text = String::new();
        for (s, entries) in sections {
            let (name, keys) = KEYS.get(s).copied().unwrap_or(("extra", &["key"]));
            text.push_str(&format!("[{name}]\n"));
            for (index, known, value) in entries {
                let key = if known {
                    keys[index.index(keys.len())]
                } else {
                    "unknown_key"
                };
                text.push_str(&format!("{key} = {value}\n"));
            }
        }
        text
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_through_every_target(data in bytes(512)) {
        check_headers(&headers_from_bytes(&data));
        check_path(&path_from_bytes(&data));
        check_body(&body_from_bytes(&data));
        check_config(&config_from_bytes(&data));
    }

    #[test]
    fn header_sets(headers in header_map()) {
        check_headers(&headers);
    }

    #[test]
    fn kserve_v2_paths(case in kserve_path()) {
        check_path(&case);
    }

    #[test]
    fn json_bodies(case in body_case()) {
        check_body(&case);
    }

    #[test]
    fn toml_files(text in toml_file()) {
        check_config(&text);
    }
}

/// The generators reach what they are for: a route, a path and a body
/// accepted, and each kind of error; otherwise the cases above could pass
/// by never reaching the code they check.
#[test]
fn the_checks_see_both_outcomes() {
    use tower_model_balance::config::StackConfig;
    use tower_model_balance::route::RouteInfo;

    let mut headers = HeaderMap::new();
    headers.insert("x-model-id", HeaderValue::from_static("m"));
    assert!(RouteInfo::from_headers(&headers).is_ok());
    check_headers(&headers);
    headers.append("x-model-id", HeaderValue::from_static("n"));
    assert!(RouteInfo::from_headers(&headers).is_err());
    check_headers(&headers);

    for (name, ok) in [(&b"m%2Fx"[..], true), (&b"\xff"[..], false)] {
        let case = PathCase {
            path: format!("/v2/models/{}/infer", encode(name, false)),
            name: Some(name.to_vec()),
        };
        check_path(&case);
        let req = http::Request::post(case.path.as_str())
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        assert_eq!(
            fuzz_route::run_layer(&fuzz_route::layer(16), req).is_ok(),
            ok
        );
    }

    let body = |limit, body: &str| BodyCase {
        limit,
        chunk: 3,
        content_length: false,
        hint: Some(u64::MAX / 2),
        body: body.as_bytes().to_vec(),
    };
    check_body(&body(64, r#"{"model":"m"}"#));
    check_body(&body(4, r#"{"model":"m"}"#));
    check_body(&body(64, r#"{"model":"m","model":"m"}"#));

    assert!(StackConfig::from_toml("[balance]\nowners = 0").is_err());
    check_config("[balance]\nowners = 0");
    check_config("[balance]\nowners = 2");
}
