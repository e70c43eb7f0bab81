//! `--config`'s keys of precise prefix routing: `kv_events` in a
//! `[[gateway.backends]]` entry, `gateway.tokenizer`.

use super::{error, file, parse};

/// A model directory with a `tokenizer.json`.
fn model_dir() -> String {
    let dir = std::env::temp_dir().join(format!("gateway-config-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokenizer.json"), "{}").unwrap();
    dir.to_str().unwrap().to_owned()
}

#[test]
fn kv_events_and_the_tokenizer_read_as_their_flags() {
    let model = model_dir();
    let text = format!(
        "[gateway]\ntokenizer = \"{model}\"\n\n[[gateway.backends]]\nname = \"a\"\nurl = \"http://10.0.0.1:8000\"\nkv_events = \"tcp://10.0.0.1:5557,replay=tcp://10.0.0.1:5558\"\n\n[[gateway.backends]]\nname = \"b\"\nurl = \"http://10.0.0.2:8000\"\n"
    );
    let read = parse(&["--config", &file("kv", &text)]).unwrap();
    let flags = parse(&[
        "--backend",
        "a=http://10.0.0.1:8000",
        "--kv-events",
        "tcp://10.0.0.1:5557,replay=tcp://10.0.0.1:5558",
        "--backend",
        "b=http://10.0.0.2:8000",
        "--tokenizer",
        &model,
    ])
    .unwrap();
    assert_eq!(read, flags);
}

#[test]
fn bad_kv_keys_are_named() {
    let backend = "[[gateway.backends]]\nurl = \"http://a:1\"\n";
    let cases: [(&str, String, &[&str], &str); 4] = [
        (
            "kv-url",
            format!("{backend}kv_events = \"tcp://a\"\n"),
            &[],
            "`gateway.backends[0].kv_events` `tcp://a`: expected tcp://HOST:PORT",
        ),
        (
            "kv-dir",
            format!("[gateway]\ntokenizer = \"/nonexistent/model\"\n{backend}kv_events = \"tcp://a:1\"\n"),
            &[],
            "`gateway.tokenizer`: `/nonexistent/model` is not a directory",
        ),
        (
            "kv-flag",
            format!("{backend}kv_events = \"tcp://a:1\"\n"),
            &["--kv-events", "tcp://b:1"],
            "--kv-events goes after the --backend it is for, on the command line",
        ),
        (
            "kv-dropped",
            format!("[gateway]\ntokenizer = \"{}\"\n{backend}kv_events = \"tcp://a:1\"\n", model_dir()),
            &["--backend", "http://b:1"],
            "--tokenizer goes with --kv-events",
        ),
    ];
    for (name, text, flags, says) in cases {
        // A fault of the command line alone is said as without a file.
        let message = error(name, &text, flags);
        let of_the_file = flags.is_empty() || name == "kv-dropped";
        assert_eq!(
            message.starts_with("--config "),
            of_the_file,
            "{name}: {message}"
        );
        assert!(message.contains(says), "{name}: `{says}` not in: {message}");
    }
    let message = error(
        "kv-dropped-where",
        &format!(
            "[gateway]\ntokenizer = \"{}\"\n{backend}kv_events = \"tcp://a:1\"\n",
            model_dir()
        ),
        &["--backend", "http://b:1"],
    );
    assert!(
        message.contains("(where --tokenizer is `gateway.tokenizer`"),
        "{message}"
    );
}
