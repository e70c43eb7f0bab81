//! `--config`: the example file, every flag's key, flags over the file,
//! the gateway's defaults under a table, and the errors.

use std::time::Duration;

use tower_model_balance::balance::{BalanceConfig, BreakerScope};
use tower_model_balance::breaker::BreakerConfig;
use tower_model_balance::health::probe::ProbeConfig;
use tower_model_balance::hedge::HedgeConfig;
use tower_model_balance::placement::{PlacementConfig, WhenCold};

use super::KEYS;
use crate::args::{Args, USAGE};
use crate::cli::Stop;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gateway.toml");

fn parse(flags: &[&str]) -> Result<Args, Stop> {
    Args::parse(flags.iter().map(|f| f.to_string()))
}

/// `text` in a file of its own; its path.
fn file(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("gateway-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn error(name: &str, text: &str, flags: &[&str]) -> String {
    let path = file(name, text);
    let mut all = vec!["--config", &path];
    all.extend(flags);
    match parse(&all) {
        Err(Stop::Error(message)) => message,
        other => panic!("{name}: not an error: {other:?}"),
    }
}

/// The layers' settings `args` make, as TOML.
fn stack(args: &Args) -> toml::Table {
    let config = args.config().unwrap();
    config.stack.to_toml().parse().unwrap()
}

/// The example reads as the flags it stands for (its layers' tables
/// aside), and its layers' keys reach the stack.
#[test]
fn the_example_file_reads_as_the_flags_it_stands_for() {
    let read = parse(&["--config", EXAMPLE]).unwrap();
    let flags = parse(&[
        "--listen",
        "0.0.0.0:8080",
        "--admin-listen",
        "127.0.0.1:8081",
        "--probe",
        "openai",
        "--no-placement",
        "--model-slots",
        "4",
        "--prefix-bytes",
        "4096",
        "--session-header",
        "x-session-id",
        "--receipt-header",
        "--body-limit",
        "67108864",
        "--json-body-limit",
        "16777216",
        "--max-connections",
        "10000",
        "--header-timeout",
        "10",
        "--max-requests",
        "10000",
        "--max-buffered-bytes",
        "1073741824",
        "--drain-timeout",
        "300",
        "--connect-timeout",
        "5",
        "--first-token-timeout",
        "60",
        "--idle-timeout",
        "60",
        "--request-timeout",
        "1800",
        "--access-log",
        "json",
        "--backend",
        "vllm-0=http://10.0.0.1:8000",
        "--metrics",
        "http://10.0.0.1:8001",
        "--backend",
        "vllm-1=http://10.0.0.2:8000",
        "--owners",
        "2",
        "--owner-load",
        "1.0",
        "--admission-limit",
        "64",
    ])
    .unwrap();
    let layers_aside = |args: &Args| Args {
        owners: None,
        owner_load: None,
        admission_limit: None,
        tables: toml::Table::new(),
        ..args.clone()
    };
    assert_eq!(layers_aside(&read), layers_aside(&flags));
    let stack = stack(&read);
    assert_eq!(stack["balance"]["owners"].as_integer(), Some(2));
    assert_eq!(stack["balance"]["owner_load"].as_float(), Some(1.0));
    assert_eq!(stack["admission"]["limit"].as_integer(), Some(64));
    assert_eq!(
        stack["breaker"]["consecutive_failures"].as_integer(),
        Some(5)
    );
    assert_eq!(stack["probe"]["interval_ms"].as_integer(), Some(2000));
}

/// The example of `docs/operations.md`'s "Config file" reads, and its
/// tables reach the stack over the gateway's defaults.
#[test]
fn the_example_of_the_docs_reads() {
    let docs = include_str!("../../../../../docs/operations.md");
    let section = docs.split("## Config file").nth(1).unwrap();
    let text = section
        .split("```toml\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let args = parse(&["--config", &file("docs", text)]).unwrap();
    assert_eq!(args.ids.len(), 2);
    let stack = stack(&args);
    assert_eq!(
        stack["breaker"]["open_duration_ms"].as_integer(),
        Some(10_000)
    );
    assert_eq!(
        stack["breaker"]["consecutive_failures"].as_integer(),
        Some(3)
    );
    assert_eq!(stack["hedge"]["percentile"].as_float(), Some(0.99));
}

/// The keys of `USAGE`'s flags: each flag but `--help`, `--version` and
/// `--config` has one ([`KEYS`]), named by the rule `--config` states in
/// the usage (its name in `[gateway]`, `_s` for seconds) or else named
/// there, and found in the example (its lines commented out included). A
/// flag added without a key fails here.
#[test]
fn every_flag_of_the_usage_has_a_key_in_the_example() {
    let flags: Vec<&str> = USAGE
        .lines()
        .filter(|line| line.starts_with("  -") && !line.starts_with("   "))
        .flat_map(|line| line.split_whitespace().take_while(|w| w.starts_with('-')))
        .map(|w| w.trim_end_matches(','))
        .filter(|w| w.starts_with("--"))
        .collect();
    assert!(flags.len() > 20, "{flags:?}");
    let usage_of_config = USAGE
        .split("  --config FILE")
        .nth(1)
        .and_then(|rest| rest.split("\n  -").next())
        .unwrap();
    let uncommented: String = std::fs::read_to_string(EXAMPLE)
        .unwrap()
        .lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(key) if key.starts_with('[') || key.split_once(" = ").is_some() => key,
            _ => line,
        })
        .map(|line| format!("{line}\n"))
        .collect();
    let example: toml::Table = uncommented.parse().unwrap();
    for flag in &flags {
        if ["--help", "--version", "--config"].contains(flag) {
            continue;
        }
        let Some((_, key)) = KEYS.iter().find(|(f, _)| f == flag) else {
            panic!("{flag} has no key in the file: add it to args/file.rs's KEYS and `Gateway`");
        };
        let snake = flag.trim_start_matches("--").replace('-', "_");
        let by_rule = [format!("gateway.{snake}"), format!("gateway.{snake}_s")];
        assert!(
            by_rule.iter().any(|k| k == key) || usage_of_config.contains(flag),
            "{flag}'s key {key} is not by the rule, nor said in --config's usage"
        );
        let mut at = Some(toml::Value::Table(example.clone()));
        for part in key.split('.') {
            let (name, each) = match part.strip_suffix("[]") {
                Some(name) => (name, true),
                None => (part, false),
            };
            at = at.and_then(|v| v.get(name).cloned());
            if each {
                at = at.and_then(|v| v.get(0).cloned());
            }
        }
        assert!(at.is_some(), "{flag}'s key {key} is not in {EXAMPLE}");
    }
    for (flag, _) in KEYS {
        assert!(flags.contains(&flag), "{flag} of KEYS is not in USAGE");
    }
}

