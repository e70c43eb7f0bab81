//! What a backend's 404 says is missing: the model, a version of it, or
//! the route (pure logic over the answer's first bytes).
//!
//! Why it matters: a 404 that says the model is absent makes the balancer
//! forget that the backend holds it (and, with placement, reload it); a
//! 404 for anything else must not, or a client asking for a version or a
//! route that does not exist makes the balancer drop, and reload, a model
//! that is served. What servers answer (MLServer 1.7.1, run; vLLM's
//! `serve/engine/serving.py`; FastAPI's default route handler, under
//! MLServer, vLLM, KServe's Python server and SGLang):
//!
//! | request | answer |
//! |---|---|
//! | a model the server does not hold (MLServer) | `{"error":"Model m not found"}` |
//! | a model the server does not hold (vLLM) | `{"error": {"message": "The model `m` does not exist.", "type": "NotFoundError", …}}` |
//! | any `/versions/{v}/` path of a model not held, or of a version not held (MLServer) | `{"error":"Model m with version v not found"}` |
//! | a version not held (Triton) | `… 'm' version v is not found` |
//! | a route the server does not serve | `{"detail":"Not Found"}` |
//!
//! So: the route's answer is FastAPI's fixed body; an answer that names a
//! version is about the version (MLServer's does even when the whole model
//! is absent: it cannot be told, and the probes' repository reads find
//! out); any other 404 that was read to its end — an empty one included,
//! as a server of our own may answer — says the model is absent. A 404
//! whose body was dropped unread (a retry sent elsewhere drops it) says
//! nothing, and nothing is forgotten.

/// The most bytes of a 404's body kept to read it.
const KEPT: usize = 256;
/// FastAPI's (Starlette's) answer for a route it does not serve.
const NO_ROUTE: &[u8] = br#"{"detail":"Not Found"}"#;

/// A 404's body as it passes, up to [`KEPT`] bytes.
#[derive(Debug, Default)]
pub(crate) struct Peek {
    kept: Vec<u8>,
    ended: bool,
}

/// What a 404 says is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    /// The model: the backend does not hold it.
    Model,
    /// A version of the model.
    Version,
    /// The route.
    Route,
    /// Unknown: the body was not read to its end.
    Unread,
}

impl Peek {
    /// A frame of the body's data.
    pub(crate) fn data(&mut self, bytes: &[u8]) {
        let room = KEPT.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// The body ended (not dropped).
    pub(crate) fn end(&mut self) {
        self.ended = true;
    }

    /// What the 404 said.
    pub(crate) fn missing(&self) -> Missing {
        if !self.ended {
            return Missing::Unread;
        }
        let body = self.kept.trim_ascii();
        if body == NO_ROUTE {
            return Missing::Route;
        }
        let version = body
            .windows(b"version".len())
            .any(|w| w.eq_ignore_ascii_case(b"version"));
        match version {
            true => Missing::Version,
            false => Missing::Model,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(chunks: &[&str], ended: bool) -> Missing {
        let mut peek = Peek::default();
        for chunk in chunks {
            peek.data(chunk.as_bytes());
        }
        if ended {
            peek.end();
        }
        peek.missing()
    }

    #[test]
    fn what_the_servers_answer() {
        let model = r#"{"error":"Model m0 not found"}"#;
        assert_eq!(said(&[model], true), Missing::Model, "MLServer");
        let vllm = r#"{"error":{"message":"The model `m` does not exist.","type":"NotFoundError","param":"model","code":404}}"#;
        assert_eq!(said(&[vllm], true), Missing::Model, "vLLM");
        let version = r#"{"error":"Model m0 with version 3 not found"}"#;
        assert_eq!(said(&[version], true), Missing::Version, "MLServer");
        let triton = "Request for unknown model: 'm0' version 3 is not found";
        assert_eq!(said(&[triton], true), Missing::Version, "Triton");
        assert_eq!(said(&[r#"{"detail":"Not Found"}"#], true), Missing::Route);
        assert_eq!(
            said(&["{\"detail\":", "\"Not Found\"}\n"], true),
            Missing::Route
        );
        assert_eq!(said(&[], true), Missing::Model, "an empty 404");
        assert_eq!(said(&[model], false), Missing::Unread, "dropped unread");
    }

    #[test]
    fn at_most_256_bytes_are_kept() {
        let mut peek = Peek::default();
        peek.data(&[b'x'; 1000]);
        peek.data(b"version");
        peek.end();
        assert_eq!(peek.kept.len(), KEPT);
        assert_eq!(peek.missing(), Missing::Model, "past the kept bytes");
    }
}
