//! The sidecar's flags, checked: what parses, and what is refused with a
//! message (exit code 2) rather than a panic.

use super::*;

fn parse(args: &[&str]) -> Result<Args, Stop> {
    Args::parse(args.iter().map(|s| s.to_string()))
}

const REQUIRED: [&str; 8] = [
    "--etcd",
    "http://127.0.0.1:2379",
    "--prefix",
    "/models/backends/",
    "--id",
    "gpu-0",
    "--address",
    "http://10.0.0.1:8000",
];

#[test]
fn required_flags_and_defaults() {
    let args = parse(&REQUIRED).unwrap();
    assert_eq!(args.etcd, ["http://127.0.0.1:2379"]);
    assert_eq!(args.prefix, "/models/backends/");
    assert_eq!(args.meta.id().as_str(), "gpu-0");
    assert_eq!(
        args.meta.address().unwrap().to_string(),
        "http://10.0.0.1:8000"
    );
    assert_eq!((args.meta.weight(), args.meta.model_slots()), (1, 4));
    assert!(args.meta.metrics_address().is_none());
    assert_eq!(args.ttl, Duration::from_secs(10));
    assert_eq!(args.interval, Duration::from_secs(1));
    assert_eq!(args.probe, Probe::KServe);
    let mut all = REQUIRED.to_vec();
    all.extend([
        "--etcd",
        "http://127.0.0.1:22379",
        "--ttl",
        "2",
        "--weight",
        "3",
        "--model-slots",
        "8",
        "--metrics-address",
        "http://10.0.0.1:8082",
        "--probe",
        "openai",
        "--interval",
        "250",
    ]);
    let args = parse(&all).unwrap();
    assert_eq!(args.etcd.len(), 2);
    assert_eq!(args.ttl, Duration::from_secs(2));
    assert_eq!((args.meta.weight(), args.meta.model_slots()), (3, 8));
    assert_eq!(
        args.meta.metrics_address().unwrap().to_string(),
        "http://10.0.0.1:8082"
    );
    assert_eq!(args.probe, Probe::OpenAi);
    assert_eq!(args.interval, Duration::from_millis(250));
    assert_eq!(parse(&["--help"]), Err(Stop::Help));
}

#[test]
fn bad_flags_are_errors_that_name_them() {
    let without = |flag: &str| {
        let at = REQUIRED.iter().position(|f| *f == flag).unwrap();
        let mut args = REQUIRED.to_vec();
        args.drain(at..at + 2);
        args
    };
    let with = |more: &[&'static str]| {
        let mut args = REQUIRED.to_vec();
        args.extend_from_slice(more);
        args
    };
    for (bad, says) in [
        (without("--etcd"), "--etcd is required"),
        (without("--prefix"), "--prefix is required"),
        (without("--id"), "--id is required"),
        (without("--address"), "--address is required"),
        (with(&["--sim"]), "unknown flag `--sim`"),
        (with(&["--id", "gpu-1"]), "--id given twice"),
        (with(&["--etcd", "http://127.0.0.1:2379"]), "given twice"),
        (
            with(&["--etcd", "127.0.0.1:2379"]),
            "--etcd `127.0.0.1:2379`",
        ),
        (with(&["--etcd", "http://h"]), "give the port"),
        (with(&["--etcd-ca", "/ca.pem"]), "need https://"),
        (with(&["--etcd-allow", "10.0.0.0/8"]), "unknown flag"),
        (
            with(&["--etcd-user", "a", "--etcd-user", "b"]),
            "--etcd-user given twice",
        ),
        (
            with(&["--etcd-password-file", "/pw"]),
            "goes with --etcd-user",
        ),
        (with(&["--address", "x"]), "--address given twice"),
        (with(&["--ttl", "0"]), "--ttl"),
        (with(&["--ttl", "3601"]), "--ttl"),
        (with(&["--ttl", "1.5"]), "--ttl"),
        (with(&["--weight", "0"]), "--weight"),
        (with(&["--weight", "10001"]), "--weight"),
        (with(&["--model-slots", "17"]), "--model-slots"),
        (
            with(&["--metrics-address", "not a url"]),
            "--metrics-address",
        ),
        (with(&["--probe", "grpc"]), "neither kserve nor openai"),
        (with(&["--interval", "9"]), "--interval"),
        (
            with(&["--interval", "99999999999999999999999"]),
            "--interval",
        ),
        (with(&["--bogus", "1"]), "unknown flag `--bogus`"),
        (with(&["--bogus"]), "unknown flag `--bogus`"),
        (with(&["--ttl"]), "--ttl needs a value"),
    ] {
        match parse(&bad) {
            Err(Stop::Error(message)) => {
                assert!(
                    message.contains(says),
                    "{bad:?}: `{message}` lacks `{says}`"
                )
            }
            other => panic!("{bad:?} should fail, got {other:?}"),
        }
    }
    let mut bad_id = without("--id");
    bad_id.extend(["--id", "gpu 0"]);
    assert!(matches!(parse(&bad_id), Err(Stop::Error(m)) if m.contains("--id `gpu 0`")));
    let mut bad_address = without("--address");
    bad_address.extend(["--address", "http://10.0.0.1:8000/v2"]);
    assert!(matches!(parse(&bad_address), Err(Stop::Error(m)) if m.contains("--address")));
    let mut bad_prefix = without("--prefix");
    bad_prefix.extend(["--prefix", ""]);
    assert!(matches!(parse(&bad_prefix), Err(Stop::Error(m)) if m.contains("not a key prefix")));
}
