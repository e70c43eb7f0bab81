//! The TOML files `tests/config/fuzz_inputs.rs` runs `StackConfig::from_toml`'s
//! invariants (`fuzz_config.rs`) on: values of every type, each key's
//! edge values, and files of the format's sections and keys.

use proptest::prelude::*;

use crate::fuzz_config::KEYS;

/// A TOML value: every type, edge numbers, odd strings, arrays, inline
/// tables.
pub fn toml_value() -> impl Strategy<Value = String> {
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

/// Values of the type `section.key` takes, at or near the edges of its
/// range: what gets past the parser to the builders' checks.
pub fn edge_values(section: &str, key: &str) -> Vec<String> {
    const INTS: [&str; 18] = [
        "0",
        "1",
        "2",
        "3",
        "16",
        "17",
        "1024",
        "1025",
        "100",
        "600",
        "10000",
        "10001",
        "3600000",
        "3600001",
        "4294967295",
        "4294967296",
        "9223372036854775807",
        "-1",
    ];
    const FLOATS: [&str; 13] = [
        "0.0", "0.05", "0.2", "0.5", "1.0", "1.25", "2.5", "100.0", "100.5", "-0.5", "1e-9", "inf",
        "nan",
    ];
    let all = |pool: &[&str]| pool.iter().map(|v| v.to_string()).collect();
    match (section, key) {
        ("breaker", "jitter") | ("placement", "evict") | ("balance", "receipts") => {
            all(&["true", "false"])
        }
        ("balance", "stop_point") => all(&[
            "\"headers\"",
            "\"first_frame\"",
            "\"end_of_body\"",
            "\"body\"",
        ]),
        ("balance", "breaker_scope") => all(&["\"backend\"", "\"backend_model\"", "\"pair\""]),
        ("placement", "when_cold") => all(&["\"wait\"", "\"prefer_warm\"", "\"load\""]),
        ("balance", "classification") => all(&["\"http_status\"", "\"grpc_status\"", "\"grpc\""]),
        ("balance", "model_owners") => ["\"llama-3-8b\"", "\"two words\"", "\"\"", "'m\\n'"]
            .iter()
            .flat_map(|model| INTS.iter().map(move |k| format!("{{ {model} = {k} }}")))
            .collect(),
        ("health", "weights") => FLOATS
            .iter()
            .flat_map(|a| {
                ["0.0", "0.5", "1.0"].map(|b| format!("{{ latency = {a}, capacity = {b} }}"))
            })
            .collect(),
        (_, key)
            if key.ends_with("_ms")
                || [
                    "owners",
                    "min_owners",
                    "window",
                    "minimum_calls",
                    "concurrency",
                    "min_samples",
                    "max_models",
                    "max_attempts",
                ]
                .contains(&key)
                || key.starts_with("connections")
                || key.contains("permits")
                || key.contains("vnodes")
                || key.contains("seed")
                || key.contains("buckets")
                || key.contains("pairs")
                || key == "consecutive_failures" =>
        {
            all(&INTS)
        }
        _ => all(&FLOATS),
    }
}

/// One of [`edge_values`], or any float of the key's type.
pub fn typed_value(section: &str, key: &str, pick: prop::sample::Index, f: f64) -> String {
    let values = edge_values(section, key);
    match values[0].parse::<f64>() {
        Ok(_) if values[0].contains('.') && pick.index(3) == 0 => format!("{f:?}"),
        _ => values[pick.index(values.len())].clone(),
    }
}

/// A TOML file: sections of the format (and an unknown one), each with
/// keys of the format, mostly with values of their type at the edges of
/// their ranges, sometimes any value or an unknown key.
pub fn toml_file() -> impl Strategy<Value = String> {
    let entry = (
        any::<prop::sample::Index>(),
        0u8..10,
        any::<prop::sample::Index>(),
        -2.0f64..200.0,
        toml_value(),
    );
    let section = (0..KEYS.len() + 1, proptest::collection::vec(entry, 0..5));
    proptest::collection::vec(section, 0..4).prop_map(|sections| {
        let mut text = String::new();
        let mut seen = std::collections::HashSet::new();
        for (s, entries) in sections {
            let (name, keys) = KEYS.get(s).copied().unwrap_or(("extra", &["key"]));
            if !seen.insert(name) {
                continue; // a table defined twice is a parse error
            }
            text.push_str(&format!("[{name}]\n"));
            let mut written = std::collections::HashSet::new();
            for (index, roll, pick, f, any_value) in entries {
                let key = match roll {
                    0 => "unknown_key",
                    _ => keys[index.index(keys.len())],
                };
                if !written.insert(key) {
                    continue;
                }
                let value = match roll {
                    1 => any_value,
                    _ => typed_value(name, key, pick, f),
                };
                text.push_str(&format!("{key} = {value}\n"));
            }
        }
        text
    })
}
