//! `hedge::FirstFrame` over scripted event streams on paused time: an event
//! stream is answered at its first frame (not its head), fails before it
//! as `StreamFailed`, and under a hedge a slow first token gets a backup
//! while a stream whose first token came never does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use tokio::sync::mpsc;
use tower::{service_fn, Layer, ServiceBuilder, ServiceExt};
use tower_model_balance::error::{BoxError, StreamFailed, StreamFailure};
use tower_model_balance::hedge::{FirstFrameLayer, HedgeConfig, HedgeLayer};

type Chunk = Result<Frame<Bytes>, std::io::Error>;
type Body = StreamBody<futures_util::stream::BoxStream<'static, Chunk>>;

/// A body fed by `tx`, ending when `tx` is dropped.
fn channel() -> (mpsc::UnboundedSender<Chunk>, Body) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    (tx, StreamBody::new(Box::pin(stream)))
}

fn events(body: Body) -> http::Response<Body> {
    http::Response::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap()
}

fn data(text: &'static str) -> Chunk {
    Ok(Frame::data(Bytes::from_static(text.as_bytes())))
}

const TOKEN: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";

#[tokio::test(start_paused = true)]
async fn an_event_stream_is_answered_at_its_first_frame_then_whole() {
    let (tx, body) = channel();
    let mut body = Some(body);
    let server = service_fn(move |_req: http::Request<()>| {
        let body = body.take().unwrap();
        async move { Ok::<_, std::io::Error>(events(body)) }
    });
    let mut call = tokio_test::task::spawn(
        FirstFrameLayer::new()
            .layer(server)
            .oneshot(http::Request::new(())),
    );
    assert!(call.poll().is_pending(), "the head alone is not the answer");
    tx.send(data(TOKEN)).unwrap();
    let response = match call.poll() {
        std::task::Poll::Ready(r) => r.unwrap(),
        std::task::Poll::Pending => panic!("the first frame is the answer"),
    };
    tx.send(data("data: [DONE]\n\n")).unwrap();
    drop(tx);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        bytes,
        format!("{TOKEN}data: [DONE]\n\n").as_bytes(),
        "nothing lost"
    );
}

async fn failure(frames: Vec<Chunk>) -> StreamFailure {
    let (tx, body) = channel();
    for frame in frames {
        tx.send(frame).unwrap();
    }
    drop(tx);
    let mut body = Some(body);
    let server = service_fn(move |_req: http::Request<()>| {
        let body = body.take().unwrap();
        async move { Ok::<_, std::io::Error>(events(body)) }
    });
    let Err(err) = FirstFrameLayer::new()
        .layer(server)
        .oneshot(http::Request::new(()))
        .await
    else {
        panic!("answered");
    };
    err.downcast_ref::<StreamFailed>()
        .unwrap_or_else(|| panic!("{err}"))
        .reason
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_fails_before_its_first_token_is_stream_failed() {
    let reset = || Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
    assert_eq!(failure(vec![reset()]).await, StreamFailure::Cut);
    assert_eq!(failure(vec![]).await, StreamFailure::Ended);
    let error = "data: {\"error\": {\"message\": \"engine died\", \"code\": 500}}\n\n";
    assert_eq!(failure(vec![data(error)]).await, StreamFailure::ErrorEvent);
    // Before the first chunk: keep-alives, an empty frame, an error split
    // over frames — all read through.
    let keep_alive = data(": keep-alive\n\n");
    let split = vec![
        keep_alive,
        data(""),
        data("data: {\"err"),
        data("or\": {}}\n\n"),
    ];
    assert_eq!(failure(split).await, StreamFailure::ErrorEvent);
    let comments_then_cut = vec![data(": ping\n\n"), reset()];
    assert_eq!(failure(comments_then_cut).await, StreamFailure::Cut);
    assert_eq!(
        failure(vec![data(": ping\n\n")]).await,
        StreamFailure::Ended
    );
}

#[tokio::test(start_paused = true)]
async fn other_answers_pass_at_once() {
    let server = service_fn(|_req: http::Request<()>| async {
        let (_tx, body) = channel();
        // Never a frame: a JSON answer is not waited for.
        let response = http::Response::builder()
            .header("content-type", "application/json")
            .body(body)
            .unwrap();
        Ok::<_, std::io::Error>(response)
    });
    let response = FirstFrameLayer::new()
        .layer(server)
        .oneshot(http::Request::new(()))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// Two attempts through `Hedge → FirstFrame`: the first attempt's head
/// comes at once and its first token after `first_token`; the backup's
/// token at once. How many calls were made, and which answered.
async fn hedged(first_token: Duration) -> (usize, &'static str) {
    let policy = HedgeConfig::builder()
        .min_samples(0)
        .floor(Duration::from_millis(100))
        .ceiling(Duration::from_millis(100))
        .build()
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let server = {
        let calls = calls.clone();
        service_fn(move |_req: http::Request<()>| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                let (tx, body) = channel();
                let (wait, who) = match n {
                    0 => (first_token, "data: first\n\n"),
                    _ => (Duration::ZERO, "data: backup\n\n"),
                };
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    let _ = tx.send(data(who));
                    // The stream goes on for a long generation.
                    tokio::time::sleep(Duration::from_secs(40)).await;
                    let _ = tx.send(data("data: [DONE]\n\n"));
                });
                Ok::<_, BoxError>(events(body))
            }
        })
    };
    let client = ServiceBuilder::new()
        .layer(HedgeLayer::new(policy))
        .layer(FirstFrameLayer::new())
        .service(server);
    let request = http::Request::post("/v1/chat/completions")
        .header("x-model-id", "llama-3-8b")
        .body(())
        .unwrap();
    let response = client.oneshot(request).await.unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    let who = if first == "data: first\n\n" {
        "first"
    } else {
        "backup"
    };
    (calls.load(Ordering::SeqCst), who)
}

#[tokio::test(start_paused = true)]
async fn a_slow_first_token_is_hedged_and_a_stream_under_way_never_is() {
    // The first token after 500 ms, past the 100 ms delay: the backup's
    // comes first, though both heads came at once.
    assert_eq!(hedged(Duration::from_millis(500)).await, (2, "backup"));
    // The first token at 20 ms: answered, and the 40 s of generation
    // after it send no backup.
    assert_eq!(hedged(Duration::from_millis(20)).await, (1, "first"));
}
