//! The type-erased classifier: one a configuration can hold, for HTTP
//! responses of any body type.

use std::fmt;
use std::sync::Arc;

use http::{HeaderMap, StatusCode};

use super::grpc::{GrpcEosErrorsAsFailures, GrpcErrorsAsFailures};
use super::outcome::Outcome;
use super::status::ServerErrorsAsFailures;
use super::traits::{Classified, Classify, ClassifyEos};

/// Classifies an HTTP response from its head (status and headers), whatever
/// its body type: the object-safe form of [`Classify`] that a
/// [`Classifier`] wraps.
///
/// `classify_head` decides at once ([`Classified::Ready`]) or defers to the
/// end of the body (`Classified::AtEnd(())`), where `classify_trailers`
/// decides from the trailers. Errors without a response are failures.
///
/// ```
/// use http::{HeaderMap, StatusCode};
/// use tower_model_balance::classify::{Classified, Classifier, ClassifyHead, Outcome};
///
/// /// 503 with `x-model-loading` is a backend that is up but busy.
/// struct Loading;
///
/// impl ClassifyHead for Loading {
///     fn classify_head(&self, status: StatusCode, headers: &HeaderMap) -> Classified<()> {
///         match status.as_u16() {
///             503 if headers.contains_key("x-model-loading") => Classified::Ready(Outcome::Overload),
///             _ => Classifier::http().classify_head(status, headers).map_eos(|_| ()),
///         }
///     }
/// }
///
/// let classifier = Classifier::new(Loading);
/// let mut headers = HeaderMap::new();
/// headers.insert("x-model-loading", "1".parse().unwrap());
/// let c = classifier.classify_head(StatusCode::SERVICE_UNAVAILABLE, &headers);
/// assert!(matches!(c, Classified::Ready(Outcome::Overload)));
/// ```
pub trait ClassifyHead: Send + Sync + 'static {
    /// The outcome of a response from its status and headers: ready now,
    /// or (`Classified::AtEnd(())`) at the end of its body.
    fn classify_head(&self, status: StatusCode, headers: &HeaderMap) -> Classified<()>;

    /// The outcome of a response `classify_head` deferred, from its
    /// trailers (`None`: its body ended without any). The default, for a
    /// classifier that never defers: [`Outcome::Failure`].
    fn classify_trailers(&self, trailers: Option<&HeaderMap>) -> Outcome {
        let _ = trailers;
        Outcome::Failure
    }
}

impl ClassifyHead for ServerErrorsAsFailures {
    fn classify_head(&self, status: StatusCode, _: &HeaderMap) -> Classified<()> {
        Classified::Ready(Self::classify_status(status))
    }
}

impl ClassifyHead for GrpcErrorsAsFailures {
    fn classify_head(&self, status: StatusCode, headers: &HeaderMap) -> Classified<()> {
        Self::classify_head(status, headers).map_eos(|_| ())
    }

    fn classify_trailers(&self, trailers: Option<&HeaderMap>) -> Outcome {
        GrpcEosErrorsAsFailures::new().classify_eos(trailers)
    }
}

/// A status-only classifier, from a closure.
struct StatusFn<F>(F);

impl<F> ClassifyHead for StatusFn<F>
where
    F: Fn(StatusCode) -> Outcome + Send + Sync + 'static,
{
    fn classify_head(&self, status: StatusCode, _: &HeaderMap) -> Classified<()> {
        Classified::Ready((self.0)(status))
    }
}

/// An HTTP classifier whose type is erased: a configuration that is not
/// generic (the balancer's) holds one, and it classifies
/// `http::Response<B>` for every body type `B`.
///
/// * [`Classifier::http`] (the default) classifies as
///   [`ServerErrorsAsFailures`]: 5xx fail, 429 is an overload, other 4xx
///   are ignored, the rest succeed;
/// * [`Classifier::grpc`] as [`GrpcErrorsAsFailures`]: `grpc-status`
///   decides, from the head of a trailers-only response or else from the
///   trailers;
/// * [`Classifier::from_status`] by a closure over the status;
///   [`Classifier::new`] by any [`ClassifyHead`] (status, headers and
///   trailers).
///
/// Errors without a response are failures. Cloning is cheap (the two
/// given classifiers hold nothing; a custom one is shared through an
/// `Arc`), and classifying allocates nothing. Two classifiers are equal
/// when both are the same given one, or clones of the same custom one.
///
/// ```
/// use http::StatusCode;
/// use tower_model_balance::classify::{Classified, Classifier, Outcome};
///
/// // A 404 ("model not loaded" on some servers) counts as a failure.
/// let classifier = Classifier::from_status(|status| match status {
///     StatusCode::NOT_FOUND => Outcome::Failure,
///     _ => tower_model_balance::classify::ServerErrorsAsFailures::classify_status(status),
/// });
/// let headers = http::HeaderMap::new();
/// let c = classifier.classify_head(StatusCode::NOT_FOUND, &headers);
/// assert!(matches!(c, Classified::Ready(Outcome::Failure)));
/// assert_eq!(Classifier::default(), Classifier::http());
/// assert_ne!(Classifier::http(), Classifier::grpc());
/// ```
#[derive(Clone, Default)]
pub struct Classifier(Kind);

