//! The gateway's OpenAI surface besides inference, in front of
//! simulated model servers on loopback: its own errors in OpenAI's shape
//! (the field at fault in `param`), `GET /v1/models` from the fleet's
//! probes, a body without `model` sent to the fleet's only model, vLLM's
//! health routes. Against real vLLM: `tests/real_vllm/`.

use crate::gateway;

use std::time::Duration;

use http::header;

use gateway::start;

const CHAT: &str = r#"{"model": "llama-3-8b", "messages": [{"role": "user", "content": "hi"}]}"#;

#[tokio::test]
async fn an_invalid_model_id_is_a_400_with_an_openai_error() {
    let gw = start("invalid", 2, |_| {}).await;
    // Each with the OpenAI error's `code`, its `param`, and what its
    // message says.
    let null = serde_json::Value::Null;
    let model = serde_json::Value::from("model");
    for (body, code, param, says) in [
        (
            r#"{"model": "llama 3", "prompt": "hi"}"#,
            "invalid_route",
            &model,
            "`model`: holds whitespace",
        ),
        (
            r#"{"model": "", "prompt": "hi"}"#,
            "invalid_route",
            &model,
            "empty",
        ),
        (
            r#"{"model": 7}"#,
            "invalid_route",
            &model,
            "not a recognized",
        ),
        (
            "not json",
            "invalid_json",
            &null,
            "malformed JSON at line 1, column 2",
        ),
        (
            r#"{"model": "m", "prompt": "cut"#,
            "invalid_json",
            &null,
            "truncated JSON",
        ),
        ("[1, 2]", "invalid_json", &null, "not a JSON object"),
    ] {
        let reply = gw.post("/v1/completions", body).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.body);
        assert_eq!(reply.headers[header::CONTENT_TYPE], "application/json");
        let error = &reply.json()["error"];
        assert_eq!(error["type"], "invalid_request_error", "{body}");
        assert_eq!(error["code"], code, "{body}");
        assert_eq!(&error["param"], param, "{body}");
        assert!(error["message"].as_str().unwrap().contains(says), "{error}");
    }
    // A KServe v2 path with a bad escape or of the wrong shape: the
    // path's error, before any backend, in KServe v2's shape
    // (`{"error": "message"}`, as tritonclient reads it).
    for path in [
        "/v2/models/%zz/infer",
        "/v2/models/a%2/infer",
        "/v2/models/a/versions//infer",
    ] {
        let reply = gw.post(path, r#"{"inputs": []}"#).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        let error = &reply.json()["error"];
        assert!(
            error.as_str().unwrap().contains("`path`"),
            "{path}: {error}"
        );
    }
    // The metadata routes too, a name that is not UTF-8 included.
    for path in [
        "/v2/models/%FF",
        "/v2/models/m0/versions/%FF",
        "/v2/models/a%20b/ready",
    ] {
        let reply = gw.get(path).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        assert_eq!(reply.headers[header::CONTENT_TYPE], "application/json");
        assert!(reply.json()["error"].is_string(), "{path}: {}", reply.body);
    }
    assert_eq!(gw.backend_work(), 0, "no backend saw a bad request");
}

#[tokio::test]
async fn the_fleets_models_are_listed_and_its_only_model_takes_a_body_without_one() {
    let gw = start("catalog", 2, |_| {}).await;
    let nameless = r#"{"messages": [{"role": "user", "content": "hi"}]}"#;
    // Nothing served yet: an empty list, and a body without `model` is
    // the fleet's outage (503, `Retry-After`), before any backend.
    let list = gw.get("/v1/models").await;
    assert_eq!(
        (list.status, list.json()["object"].clone()),
        (http::StatusCode::OK, "list".into())
    );
    assert_eq!(list.json()["data"], serde_json::json!([]));
    let refused = gw.post("/v1/chat/completions", nameless).await;
    assert_eq!(refused.status, http::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers[header::RETRY_AFTER], "1");
    let code = &refused.json()["error"]["code"];
    assert_eq!(code, "no_healthy_backend", "{}", refused.body);
    assert_eq!(gw.backend_work(), 0);
    // One model served (placement loads it): the probes list it, within
    // 100 polls 50 ms apart (they run every second).
    assert_eq!(gw.post("/v1/chat/completions", CHAT).await.status, 200);
    let mut polls = 0;
    while !gw.get("/v1/models").await.body.contains("llama-3-8b") {
        polls += 1;
        assert!(
            polls < 100,
            "never listed: {}",
            gw.get("/v1/models").await.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let entry = gw.get("/v1/models/llama-3-8b").await;
    assert_eq!(entry.status, 200);
    assert_eq!(entry.json()["object"], "model");
    let unknown = gw.get("/v1/models/nope").await;
    assert_eq!(
        (unknown.status, unknown.json()["error"]["param"].clone()),
        (http::StatusCode::NOT_FOUND, "model".into())
    );
    // The only model: a body without one goes to a backend of it (the
    // simulator itself refuses such a body; vLLM serves it).
    let work = gw.backend_work();
    let sent = gw.post("/v1/chat/completions", nameless).await;
    assert_ne!(
        sent.json()["error"]["code"],
        "model_missing",
        "{}",
        sent.body
    );
    assert_eq!(gw.backend_work(), work + 1, "{}", sent.body);
    // Two models served: a body without one must name one (400, `param`
    // `model`), sent nowhere.
    let other = CHAT.replace("llama-3-8b", "mistral-7b");
    assert_eq!(gw.post("/v1/chat/completions", other).await.status, 200);
    let mut polls = 0;
    while !gw.get("/v1/models").await.body.contains("mistral-7b") {
        polls += 1;
        assert!(polls < 100, "never listed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let work = gw.backend_work();
    let ambiguous = gw.post("/v1/chat/completions", nameless).await;
    assert_eq!(ambiguous.status, http::StatusCode::BAD_REQUEST);
    let error = &ambiguous.json()["error"];
    assert_eq!(
        (&error["code"], &error["param"]),
        (&"model_missing".into(), &"model".into())
    );
    assert_eq!(gw.backend_work(), work);
    // vLLM's health routes, from the gateway's readiness.
    for path in ["/health", "/ping"] {
        let reply = gw.get(path).await;
        assert_eq!(
            (reply.status.as_u16(), reply.body.as_str()),
            (200, ""),
            "{path}"
        );
    }
}