/// The keys the example has commented out: etcd's table, one metrics
/// port for all.
#[test]
fn the_other_keys_read_as_their_flags() {
    let cases: [(&str, &[&str]); 2] = [
        (
            "[gateway.etcd]\nendpoints = [\"http://10.0.0.9:2379\", \"http://10.0.0.8:2379\"]\nprefix = \"/b/\"",
            &["--etcd", "http://10.0.0.9:2379", "--etcd", "http://10.0.0.8:2379", "--prefix", "/b/"],
        ),
        (
            "[gateway]\nmetrics_port = 8082\nbackends = [{ url = \"http://10.0.0.1:8000\" }]",
            &["--metrics-port", "8082", "--backend", "http://10.0.0.1:8000"],
        ),
    ];
    for (i, (text, flags)) in cases.iter().enumerate() {
        let path = file(&format!("other-{i}"), text);
        assert_eq!(
            parse(&["--config", &path]).unwrap(),
            parse(flags).unwrap(),
            "{text}"
        );
    }
}

/// A flag given on the command line wins over its key; the file's other
/// keys stay. `--backend` replaces the file's backends (not adds to
/// them), `--etcd` too but keeps the file's prefix, and `--owners` goes
/// over `[balance] owners`.
#[test]
fn flags_override_the_file() {
    let path = file(
        "override",
        "[gateway]\nlisten = \"127.0.0.1:7000\"\ndrain_timeout_s = 10\n\
         backends = [{ name = \"a\", url = \"http://10.0.0.1:80\" }, { name = \"b\", url = \"http://10.0.0.2:80\" }]\n\
         \n[balance]\nowners = 2\nload_factor = 2.0\n",
    );
    let args = parse(&[
        "--config",
        &path,
        "--listen",
        "127.0.0.1:9000",
        "--owners",
        "3",
    ])
    .unwrap();
    assert_eq!(args.listen.to_string(), "127.0.0.1:9000");
    assert_eq!(args.serve.drain_timeout, Duration::from_secs(10));
    assert_eq!(args.ids.len(), 2);
    let stack = stack(&args);
    assert_eq!(stack["balance"]["owners"].as_integer(), Some(3));
    assert_eq!(stack["balance"]["load_factor"].as_float(), Some(2.0));

    let args = parse(&["--config", &path, "--backend", "c=http://10.0.0.3:80"]).unwrap();
    assert_eq!(
        args.ids.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["c"]
    );

    // The file's etcd: --etcd replaces its endpoints and keeps its
    // prefix; --backend replaces both.
    let etcd = "[gateway.etcd]\nendpoints = [\"http://10.0.0.8:2379\"]\nprefix = \"/fleet/\"\n";
    let path = file("override-etcd", etcd);
    let args = parse(&["--config", &path, "--etcd", "http://10.0.0.9:2379"]).unwrap();
    let endpoints: Vec<String> = args.etcd.iter().map(ToString::to_string).collect();
    assert_eq!(endpoints, ["http://10.0.0.9:2379"]);
    assert_eq!(args.prefix.as_deref(), Some("/fleet/"));
    let args = parse(&["--config", &path, "--backend", "c=http://10.0.0.3:80"]).unwrap();
    assert_eq!(
        (args.prefix, args.etcd.len(), args.backends.len()),
        (None, 0, 1)
    );

    // The command line's --metrics is for the command line's --backend.
    let message = error(
        "override-metrics",
        "[gateway]\nbackends = [{ url = \"http://10.0.0.1:80\" }]",
        &["--metrics", "http://10.0.0.1:81"],
    );
    assert!(
        message.contains("--metrics goes after the --backend"),
        "{message}"
    );
}

