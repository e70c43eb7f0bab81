//! `https://` backends are probed and loaded, not only sent to (issue 51):
//! a simulated server behind TLS (`tls::tls_front`), its certificate
//! issued by a test CA; the gateway given that CA lists the models its
//! probes find there, routes to them, and loads models there on demand.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;
use tower_model_balance_sim::{protocol, ModelServer, ServerConfig};

use crate::app::{Config, Probe};
use crate::tls::tls_front;
use crate::tls_certs::{PemDir, TestCa};
use crate::{binary, gateway};

/// How long the probes may take to find a model (they run every second
/// by default), and an exchange to answer.
const BOUND: Duration = Duration::from_secs(20);

type Plain = Client<HttpConnector, Full<Bytes>>;

fn plain() -> Plain {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Sends `body` to `uri` (a GET without one); the status and the body's
/// text, within [`BOUND`].
async fn exchange(client: &Plain, uri: &str, body: Option<&'static str>) -> (u16, String) {
    let request = match body {
        None => http::Request::get(uri).body(Full::default()),
        Some(body) => http::Request::post(uri)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from_static(body.as_bytes()))),
    };
    let exchange = async {
        let response = client.request(request.unwrap()).await.unwrap();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(BOUND, exchange)
        .await
        .unwrap_or_else(|_| panic!("{uri}: no answer within {BOUND:?}"))
}

/// Polls `GET {base}/v1/models` until it lists `model`; fails after
/// [`BOUND`] with the last list.
async fn until_listed(client: &Plain, base: &str, model: &str) {
    let deadline = tokio::time::Instant::now() + BOUND;
    let quoted = format!("\"{model}\"");
    loop {
        let (status, list) = exchange(client, &format!("{base}/v1/models"), None).await;
        if status == 200 && list.contains(&quoted) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{model} never listed: {status} {list}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_probes_an_https_backend_and_loads_models_there() {
    // Triton-like: models load only when asked; `m0` loaded on the server
    // itself (over plain HTTP), `m1` left for the gateway's placement.
    let server = ServerConfig::builder()
        .explicit_load(true)
        .repository(["m0", "m1"])
        .build()
        .unwrap();
    let server = ModelServer::start("tls-sim", server).await.unwrap();
    let client = plain();
    let load = format!("http://{}{}", server.addr(), protocol::load_path("m0"));
    assert_eq!(exchange(&client, &load, Some("{}")).await.0, 200);
    let ca = TestCa::new("backends' test CA");
    let front = tls_front(&ca.issue(&["127.0.0.1"]), server.addr()).await;
    let dir = PemDir::new();
    let ca_file = dir.write("ca.pem", &ca.pem());

    // The defaults: KServe v2 probes, placement on.
    let backend = format!("tls-0=https://{}", front.addr);
    let gateway = binary::start(&[
        "--backend",
        &backend,
        "--backend-ca",
        ca_file.to_str().unwrap(),
    ])
    .await;
    let base = format!("http://{}", gateway.addr);
    // The repository index, read over TLS: `m0` listed.
    until_listed(&client, &base, "m0").await;

    // `m0` routed; `m1` loaded by placement over TLS, then routed.
    let loads = server.stats().load_calls;
    for model in ["m0", "m1"] {
        let uri = format!("{base}{}", protocol::infer_path(model));
        let (status, body) = exchange(&client, &uri, Some(r#"{"inputs":[]}"#)).await;
        assert_eq!(status, 200, "{model}: {body}");
    }
    assert_eq!(server.stats().load_calls, loads + 1, "m1's load");
    let mut resident = server.resident_models();
    resident.sort_unstable();
    assert_eq!(resident, ["m0", "m1"]);
    until_listed(&client, &base, "m1").await;
}

#[tokio::test]
async fn openai_probes_find_the_models_of_an_https_backend() {
    // A vLLM-like server with `llama-3-8b` served (a request, sent to it
    // directly, loaded it).
    let server = ModelServer::start("tls-vllm", ServerConfig::default())
        .await
        .unwrap();
    let client = plain();
    let completion = r#"{"model": "llama-3-8b", "prompt": "hi"}"#;
    let direct = format!("http://{}{}", server.addr(), protocol::COMPLETIONS_PATH);
    assert_eq!(exchange(&client, &direct, Some(completion)).await.0, 200);
    let ca = TestCa::new("backends' test CA");
    let front = tls_front(&ca.issue(&["127.0.0.1"]), server.addr()).await;
    let dir = PemDir::new();

    let origin = Origin::parse(&format!("https://{}", front.addr)).unwrap();
    let mut config = Config::new(vec![(BackendId::new("tls-0").unwrap(), origin)]);
    config.probe = Probe::OpenAi;
    config.placement = false;
    config.backend_ca = Some(dir.write("ca.pem", &ca.pem()));
    let fast = "[probe]\ninterval_ms = 100".parse().unwrap();
    config.stack = crate::app::stack_config(&fast).unwrap();
    let gw = gateway::serve(config, vec![server]).await;

    until_listed(&gw.client, &format!("http://{}", gw.addr), "llama-3-8b").await;
    let reply = gw.post("/v1/completions", completion).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        gw.sims[0].stats().work,
        2,
        "direct, then through the gateway"
    );
}