#[derive(Clone, Default)]
enum Kind {
    #[default]
    Http,
    Grpc,
    Custom(Arc<dyn ClassifyHead>),
}

impl Classifier {
    /// HTTP statuses, as [`ServerErrorsAsFailures`] (the default).
    pub const fn http() -> Self {
        Self(Kind::Http)
    }

    /// gRPC statuses, as [`GrpcErrorsAsFailures`].
    pub const fn grpc() -> Self {
        Self(Kind::Grpc)
    }

    /// Classifies with `classifier` (allocates once, here).
    pub fn new(classifier: impl ClassifyHead) -> Self {
        Self(Kind::Custom(Arc::new(classifier)))
    }

    /// Classifies by the status alone, with `classify` (allocates once,
    /// here).
    pub fn from_status(classify: impl Fn(StatusCode) -> Outcome + Send + Sync + 'static) -> Self {
        Self::new(StatusFn(classify))
    }

    /// The outcome of a response from its status and headers: ready now,
    /// or at the end of its body by the [`ClassifierEos`] returned.
    pub fn classify_head(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Classified<ClassifierEos> {
        match &self.0 {
            Kind::Http => Classified::Ready(ServerErrorsAsFailures::classify_status(status)),
            Kind::Grpc => GrpcErrorsAsFailures::classify_head(status, headers)
                .map_eos(|eos| ClassifierEos(EosKind::Grpc(eos))),
            Kind::Custom(custom) => custom
                .classify_head(status, headers)
                .map_eos(|()| ClassifierEos(EosKind::Custom(custom.clone()))),
        }
    }
}

impl fmt::Debug for Classifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Kind::Http => "Classifier::http()",
            Kind::Grpc => "Classifier::grpc()",
            Kind::Custom(_) => "Classifier::new(..)",
        })
    }
}

impl PartialEq for Classifier {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Kind::Http, Kind::Http) | (Kind::Grpc, Kind::Grpc) => true,
            (Kind::Custom(a), Kind::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for Classifier {}

impl<B, E> Classify<http::Response<B>, E> for Classifier {
    type Eos = ClassifierEos;

    fn classify_response(&self, response: &http::Response<B>) -> Classified<ClassifierEos> {
        self.classify_head(response.status(), response.headers())
    }

    fn classify_error(&self, _: &E) -> Outcome {
        Outcome::Failure
    }
}

/// The end-of-body half of a [`Classifier`]: decides a deferred outcome
/// from the trailers.
#[derive(Clone)]
pub struct ClassifierEos(EosKind);

#[derive(Clone)]
enum EosKind {
    Grpc(GrpcEosErrorsAsFailures),
    Custom(Arc<dyn ClassifyHead>),
}

impl fmt::Debug for ClassifierEos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            EosKind::Grpc(eos) => f.debug_tuple("ClassifierEos").field(eos).finish(),
            EosKind::Custom(_) => f.write_str("ClassifierEos(..)"),
        }
    }
}

