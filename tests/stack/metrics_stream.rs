//! A stream's time to first token and time per output token, measured by
//! the balancer from its body's frames, in the handle and in the metrics
//! facade's histograms (each stream once, as measured, when it ends), on
//! paused time.

use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use tower::discover::ServiceList;
use tower::{service_fn, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};

type Chunk = Result<Frame<Bytes>, std::io::Error>;

/// An event stream whose first token comes 200 ms after the request and
/// each of 4 more 25 ms after the one before, then `[DONE]`.
fn stream() -> http::Response<StreamBody<futures_util::stream::BoxStream<'static, Chunk>>> {
    stream_after(None)
}

/// [`stream`], with `first` sent at once, before the 200 ms.
fn stream_after(
    first: Option<&'static str>,
) -> http::Response<StreamBody<futures_util::stream::BoxStream<'static, Chunk>>> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Chunk>();
    if let Some(first) = first {
        let _ = tx.send(Ok(Frame::data(Bytes::from_static(first.as_bytes()))));
    }
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        for i in 0..5 {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"data: {}\n\n"))));
        }
        let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"data: [DONE]\n\n"))));
    });
    let body = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    http::Response::builder()
        .header("content-type", "text/event-stream")
        .body(StreamBody::new(Box::pin(body) as _))
        .unwrap()
}

/// The TTFT and TPOT samples of one recording (a snapshot takes them).
fn samples(recorder: &DebuggingRecorder) -> (Vec<f64>, Vec<f64>) {
    let (mut ttft, mut tpot) = (Vec::new(), Vec::new());
    for (key, _, _, value) in recorder.snapshotter().snapshot().into_vec() {
        let (kind, key) = key.into_parts();
        let into = match key.name() {
            "model_balance_backend_ttft_seconds" => &mut ttft,
            "model_balance_backend_tpot_seconds" => &mut tpot,
            _ => continue,
        };
        if let (MetricKind::Histogram, DebugValue::Histogram(v)) = (kind, value) {
            into.extend(v.into_iter().map(|f| f.into_inner()));
        }
    }
    (ttft, tpot)
}

#[tokio::test(start_paused = true)]
async fn a_streams_ttft_and_tpot_reach_the_handle_and_the_histograms() {
    let endpoint =
        service_fn(|_req: http::Request<()>| async { Ok::<_, std::io::Error>(stream()) });
    let backend = Backend::new(BackendId::new("gpu-0").unwrap(), endpoint);
    let balancer =
        ModelBalancer::new(ServiceList::new(vec![backend]), BalanceConfig::default()).unwrap();
    let request = || {
        http::Request::post("/v1/chat/completions")
            .header("x-model-id", "llama-3-8b")
            .body(())
            .unwrap()
    };
    // The recorder of this thread (the runtime's: current-thread), where
    // the balancer records each stream as its body ends.
    let recorder = DebuggingRecorder::new();
    let _local = metrics::set_default_local_recorder(&recorder);
    let response = balancer.clone().oneshot(request()).await.unwrap();
    response.into_body().collect().await.unwrap();

    let b = &balancer.handle().backends()[0];
    assert_eq!(b.streams, 1);
    // Within the histogram's eighth for the quantile; exact for the means.
    let ttft = b.ttft_p50_ms.unwrap();
    assert!((175.0..=225.0).contains(&ttft), "{ttft}");
    assert!((b.ttft_mean_ms.unwrap() - 200.0).abs() < 1.0, "{b:?}");
    // 5 chunks 25 ms apart, then [DONE] (no chunk): 4 gaps over 100 ms.
    assert!((b.tpot_mean_ms.unwrap() - 25.0).abs() < 1.0, "{b:?}");

    // The facade got the stream's figures as measured (paused time: exact),
    // not a bucket's middle.
    let (ttft, tpot) = samples(&recorder);
    assert_eq!(ttft, [0.2], "{ttft:?}");
    assert_eq!(tpot, [0.025], "{tpot:?}");
    // An export reads the balancer's counters: it records no stream again.
    let handle = balancer.handle();
    tower_model_balance::metrics::record(&handle);
    assert_eq!(samples(&recorder), (vec![], vec![]), "none twice");
    // Another stream; recorded alone.
    let response = balancer.clone().oneshot(request()).await.unwrap();
    response.into_body().collect().await.unwrap();
    assert_eq!(handle.backends()[0].streams, 2, "{:?}", handle.backends());
    let (ttft, tpot) = samples(&recorder);
    assert_eq!((ttft.len(), tpot.len()), (1, 1), "only the new stream's");
    // A stream the caller drops after its first chunk is no stream that
    // succeeded: not counted (nor a failure).
    let response = balancer.clone().oneshot(request()).await.unwrap();
    let mut body = response.into_body();
    body.frame().await.unwrap().unwrap();
    drop(body);
    let b = &handle.backends()[0];
    assert_eq!((b.streams, b.failures), (2, 0), "{b:?}");
    assert_eq!(
        samples(&recorder),
        (vec![], vec![]),
        "nor in the histograms"
    );
}

#[tokio::test(start_paused = true)]
async fn a_keep_alive_before_the_first_token_is_no_token() {
    let endpoint = service_fn(|_req: http::Request<()>| async {
        Ok::<_, std::io::Error>(stream_after(Some(": keep-alive\n\n")))
    });
    let backend = Backend::new(BackendId::new("gpu-0").unwrap(), endpoint);
    let balancer =
        ModelBalancer::new(ServiceList::new(vec![backend]), BalanceConfig::default()).unwrap();
    let request = http::Request::post("/v1/chat/completions")
        .header("x-model-id", "llama-3-8b")
        .body(())
        .unwrap();
    let response = balancer.clone().oneshot(request).await.unwrap();
    response.into_body().collect().await.unwrap();
    let b = &balancer.handle().backends()[0];
    assert!((b.ttft_mean_ms.unwrap() - 200.0).abs() < 1.0, "{b:?}");
    assert!((b.tpot_mean_ms.unwrap() - 25.0).abs() < 1.0, "{b:?}");
}