/// The gateway's own layer settings (what `app.rs` built in code before
/// the file) are the defaults a table's missing keys keep: a file that
/// sets `[breaker] open_duration_ms` keeps three failures in a row, a
/// breaker per (backend, model), no panic mode, probes every second.
#[test]
fn a_table_keeps_the_gateways_defaults_for_the_keys_it_leaves_out() {
    let gateway_breaker = |b: tower_model_balance::breaker::BreakerConfigBuilder| {
        b.consecutive_failures(3).build().unwrap()
    };
    let gateway_balance = |breaker: BreakerConfig| {
        BalanceConfig::builder()
            .breaker(breaker)
            .breaker_scope(BreakerScope::BackendModel { max_pairs: 100_000 })
            .panic_threshold(0.0)
    };
    let probe = |interval: u64, timeout: u64| {
        ProbeConfig::builder()
            .interval(Duration::from_millis(interval))
            .timeout(Duration::from_millis(timeout))
            .build()
            .unwrap()
    };
    // No file: as app.rs had it.
    let none = crate::app::default_stack();
    let breaker = gateway_breaker(BreakerConfig::builder());
    assert_eq!(
        none.balance,
        gateway_balance(breaker.clone()).build().unwrap()
    );
    assert_eq!(none.breaker, breaker);
    assert_eq!(none.probe, probe(1000, 500));
    let warm = PlacementConfig::builder()
        .when_cold(WhenCold::PreferWarm)
        .build()
        .unwrap();
    assert_eq!(none.placement, warm);
    assert_eq!(none.hedge, HedgeConfig::default());

    // A table that names other keys keeps the gateway's.
    let path = file(
        "defaults",
        "[breaker]\nopen_duration_ms = 2000\n\n[balance]\nowners = 3\n\n[probe]\ninterval_ms = 200\n",
    );
    let read = parse(&["--config", &path, "--backend", "http://10.0.0.1:80"])
        .unwrap()
        .config()
        .unwrap()
        .stack;
    let breaker = gateway_breaker(BreakerConfig::builder().open_duration(Duration::from_secs(2)));
    assert_eq!(read.breaker, breaker);
    assert_eq!(
        read.balance,
        gateway_balance(breaker).owners(3).build().unwrap()
    );
    assert_eq!(read.probe, probe(200, 200));
    assert_eq!(read.placement, warm);

    // A key the file gives wins, and takes what goes with it.
    let path = file(
        "scope",
        "[balance]\nbreaker_scope = \"backend\"\npanic_threshold = 0.5\n",
    );
    let read = parse(&["--config", &path, "--backend", "http://10.0.0.1:80"])
        .unwrap()
        .config()
        .unwrap()
        .stack;
    let balance = BalanceConfig::builder().breaker(gateway_breaker(BreakerConfig::builder()));
    assert_eq!(read.balance, balance.build().unwrap());
}

