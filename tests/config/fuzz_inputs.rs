//! The fuzz targets' inputs as proptest cases that run with `cargo test`:
//! arbitrary bytes through the same decoders, and generated shapes the
//! fuzzers find only slowly — header sets, KServe v2 paths with
//! percent-encoding, JSON with odd escapes, duplicate keys, huge numbers
//! and deep nesting, TOML with random keys and values. The invariants are
//! the fuzz targets' own (`fuzz_route.rs`, `fuzz_body.rs`, `fuzz_layer.rs`,
//! `fuzz_config.rs` of `crates/test-support`).

use crate::fuzz_body;
use crate::fuzz_config;
use crate::fuzz_layer;
use crate::fuzz_route;
use crate::fuzz_toml;

use fuzz_body::{
    body_from_bytes, check_body, check_path, encode, path_from_bytes, BodyCase, PathCase,
};
use fuzz_config::{check_config, config_from_bytes, KEYS};
use fuzz_route::{check_headers, headers_from_bytes, NAMES, WORDS};
use fuzz_toml::{edge_values, toml_file};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
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
        4 => (prop::sample::select(&WORDS[..]), any::<u64>()).prop_map(|(w, mask)| w
            .bytes()
            .enumerate()
            .map(|(i, b)| if mask >> (i % 64) & 1 == 1 {
                b.to_ascii_uppercase()
            } else {
                b
            })
            .collect()),
        1 => any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        1 => "[+-]?[0-9]{1,25}".prop_map(String::into_bytes),
        1 => "[a-zA-Z0-9._:/-]{0,300}".prop_map(String::into_bytes),
        1 => "\\PC{0,20}".prop_map(String::into_bytes),
        1 => proptest::collection::vec(
            prop_oneof![Just(b'\t'), 0x20u8..=0x7e, 0x80u8..=0xff],
            0..40
        ),
    ]
}

/// Header sets: most with one valid `x-model-id`, then up to 5 route (or
/// other) headers, repeats allowed, so that each later check is reached.
fn header_map() -> impl Strategy<Value = HeaderMap> {
    let model = prop_oneof![3 => "[a-z0-9._:-]{1,20}".prop_map(Some), 1 => Just(None)];
    let pairs = proptest::collection::vec((prop::sample::select(&NAMES[..]), header_value()), 0..6);
    (model, pairs).prop_map(|(model, pairs)| {
        let mut map = HeaderMap::new();
        if let Some(model) = model {
            map.append("x-model-id", HeaderValue::from_str(&model).unwrap());
        }
        for (name, value) in pairs {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            if let Ok(value) = HeaderValue::from_bytes(&value) {
                map.append(name, value);
            }
        }
        map
    })
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
    // Half the limits within two bytes of the body's length (the edge),
    // half anywhere.
    let limit = (any::<bool>(), 1usize..=4096, 0usize..=4);
    (limit, 0usize..64, any::<bool>(), hint, json_body()).prop_map(
        |((edge, limit, delta), chunk, content_length, hint, body)| BodyCase {
            limit: if edge {
                (body.len() + delta).saturating_sub(2).clamp(1, 4096)
            } else {
                limit
            },
            chunk,
            content_length,
            hint,
            body,
        },
    )
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

/// Every key of the file alone in its section, at each of its edge
/// values: each error names that key (the random files above reach the
/// builders' checks only now and then, one key masking another).
#[test]
fn every_key_at_its_edges() {
    use tower_model_balance::config::{ConfigError, StackConfig};
    let mut invalid = 0;
    for (section, keys) in KEYS {
        for key in keys {
            for value in edge_values(section, key) {
                let text = format!("[{section}]\n{key} = {value}\n");
                check_config(&text);
                if let Err(ConfigError::Invalid { key: named, .. }) = StackConfig::from_toml(&text)
                {
                    assert!(named.starts_with(&format!("{section}.")), "{text}: {named}");
                    invalid += 1;
                }
            }
        }
    }
    assert!(invalid > 50, "only {invalid} values out of range");
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
    // Every word in other cases, under both headers (one is refused).
    for word in WORDS {
        for name in ["x-request-kind", "x-urgency"] {
            let capital = format!("{}{}", word[..1].to_uppercase(), &word[1..]);
            for value in [word.to_uppercase(), capital] {
                let mut headers = HeaderMap::new();
                headers.insert("x-model-id", HeaderValue::from_static("m"));
                headers.insert(name, HeaderValue::from_str(&value).unwrap());
                check_headers(&headers);
                headers.remove("x-model-id");
                check_headers(&headers);
            }
        }
    }

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
            fuzz_layer::run_layer(&fuzz_layer::layer(16), req).is_ok(),
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
    // 13 bytes: the limit is inclusive.
    let exact = r#"{"model":"m"}"#;
    let seen = |case: &BodyCase| {
        let req = http::Request::post("/")
            .body(http_body_util::Full::new(bytes::Bytes::from(
                case.body.clone(),
            )))
            .unwrap();
        fuzz_layer::run_layer(&fuzz_layer::layer(case.limit), req)
    };
    assert!(seen(&body(13, exact)).is_ok());
    assert!(seen(&body(12, exact))
        .unwrap_err()
        .is::<tower_model_balance::error::PayloadTooLarge>());
    for limit in [4, 12, 13, 14, 64] {
        check_body(&body(limit, exact));
    }
    check_body(&body(64, r#"{"model":"m","model":"m"}"#));

    assert!(StackConfig::from_toml("[balance]\nowners = 0").is_err());
    check_config("[balance]\nowners = 0");
    check_config("[balance]\nowners = 2");
    // Found by `toml_files` in CI: an integer over i64::MAX, which a typed
    // field reads and a `toml::Table` cannot hold, beside a value out of
    // range.
    check_config(
        "[hedge]\npercentile = 1.0\nmin_samples = 9223372036854775808\n[balance]\nstaging_max_share = 4.981676321891242\n",
    );
}