impl ClassifyEos for ClassifierEos {
    fn classify_eos(self, trailers: Option<&HeaderMap>) -> Outcome {
        match self.0 {
            EosKind::Grpc(eos) => eos.classify_eos(trailers),
            EosKind::Custom(custom) => custom.classify_trailers(trailers),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(c: &Classifier, status: u16, grpc: Option<&str>) -> Classified<ClassifierEos> {
        let mut headers = HeaderMap::new();
        if let Some(code) = grpc {
            headers.insert("grpc-status", code.parse().unwrap());
        }
        c.classify_head(StatusCode::from_u16(status).unwrap(), &headers)
    }

    fn ready(c: Classified<ClassifierEos>) -> Option<Outcome> {
        match c {
            Classified::Ready(outcome) => Some(outcome),
            Classified::AtEnd(_) => None,
        }
    }

    fn trailers(grpc: &str) -> HeaderMap {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", grpc.parse().unwrap());
        trailers
    }

    #[test]
    fn http_is_the_default_and_classifies_as_server_errors_as_failures() {
        let c = Classifier::default();
        assert_eq!(c, Classifier::http());
        for status in [200, 204, 304, 400, 404, 429, 500, 503, 599] {
            let code = StatusCode::from_u16(status).unwrap();
            let expected = ServerErrorsAsFailures::classify_status(code);
            assert_eq!(ready(head(&c, status, None)), Some(expected), "{status}");
        }
        // A grpc-status header means nothing to it.
        assert_eq!(ready(head(&c, 200, Some("14"))), Some(Outcome::Success));
    }

    #[test]
    fn grpc_classifies_as_grpc_errors_as_failures() {
        let c = Classifier::grpc();
        assert_eq!(ready(head(&c, 503, None)), Some(Outcome::Failure));
        assert_eq!(ready(head(&c, 429, None)), Some(Outcome::Overload));
        assert_eq!(ready(head(&c, 200, Some("0"))), Some(Outcome::Success));
        assert_eq!(ready(head(&c, 200, Some("8"))), Some(Outcome::Overload));
        let Classified::AtEnd(eos) = head(&c, 200, None) else {
            panic!("a 200 without grpc-status waits for the trailers");
        };
        assert_eq!(
            eos.clone().classify_eos(Some(&trailers("3"))),
            Outcome::Ignored
        );
        assert_eq!(
            eos.clone().classify_eos(Some(&trailers("14"))),
            Outcome::Failure
        );
        assert_eq!(eos.classify_eos(None), Outcome::Failure);
    }

    #[test]
    fn a_status_closure_decides_at_the_head() {
        let c = Classifier::from_status(|status| match status.as_u16() {
            404 => Outcome::Failure,
            _ => Outcome::Success,
        });
        assert_eq!(ready(head(&c, 404, None)), Some(Outcome::Failure));
        assert_eq!(ready(head(&c, 503, None)), Some(Outcome::Success));
    }

    #[test]
    fn a_custom_classifier_may_defer_to_the_trailers() {
        /// Defers every 200; the trailer `x-ok` decides.
        struct Trailer;
        impl ClassifyHead for Trailer {
            fn classify_head(&self, status: StatusCode, _: &HeaderMap) -> Classified<()> {
                match status {
                    StatusCode::OK => Classified::AtEnd(()),
                    _ => Classified::Ready(Outcome::Failure),
                }
            }
            fn classify_trailers(&self, trailers: Option<&HeaderMap>) -> Outcome {
                match trailers.is_some_and(|t| t.contains_key("x-ok")) {
                    true => Outcome::Success,
                    false => Outcome::Overload,
                }
            }
        }
        let c = Classifier::new(Trailer);
        assert_eq!(ready(head(&c, 500, None)), Some(Outcome::Failure));
        let Classified::AtEnd(eos) = head(&c, 200, None) else {
            panic!("deferred");
        };
        let mut ok = HeaderMap::new();
        ok.insert("x-ok", "1".parse().unwrap());
        assert_eq!(eos.clone().classify_eos(Some(&ok)), Outcome::Success);
        assert_eq!(eos.classify_eos(None), Outcome::Overload);
    }

    #[test]
    fn it_classifies_responses_of_any_body_and_fails_errors() {
        let c = Classifier::grpc();
        let rsp = http::Response::builder()
            .header("grpc-status", "0")
            .body(vec![1u8])
            .unwrap();
        let got = Classify::<_, std::io::Error>::classify_response(&c, &rsp);
        assert_eq!(ready(got), Some(Outcome::Success));
        let rsp = http::Response::builder().status(502).body("text").unwrap();
        let got = Classify::<_, std::io::Error>::classify_response(&c, &rsp);
        assert_eq!(ready(got), Some(Outcome::Failure));
        let err = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let got = Classify::<http::Response<()>, _>::classify_error(&c, &err);
        assert_eq!(got, Outcome::Failure);
    }

    #[test]
    fn equality_is_by_kind_or_by_the_shared_custom_classifier() {
        let custom = Classifier::from_status(|_| Outcome::Success);
        assert_eq!(custom, custom.clone());
        assert_ne!(custom, Classifier::from_status(|_| Outcome::Success));
        assert_ne!(custom, Classifier::http());
        assert_eq!(Classifier::grpc(), Classifier::grpc());
        assert_eq!(format!("{:?}", Classifier::grpc()), "Classifier::grpc()");
        assert_eq!(format!("{custom:?}"), "Classifier::new(..)");
    }

    #[test]
    fn classifiers_are_send_sync_and_cheap_to_clone() {
        fn send_sync<T: Send + Sync + Clone + 'static>() {}
        send_sync::<Classifier>();
        send_sync::<ClassifierEos>();
    }
}