/// A bad file: its path, and the line and column or the key.
#[test]
fn a_bad_file_is_named_with_its_key_or_line() {
    let missing = match parse(&["--config", "/nonexistent/gateway.toml"]) {
        Err(Stop::Error(message)) => message,
        other => panic!("{other:?}"),
    };
    assert!(
        missing.starts_with("--config /nonexistent/gateway.toml: "),
        "{missing}"
    );
    let cases: [(&str, &str, &[&str]); 11] = [
        ("syntax", "[gateway]\nlisten = \n", &["line 2, column"]),
        ("unknown-key", "[gateway]\nlisten = \"127.0.0.1:1\"\nlisen = 1\n", &["line 3, column 1", "unknown field `lisen`"]),
        ("unknown-table", "\n[gatway]\nlisten = 1\n", &["line 2, column", "unknown field `gatway`", "`gateway`"]),
        ("type", "[gateway]\nmodel_slots = \"3\"\n", &["line 2, column 15"]),
        ("layer-key", "[gateway]\nlisten = \"127.0.0.1:1\"\n\n[breaker]\nopen_duration = 5\n\n[[gateway.backends]]\nurl = \"http://a:1\"\n", &["line 5, column 1", "unknown field `open_duration`"]),
        ("layer-type", "[[gateway.backends]]\nurl = \"http://a:1\"\n[hedge]\nmax_attempts = \"2\"\n", &["line 4, column 16"]),
        ("range", "[gateway]\nmodel_slots = 20\n", &["`gateway.model_slots`: `20` is not a whole number in 1..=16"]),
        ("negative", "[gateway]\nmax_requests = -1\n", &["`gateway.max_requests`: `-1` is not a whole number"]),
        ("layer-range", "[balance]\nload_factor = 0.5\n", &["`balance.load_factor` must be 1.0 ..= 100.0"]),
        ("url", "[[gateway.backends]]\nurl = \"http://a:1\"\n[[gateway.backends]]\nurl = \"ftp://b\"\n", &["`gateway.backends[1].url` `ftp://b`"]),
        ("both", "[[gateway.backends]]\nurl = \"http://a:1\"\n[gateway.etcd]\nendpoints = [\"http://e:2379\"]\nprefix = \"/p/\"\n", &["one or the other", "where --backend is `gateway.backends[].url`", "--etcd is `gateway.etcd.endpoints`"]),
    ];
    for (name, text, says) in cases {
        let message = error(name, text, &[]);
        assert!(message.starts_with("--config "), "{name}: {message}");
        for said in says {
            assert!(message.contains(said), "{name}: `{said}` not in: {message}");
        }
    }
    // A flag the file's range turns bad: the key named, after the flags.
    let message = error(
        "owner-load",
        "[balance]\nload_factor = 1.0\n",
        &["--owner-load", "1.2"],
    );
    assert!(
        message.contains("`balance.owner_load` must be above 0.0, up to load_factor"),
        "{message}"
    );
}

/// The layers' text keeps the file's lines, the `[gateway]` lines blank.
#[test]
fn the_layers_keep_their_lines() {
    let text = "gateway.listen = \"x\"\n[balance]\nowners = 3\n[[gateway.backends]]\nurl = \"u\"\n[hedge]\nmax_attempts = 2\n";
    let mut tables: toml::Table = text.parse().unwrap();
    tables.remove("gateway");
    let layers = super::layers_text(text, &tables);
    assert_eq!(
        layers,
        "\n[balance]\nowners = 3\n\n\n[hedge]\nmax_attempts = 2\n"
    );
}

mod kv;
