use http::header::HeaderMap;
use http::Request;

use super::error::InvalidReason;
use super::model::is_graphic;
use super::*;

type Pair = (&'static str, &'static [u8]);

fn headers(pairs: &[Pair]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in pairs {
        map.append(*k, http::HeaderValue::from_bytes(v).unwrap());
    }
    map
}

#[test]
fn model_id_validation() {
    assert!(ModelId::new("llama-3.1-8b-instruct:lora/a").is_ok());
    assert!(ModelId::new("模型").is_ok());
    let reason = |s: &str| ModelId::new(s).unwrap_err().reason;
    assert_eq!(reason(""), InvalidReason::Empty);
    assert_eq!(reason("a b"), InvalidReason::ForbiddenCharacter);
    assert_eq!(reason("a\tb"), InvalidReason::ForbiddenCharacter);
    assert_eq!(reason("a\u{7f}"), InvalidReason::ForbiddenCharacter);
    assert_eq!(reason("a\u{a0}b"), InvalidReason::ForbiddenCharacter);
    assert!(ModelId::new(&"m".repeat(256)).is_ok());
    assert_eq!(reason(&"m".repeat(257)), InvalidReason::TooLong(256));
}

#[test]
fn a_route_from_a_str_is_the_model_ids_and_the_headers() {
    let long: &'static str = "m".repeat(257).leak();
    for name in [
        "resnet-50",
        "模型",
        "org/llama:lora",
        "",
        "a b",
        "a\u{7f}",
        long,
    ] {
        match (Route::new(name), ModelId::new(name)) {
            (Ok(route), Ok(id)) => {
                assert_eq!((route.model, route.hash), (id.as_str(), id.hash64()));
                let info = RouteInfo::new(id);
                assert_eq!(route.to_owned(), info, "the defaults");
                let from_headers =
                    RouteInfo::from_headers(&headers(&[("x-model-id", name.as_bytes())]));
                assert_eq!(from_headers.unwrap(), info);
            }
            (Err(a), Err(b)) => assert_eq!(a, b, "{name:?}: the same error, source `model`"),
            (a, b) => panic!("{name:?}: {a:?} vs {b:?}"),
        }
    }
    let key = PrefixKey::from_prompt(&ModelId::new("m").unwrap(), b"system");
    let route = Route::new("m")
        .unwrap()
        .with_kind(RequestKind::Update)
        .with_urgency(Urgency::Critical)
        .with_payload_bytes(7)
        .with_prefix(key);
    let info = RouteInfo::new(ModelId::new("m").unwrap())
        .with_kind(RequestKind::Update)
        .with_urgency(Urgency::Critical)
        .with_payload_bytes(7)
        .with_prefix(key);
    assert_eq!(route.to_owned(), info);
}

#[test]
fn graphic_bytes_are_checked_eight_at_a_time() {
    for b in 0..=u8::MAX {
        for len in 1..=17 {
            for at in [0, len / 2, len - 1] {
                let mut bytes = vec![b'm'; len];
                bytes[at] = b;
                assert_eq!(
                    is_graphic(&bytes),
                    b.is_ascii_graphic(),
                    "{b:#x} at {at} of {len}"
                );
            }
        }
    }
    assert!(is_graphic(b""));
}

#[test]
fn model_id_carries_xxh3() {
    let id = ModelId::new("resnet-50").unwrap();
    assert_eq!(id.hash64(), xxhash_rust::xxh3::xxh3_64(b"resnet-50"));
    assert_eq!(id, id.clone());
    assert_ne!(id, ModelId::new("resnet-51").unwrap());
}

#[test]
fn defaults_when_only_model_given() {
    let route = RouteInfo::from_headers(&headers(&[("x-model-id", b"m")])).unwrap();
    assert_eq!(route, RouteInfo::new(ModelId::new("m").unwrap()));
}

#[test]
fn reads_all_headers_any_case() {
    let route = RouteInfo::from_headers(&headers(&[
        ("x-model-id", b"m"),
        ("x-request-kind", b"UPDATE"),
        ("x-urgency", b"Critical"),
        ("content-length", b"42"),
    ]))
    .unwrap();
    assert_eq!(route.kind, RequestKind::Update);
    assert_eq!(route.urgency, Urgency::Critical);
    assert_eq!(route.payload_bytes, Some(42));
}

#[test]
fn each_invalid_header_is_named() {
    let cases: &[(&[Pair], &str, InvalidReason)] = &[
        (&[], "x-model-id", InvalidReason::Missing),
        (&[("x-model-id", b"")], "x-model-id", InvalidReason::Empty),
        (
            &[("x-model-id", b"\xff\xfe")],
            "x-model-id",
            InvalidReason::NotText,
        ),
        (
            &[("x-model-id", b"a"), ("x-model-id", b"b")],
            "x-model-id",
            InvalidReason::Duplicate,
        ),
        (
            &[
                ("x-model-id", b"m"),
                ("content-length", b"1"),
                ("content-length", b"1"),
            ],
            "content-length",
            InvalidReason::Duplicate,
        ),
        (
            &[("x-model-id", b"m"), ("x-request-kind", b"write")],
            "x-request-kind",
            InvalidReason::Unrecognized,
        ),
        (
            &[("x-model-id", b"m"), ("x-urgency", b"urgent")],
            "x-urgency",
            InvalidReason::Unrecognized,
        ),
        (
            &[("x-model-id", b"m"), ("content-length", b"-1")],
            "content-length",
            InvalidReason::Unrecognized,
        ),
    ];
    for (pairs, source, reason) in cases {
        let err = RouteInfo::from_headers(&headers(pairs)).unwrap_err();
        assert_eq!((err.source, err.reason), (*source, *reason), "{pairs:?}");
    }
}

#[test]
fn extensions_take_precedence() {
    let route = RouteInfo::new(ModelId::new("from-ext").unwrap()).with_kind(RequestKind::Update);
    let req = Request::get("/")
        .header("x-model-id", "from-header")
        .extension(route.clone())
        .body(())
        .unwrap();
    assert_eq!(RouteInfo::from_request(&req).unwrap(), route);
}
