//! clap's reading of the flags, said in the gateway's words: a missing
//! value, a flag given twice, an unknown flag, a value's own check.

use crate::args::Args;
use crate::cli::Stop;

fn parse(args: &[&str]) -> Result<Args, Stop> {
    Args::parse(args.iter().map(|s| s.to_string()))
}

/// `flags` after a backend: the gateway needs one.
fn with_backend(flags: &[&str]) -> Result<Args, Stop> {
    parse(&[&["--backend", "http://10.0.0.1:8000"][..], flags].concat())
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
