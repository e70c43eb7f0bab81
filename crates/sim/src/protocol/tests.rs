//! The paths' encoding and parsing.

use super::*;

#[test]
fn infer_response_escapes_the_name() {
    let body = infer_response(r#"a"b\c"#);
    assert!(body.starts_with(r#"{"model_name":"a\"b\\c","#), "{body}");
}

#[test]
fn infer_paths_round_trip() {
    let some = |name: &str| Some(name.to_owned());
    assert_eq!(
        parse_infer_path(&infer_path("resnet-50")),
        some("resnet-50")
    );
    assert_eq!(
        parse_infer_path(&infer_path("org/m:v1 模")),
        some("org/m:v1 模")
    );
    assert_eq!(infer_path("org/m"), "/v2/models/org%2Fm/infer");
    assert_eq!(parse_infer_path("/v2/models/a%2Fb/infer"), some("a/b"));
    assert_eq!(parse_infer_path("/v2/models/a%2/infer"), None);
    assert_eq!(parse_infer_path("/v2/models/a%FF/infer"), None);
    assert_eq!(parse_infer_path("/v2/models//infer"), None);
    assert_eq!(parse_infer_path("/v2/models/a/b/infer"), None);
    assert_eq!(parse_infer_path("/v2/models/a/ready"), None);
    assert_eq!(parse_infer_path("/v2/models/a/versions/2/infer"), some("a"));
    assert_eq!(parse_infer_path("/v2/models/a/versions//infer"), None);
    assert_eq!(parse_infer_path("/v2/models/a/versions/2/3/infer"), None);
    assert_eq!(parse_infer_path("/v2/models//versions/2/infer"), None);
    let model = |name: &str, ready| Some((name.to_owned(), ready));
    assert_eq!(parse_model_path("/v2/models/a%2Fb"), model("a/b", false));
    assert_eq!(parse_model_path("/v2/models/a/ready"), model("a", true));
    assert_eq!(
        parse_model_path("/v2/models/a/versions/2"),
        model("a", false)
    );
    assert_eq!(
        parse_model_path("/v2/models/a/versions/2/ready"),
        model("a", true)
    );
    for bad in [
        "/v2/models/",
        "/v2/models/a/infer",
        "/v2/models/a/versions/",
        "/v2/models/%FF",
        "/v2/models//ready",
    ] {
        assert_eq!(parse_model_path(bad), None, "{bad}");
    }
    let parsed = parse_control_path;
    assert_eq!(parsed(&load_path("m")), Some(("m".to_owned(), true)));
    assert_eq!(parsed(&unload_path("m")), Some(("m".to_owned(), false)));
    assert_eq!(
        load_path("org/model:v1"),
        "/v2/repository/models/org%2Fmodel%3Av1/load"
    );
    assert_eq!(
        parsed(&load_path("org/model:v1 模型")),
        Some(("org/model:v1 模型".to_owned(), true))
    );
    assert_eq!(parsed("/v2/repository/models/a%2/load"), None);
    assert_eq!(parsed("/v2/repository/models/a%zz/load"), None);
    assert_eq!(parsed("/v2/repository/models/%FF/load"), None);
    assert_eq!(parse_control_path("/v2/repository/models//load"), None);
    assert_eq!(parse_control_path("/v2/repository/models/a/b/load"), None);
    assert_eq!(parse_control_path("/v2/repository/models/a/reload"), None);
    assert_eq!(parse_control_path("/v2/repository/models/load"), None);
}

#[test]
fn openai_bodies_are_json_naming_the_model() {
    let model = r#"a"b\c"#;
    for (body, object) in [
        (chat_completion_response(model), "chat.completion"),
        (completion_response(model), "text_completion"),
        (embedding_response(model), "list"),
    ] {
        let value: serde_json::Value = serde_json::from_str(&body).expect(&body);
        assert_eq!(value["model"], model, "{body}");
        assert_eq!(value["object"], object, "{body}");
    }
    let chat: serde_json::Value = serde_json::from_str(&chat_completion_response("m")).unwrap();
    assert_eq!(chat["choices"][0]["message"]["content"], COMPLETION_TEXT);
    let text: serde_json::Value = serde_json::from_str(&completion_response("m")).unwrap();
    assert_eq!(text["choices"][0]["text"], COMPLETION_TEXT);
}

#[test]
fn error_bodies() {
    assert_eq!(kserve_error("'a\"b' x"), r#"{"error":"'a\"b' x"}"#);
    assert_eq!(
        vllm_error("m", "NotFoundError", 404),
        r#"{"error":{"message":"m","type":"NotFoundError","param":null,"code":404}}"#
    );
}
