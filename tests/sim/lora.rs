//! The simulated server's vLLM LoRA adapter routes over real HTTP on
//! 127.0.0.1, in explicit model-control mode: loads and unloads answered
//! as vLLM answers them. Driven by counts and by the server's stats hook,
//! never by sleeping: concurrent loads are held in flight by
//! `Fault::LoadHangs`.

use crate::sim_explicit;
use crate::sim_http;

use http_body_util::Full;

use sim_explicit::{explicit, infer, post, stats_until};
use sim_http::{client, send, BOUND};
use tower_model_balance_sim::{protocol, Fault, ModelServer};

#[tokio::test]
async fn lora_adapters_load_and_unload_as_vllm_answers() {
    let server = ModelServer::start("node-0", explicit().build().unwrap())
        .await
        .unwrap();
    let client = client();
    let load = protocol::LOAD_LORA_PATH;
    let unload = protocol::UNLOAD_LORA_PATH;
    let adapter = r#"{"lora_name":"sql-lora","lora_path":"/adapters/sql"}"#;
    assert_eq!(
        post(&client, &server, load, adapter).await,
        (
            200,
            "Success: LoRA adapter 'sql-lora' added successfully.".to_owned()
        )
    );
    assert_eq!(
        post(&client, &server, load, adapter).await,
        (
            400,
            r#"{"error":{"message":"The lora adapter 'sql-lora' has already been loaded.","type":"InvalidUserInput","param":null,"code":400}}"#.to_owned()
        )
    );
    let (status, _, models) = send(
        &client,
        &server,
        http::Method::GET,
        protocol::MODELS_PATH,
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert!(models.contains(r#""id":"sql-lora""#), "{models}");
    assert_eq!(infer(&client, &server, "sql-lora").await.0, 200);

    let name = r#"{"lora_name":"sql-lora"}"#;
    assert_eq!(
        post(&client, &server, unload, name).await,
        (
            200,
            "Success: LoRA adapter 'sql-lora' removed successfully.".to_owned()
        )
    );
    let (status, body) = post(&client, &server, unload, name).await;
    assert_eq!(status, 404);
    assert!(body.contains(r#""type":"NotFoundError""#), "{body}");
    assert_eq!(infer(&client, &server, "sql-lora").await.0, 404);

    for bad in [
        "",
        "{",
        "[]",
        r#"{"lora_name":"x"}"#,
        r#"{"lora_name":"","lora_path":"p"}"#,
    ] {
        let (status, body) = post(&client, &server, load, bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    assert_eq!(post(&client, &server, unload, "{}").await.0, 400);

    // Two calls at once: one load; the second waits for it, then finds the
    // adapter loaded (vLLM's per-adapter lock).
    server.set_fault(Some(Fault::LoadHangs));
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let client = client.clone();
            let uri = format!("http://{}{load}", server.addr());
            tokio::spawn(async move {
                let req = http::Request::post(uri).body(Full::from(adapter)).unwrap();
                client.request(req).await.unwrap().status().as_u16()
            })
        })
        .collect();
    let stats = stats_until(&server, |s| s.load_calls == 9).await;
    assert_eq!(stats.loads_started, 2);
    assert_eq!(stats.max_concurrent_loads_per_model, 2);
    server.set_fault(None);
    let mut statuses = Vec::new();
    for call in calls {
        statuses.push(tokio::time::timeout(BOUND, call).await.unwrap().unwrap());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 400]);
    assert_eq!(server.stats().loads_started, 2);
}
