//! The gateway's flags, checked: what parses, and what is refused with a
//! message rather than a panic.

use super::*;
use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;

fn parse(args: &[&str]) -> Result<Args, Stop> {
    Args::parse(args.iter().map(|s| s.to_string()))
}

/// A backend, for the tests of other flags: the gateway needs one.
const BACKEND: [&str; 2] = ["--backend", "http://10.0.0.1:8000"];

/// `flags` after [`BACKEND`].
fn with_backend(flags: &[&str]) -> Result<Args, Stop> {
    parse(&[&BACKEND[..], flags].concat())
}

#[test]
fn defaults_and_flags() {
    let args = with_backend(&[]).unwrap();
    assert_eq!(args.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(args.body_limit, 64 << 20);
    assert!(args.placement && args.metrics_port.is_none());
    assert_eq!(args.backends.len(), 1);
    let args = parse(&[
        "--listen",
        "127.0.0.1:0",
        "--backend",
        "http://10.0.0.1:8000",
        "--backend",
        "http://10.0.0.2:8000",
        "--probe",
        "openai",
        "--body-limit",
        "2048",
        "--metrics-port",
        "8082",
        "--no-placement",
    ])
    .unwrap();
    assert_eq!(args.metrics_port, Some(8082));
    assert!(!args.placement);
    assert_eq!(args.listen.port(), 0);
    assert_eq!(args.backends.len(), 2);
    assert!(args.probe_openai);
    assert_eq!(args.body_limit, 2048);
    let args = parse(&[
        "--backend",
        "http://127.0.0.1:21001",
        "--metrics",
        "http://127.0.0.1:21201",
        "--backend",
        "http://127.0.0.1:21002",
    ])
    .unwrap();
    assert_eq!(args.metrics.len(), 2);
    assert_eq!(
        args.metrics[0].as_ref().unwrap().to_string(),
        "http://127.0.0.1:21201"
    );
    assert!(args.metrics[1].is_none());
    assert_eq!(parse(&["--help"]), Err(Stop::Help));
}

#[test]
fn without_backends_it_says_what_to_give() {
    for flags in [&[][..], &["--listen", "127.0.0.1:1", "--no-placement"]] {
        match parse(flags) {
            Err(Stop::Error(message)) => {
                assert!(
                    message.starts_with("no backends: give --backend URL"),
                    "{message}"
                );
                assert!(message.contains("--etcd URL --prefix P") && message.contains("`sims`"));
            }
            other => panic!("{flags:?}: {other:?}"),
        }
    }
    // The old flags of the simulated backends are gone.
    for gone in ["--sims", "--down"] {
        match with_backend(&[gone, "2"]) {
            Err(Stop::Error(message)) => assert!(message.contains("unknown flag"), "{message}"),
            other => panic!("{gone}: {other:?}"),
        }
    }
}

#[test]
fn bad_flags_are_errors_not_panics() {
    for bad in [
        &["--listen"][..],
        &["--listen", "localhost"],
        &["--backend", "not a url"],
        &["--backend", "=http://10.0.0.1:8000"],
        &["--backend", "vllm 0=http://10.0.0.1:8000"],
        &["--backend", "vllm-0=not a url"],
        &[
            "--backend",
            "vllm-0=http://10.0.0.1:8000",
            "--backend",
            "vllm-0=http://10.0.0.2:8000",
        ],
        &["--probe", "grpc"],
        &["--body-limit", "0"],
        &["--body-limit", "67108865"],
        &["--model-slots", "0"],
        &["--model-slots", "17"],
        &["--model-slots", "4", "--model-slots", "5"],
        &["--owners", "0"],
        &["--owners", "1025"],
        &["--owners", "2", "--owners", "3"],
        &["--owner-load", "0"],
        &["--owner-load", "-1"],
        &["--owner-load", "1.3"],
        &["--owner-load", "NaN"],
        &["--owner-load", "1", "--owner-load", "1"],
        &["--prefix-bytes", "0"],
        &["--prefix-bytes", "65537"],
        &["--prefix-bytes", "1", "--prefix-bytes", "2"],
        &["--session-header", "bad header"],
        &["--session-header", "x-model-id"],
        &["--session-header", "a", "--session-header", "b"],
        &["--metrics-port", "0"],
        &["--metrics-port", "65536"],
        &["--metrics-port"],
        &["--metrics", "http://127.0.0.1:1"],
        &[
            "--backend",
            "http://a:1",
            "--metrics",
            "http://a:2",
            "--metrics",
            "http://a:3",
        ],
        &["--backend", "http://a:1", "--metrics", "not a url"],
        &[
            "--backend",
            "http://a:1",
            "--metrics",
            "http://a:2",
            "--metrics-port",
            "9",
        ],
        &["--body-limit", "99999999999999999999999"],
        &["--bogus"],
        &[
            "--backend",
            "http://10.0.0.1:8000",
            "--backend",
            "http://10.0.0.1:8000",
        ],
        // The same backend written another way.
        &["--backend", "http://a:1", "--backend", "http://a:01"],
        &["--backend", "http://a", "--backend", "http://a:80"],
        &[
            "--backend",
            "http://Node-1:8000",
            "--backend",
            "http://node-1:8000",
        ],
    ] {
        assert!(
            matches!(parse(bad), Err(Stop::Error(_))),
            "{bad:?} should fail"
        );
    }
}

#[test]
fn etcd_is_the_alternative_to_backend() {
    let args = parse(&[
        "--etcd",
        "http://127.0.0.1:2379",
        "--etcd",
        "http://127.0.0.1:22379",
        "--prefix",
        "/models/backends/",
        "--no-placement",
    ])
    .unwrap();
    let etcd: Vec<String> = args.etcd.iter().map(ToString::to_string).collect();
    assert_eq!(etcd, ["http://127.0.0.1:2379", "http://127.0.0.1:22379"]);
    assert_eq!(args.prefix.as_deref(), Some("/models/backends/"));
    assert!(args.backends.is_empty() && !args.placement);
    let etcd = ["--etcd", "http://127.0.0.1:2379"];
    let prefix = ["--prefix", "/p/"];
    // Each bad combination, and what its message must name.
    for (bad, says) in [
        (vec![&etcd[..]], "--etcd needs --prefix"),
        (vec![&prefix[..]], "--prefix goes with --etcd"),
        (
            vec![&prefix[..], &["--backend", "http://10.0.0.1:8000"]],
            "--prefix goes with --etcd",
        ),
        (
            vec![&etcd[..], &prefix, &["--backend", "http://10.0.0.1:8000"]],
            "one or the other",
        ),
        (
            vec![&etcd[..], &prefix, &["--metrics-port", "8082"]],
            "metrics_address",
        ),
        (
            vec![&etcd[..], &prefix, &["--metrics", "http://a:2"]],
            "after the --backend",
        ),
        (vec![&etcd[..], &prefix, &prefix], "--prefix given twice"),
        (vec![&etcd[..], &etcd, &prefix], "given twice"),
        (
            vec![&etcd[..], &prefix, &["--etcd", "http://127.0.0.1:02379"]],
            "given twice",
        ),
        (
            vec![&["--etcd", "127.0.0.1:2379"][..], &prefix],
            "--etcd `127.0.0.1:2379`",
        ),
        (
            vec![&["--etcd", "https://h:2379"][..], &etcd, &prefix],
            "all http:// or all https://",
        ),
        (vec![&["--etcd", "http://h"][..], &prefix], "give the port"),
        (vec![&etcd[..], &["--prefix", ""]], "not a key prefix"),
        (vec![&etcd[..], &["--prefix", "/a\n"]], "not a key prefix"),
        (vec![&["--etcd"][..]], "--etcd needs a value"),
        (
            vec![&["--listen", "--admin-listen", "127.0.0.1:1"][..]],
            "--listen needs a value",
        ),
        (vec![&etcd[..], &["--prefix"]], "--prefix needs a value"),
    ] {
        let bad: Vec<&str> = bad.concat();
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
}

#[test]
fn owner_sizing_flags() {
    let args = with_backend(&[]).unwrap();
    assert_eq!(
        (args.owners, args.owner_load),
        (None, None),
        "the balancer's defaults"
    );
    let args = with_backend(&["--owners", "4", "--owner-load", "1.0"]).unwrap();
    assert_eq!((args.owners, args.owner_load), (Some(4), Some(1.0)));
}

#[test]
fn model_slots_are_for_the_backends_given() {
    assert_eq!(
        with_backend(&[]).unwrap().model_slots,
        None,
        "BackendMeta's default"
    );
    let args = parse(&["--backend", "http://10.0.0.1:8000", "--model-slots", "5"]).unwrap();
    assert_eq!(args.model_slots, Some(5));
    let etcd = ["--etcd", "http://127.0.0.1:2379", "--prefix", "/fleet/"];
    assert!(parse(&etcd).is_ok());
    let with_slots = parse(&[&etcd[..], &["--model-slots", "5"]].concat());
    match with_slots {
        Err(Stop::Error(message)) => assert!(message.contains("--model-slots"), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_backend_is_named_by_its_name_else_its_origin() {
    let args = parse(&[
        "--backend",
        "vllm-0=http://10.0.0.1:8000",
        "--backend",
        "http://10.0.0.2:8000",
    ])
    .unwrap();
    let ids: Vec<&str> = args.ids.iter().map(|id| id.as_str()).collect();
    assert_eq!(ids, ["vllm-0", "http://10.0.0.2:8000"]);
    let origins: Vec<String> = args.backends.iter().map(ToString::to_string).collect();
    assert_eq!(origins, ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]);
    // The same server under two names is still given twice.
    let twice = parse(&[
        "--backend",
        "a=http://10.0.0.1:8000",
        "--backend",
        "b=http://10.0.0.1:8000",
    ]);
    match twice {
        Err(Stop::Error(message)) => assert!(message.contains("given twice"), "{message}"),
        other => panic!("{other:?}"),
    }
}

/// Each ID beside its origin, written out.
fn named(list: &[(BackendId, Origin)]) -> Vec<(&str, String)> {
    list.iter()
        .map(|(id, origin)| (id.as_str(), origin.to_string()))
        .collect()
}

#[test]
fn the_config_hashes_each_backend_by_its_name_and_scrapes_by_it() {
    let args = parse(&[
        "--backend",
        "vllm-0=http://10.0.0.1:8000",
        "--backend",
        "http://10.0.0.2:8000",
        "--metrics-port",
        "9090",
    ])
    .unwrap();
    let config = args.config().unwrap();
    assert_eq!(
        named(&config.backends),
        [
            ("vllm-0", "http://10.0.0.1:8000".to_owned()),
            ("http://10.0.0.2:8000", "http://10.0.0.2:8000".to_owned()),
        ]
    );
    assert_eq!(
        named(&config.metrics_origins),
        [
            ("vllm-0", "http://10.0.0.1:9090".to_owned()),
            ("http://10.0.0.2:8000", "http://10.0.0.2:9090".to_owned()),
        ]
    );
    assert!(config.placement && config.residency_header.is_none());
}

#[test]
fn the_config_takes_the_backends_from_etcd() {
    let etcd = parse(&["--etcd", "http://127.0.0.1:2379", "--prefix", "/m/"]).unwrap();
    let config = etcd.config().unwrap();
    assert!(config.backends.is_empty() && config.placement);
    let members = config.etcd.expect("etcd members");
    assert_eq!(members.prefix, "/m/");
}

#[test]
fn every_flag_but_the_repeatable_ones_is_given_once() {
    for flag in [
        &["--listen", "127.0.0.1:1"][..],
        &["--probe", "openai"],
        &["--body-limit", "10"],
        &["--metrics-port", "9090"],
        &["--no-placement"],
        &["--receipt-header"],
        &["--owners", "2"],
    ] {
        let twice: Vec<&str> = flag.iter().chain(flag).copied().collect();
        match parse(&twice) {
            Err(Stop::Error(message)) => {
                assert_eq!(message, format!("{} given twice", flag[0]));
            }
            other => panic!("{twice:?}: {other:?}"),
        }
    }
    // One backend, etcd endpoint and metrics URL each.
    let args = parse(&[
        "--backend",
        "a=http://127.0.0.1:1",
        "--metrics",
        "http://127.0.0.1:9",
        "--backend",
        "b=http://127.0.0.1:2",
        "--metrics",
        "http://127.0.0.1:8",
    ])
    .unwrap();
    assert_eq!(args.backends.len(), 2);
}

#[test]
fn trust_flags_are_read_and_checked() {
    let tls = [
        "--etcd",
        "https://127.0.0.1:2379",
        "--prefix",
        "/p/",
        "--etcd-ca",
        "/ca.pem",
        "--etcd-cert",
        "/c.pem",
        "--etcd-key",
        "/k.pem",
        "--etcd-user",
        "gw",
        "--etcd-password-file",
        "/pw",
        "--etcd-allow",
        "10.0.0.0/8",
        "--etcd-allow",
        "fd00::/8",
        "--backend-ca",
        "/backends.pem",
    ];
    let args = parse(&tls).unwrap();
    assert_eq!(args.trust.etcd_allow, ["10.0.0.0/8", "fd00::/8"]);
    let config = args.config().unwrap();
    let etcd = config.etcd.unwrap();
    assert_eq!(etcd.user.as_deref(), Some("gw"));
    assert_eq!(etcd.ca.as_deref(), Some(std::path::Path::new("/ca.pem")));
    assert!(etcd.client_identity.is_some() && etcd.password_file.is_some());
    assert_eq!(
        config.backend_ca.as_deref(),
        Some(std::path::Path::new("/backends.pem"))
    );
    let https = parse(&["--backend", "https://10.0.0.1:8443"]).unwrap();
    assert_eq!(https.backends[0].to_string(), "https://10.0.0.1:8443");
    let plain = ["--etcd", "http://127.0.0.1:2379", "--prefix", "/p/"];
    for (extra, message) in [
        (&["--etcd-allow", "10.0.0.0/33"][..], "not an address range"),
        (&["--etcd-allow", "example.com"], "not an address range"),
        (&["--etcd-ca", "/ca.pem"], "need https://"),
        (&["--etcd-user", "gw", "--etcd-user", "x"], "given twice"),
        (&["--etcd-password-file", "/pw"], "goes with --etcd-user"),
    ] {
        let flags: Vec<&str> = plain.iter().chain(extra).copied().collect();
        let error = parse(&flags).unwrap_err();
        assert!(
            matches!(&error, Stop::Error(m) if m.contains(message)),
            "{flags:?}: {error:?}"
        );
    }
    let error = parse(&["--etcd-user", "gw"]).unwrap_err();
    assert_eq!(error, Stop::Error("--etcd-user goes with --etcd".into()));
    let cert_alone = [&tls[..4], &["--etcd-cert", "/c.pem"]].concat();
    assert!(parse(&cert_alone).is_err());
}
