//! clap's reading of the flags, said in the gateway's words: a missing
//! value, a flag given twice, an unknown flag, a value's own check.

use crate::args::Args;
use crate::cli::Stop;

fn parse(args: &[&str]) -> Result<Args, Stop> {
    Args::parse(args.iter().map(|s| s.to_string()))
}

/// A backend, for the tests of other flags.
const BACKEND: [&str; 2] = ["--backend", "http://10.0.0.1:8000"];

/// `flags` after a backend: the gateway needs one.
fn with_backend(flags: &[&str]) -> Result<Args, Stop> {
    parse(&[&BACKEND[..], flags].concat())
}

#[test]
fn clap_errors_are_said_in_the_gateways_words() {
    for (flags, says) in [
        (&["--listen"][..], "--listen needs a value"),
        (
            &["--listen", "--admin-listen", "127.0.0.1:1"],
            "--listen needs a value",
        ),
        (
            &["--no-placement", "--no-placement"],
            "--no-placement given twice",
        ),
        (&["--bogus"], "unknown flag `--bogus`"),
        (&["stray"], "unknown flag `stray`"),
        (
            &["--max-requests", "-1"],
            "--max-requests: `-1` is not a whole number in 1..=1000000",
        ),
        (
            &["--owner-load", "-1"],
            "--owner-load: `-1` is not a number above 0",
        ),
    ] {
        match with_backend(flags) {
            Err(Stop::Error(message)) => assert!(message.starts_with(says), "{flags:?}: {message}"),
            other => panic!("{flags:?}: {other:?}"),
        }
    }
    // `--flag=value` is `--flag value`, and is the same flag given twice.
    assert_eq!(with_backend(&["--owners=3"]).unwrap().owners, Some(3));
    match with_backend(&["--owners=3", "--owners", "4"]) {
        Err(Stop::Error(message)) => assert_eq!(message, "--owners given twice"),
        other => panic!("{other:?}"),
    }
    assert_eq!(parse(&["-V"]), Err(Stop::Version));
    assert_eq!(parse(&["-h"]), Err(Stop::Help));
}

/// A directory of its own for `--tokenizer`, with a `tokenizer.json` or
/// without.
fn model_dir(name: &str, with_tokenizer: bool) -> String {
    let dir = std::env::temp_dir().join(format!("gateway-tokenizer-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    if with_tokenizer {
        std::fs::write(dir.join("tokenizer.json"), "{}").unwrap();
    }
    dir.to_str().unwrap().to_owned()
}

#[test]
fn kv_events_follow_their_backend() {
    let model = model_dir("good", true);
    let args = parse(&[
        "--backend",
        "a=http://10.0.0.1:8000",
        "--kv-events",
        "tcp://10.0.0.1:5557",
        "--backend",
        "b=http://10.0.0.2:8000",
        "--backend",
        "c=http://10.0.0.3:8000",
        "--kv-events",
        "tcp://10.0.0.3:5557,replay=tcp://10.0.0.3:5558",
        "--tokenizer",
        &model,
    ])
    .unwrap();
    let events = |at: usize| args.kv_events[at].as_deref();
    assert_eq!(events(0), Some("tcp://10.0.0.1:5557"));
    assert_eq!(events(1), None);
    assert_eq!(
        events(2),
        Some("tcp://10.0.0.3:5557,replay=tcp://10.0.0.3:5558")
    );
    let config = args.config().unwrap();
    let ids: Vec<&str> = config.kv_events.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["a", "c"]);
    assert_eq!(
        config.kv_events[1].1,
        "tcp://10.0.0.3:5557,replay=tcp://10.0.0.3:5558"
    );
    assert_eq!(
        config.tokenizer.as_deref(),
        Some(std::path::Path::new(&model))
    );
    assert!(with_backend(&[])
        .unwrap()
        .config()
        .unwrap()
        .kv_events
        .is_empty());
}

#[test]
fn bad_kv_events_and_tokenizers_are_said_in_the_gateways_words() {
    let (bare, none) = (model_dir("bare", false), "/nonexistent/model");
    let alone = model_dir("alone", true);
    let etcd = ["--etcd", "http://127.0.0.1:2379", "--prefix", "/b/"];
    let cases: [(Vec<&str>, String); 9] = [
        (vec!["--kv-events", "10.0.0.1:5557"], "--kv-events `10.0.0.1:5557`: expected tcp://HOST:PORT, or tcp://HOST:PORT,replay=tcp://HOST:PORT".into()),
        (vec!["--kv-events", "tcp://*:5557"], "--kv-events `tcp://*:5557`: expected tcp://HOST:PORT, or tcp://HOST:PORT,replay=tcp://HOST:PORT (`*` is where the server binds: give its host)".into()),
        (vec!["--kv-events", "tcp://h:1,replay=h:2"], "--kv-events `tcp://h:1,replay=h:2`: expected tcp://HOST:PORT".into()),
        (vec!["--kv-events", "tcp://h:1", "--kv-events", "tcp://h:2"], "--kv-events `tcp://h:2`: the --backend before it has one already".into()),
        ([&["--kv-events", "tcp://h:1"][..], &BACKEND].concat(), "--kv-events `tcp://h:1` goes after the --backend it is for".into()),
        ([&etcd[..], &["--kv-events", "tcp://h:1"]].concat(), "--kv-events needs --backend: a backend from etcd has no KV-event endpoint in its record yet".into()),
        (vec!["--tokenizer", none], format!("--tokenizer: `{none}` is not a directory")),
        (vec!["--kv-events", "tcp://h:1", "--tokenizer", &bare], format!("--tokenizer: `{bare}` has no tokenizer.json")),
        (vec!["--tokenizer", &alone], "--tokenizer goes with --kv-events: it tokenizes the prompts for precise prefix routing".into()),
    ];
    for (flags, says) in cases {
        let given = match flags[0] {
            "--etcd" => parse(&flags),
            "--kv-events" if flags.contains(&"--backend") => parse(&flags),
            _ => with_backend(&flags),
        };
        match given {
            Err(Stop::Error(message)) => {
                assert!(message.starts_with(&says), "{flags:?}: {message}")
            }
            other => panic!("{flags:?}: {other:?}"),
        }
    }
}
