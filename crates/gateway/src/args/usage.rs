//! The `gateway` binary's usage text.

/// The usage, printed for `--help` and after a bad flag.
pub const USAGE: &str = "\
usage: gateway (--backend URL... | --etcd URL --prefix P) [FLAGS]

  --config FILE        the settings of the flags below, and the layers' own
                       tables ([balance], [breaker], [health], [probe],
                       [placement], [hedge], [admission]: the library's
                       StackConfig), from a TOML file; a flag given here
                       overrides its key. A flag's key is its name in
                       [gateway], `-` as `_`, seconds in `_s` (--drain-timeout
                       60: drain_timeout_s = 60; --no-placement: placement =
                       false), but --backend, --metrics and --kv-events:
                       [[gateway.backends]] name, url, metrics, kv_events;
                       --etcd, --prefix: [gateway.etcd] endpoints, prefix;
                       --owners, --owner-load: [balance] owners, owner_load;
                       --admission-limit: [admission] limit. Example:
                       crates/gateway/examples/gateway.toml
  --listen ADDR        address to serve on (default 127.0.0.1:8080)
  --backend [NAME=]URL a backend's origin, e.g. http://10.0.0.1:8000 (repeatable),
                       and the name its owners are hashed by (default: the
                       origin itself), e.g. vllm-0=http://10.0.0.1:8000: a
                       server that comes back at another address keeps its
                       models. --backend or --etcd is required; to try the
                       gateway, simulated servers: `sims` (crates/sim)
                       prints a --backend value for each
  --etcd URL           take the backends from etcd instead: a client URL such
                       as http://127.0.0.1:2379 (repeatable, one per member);
                       each record under --prefix is a backend, sent to at
                       its address
  --prefix P           the key prefix of the backends' records, e.g.
                       /models/backends/ (with --etcd, and only with it)
  --backend-ca FILE    the CA certificates (PEM) that https:// backends'
                       certificates are checked against, instead of the
                       system's roots (https:// backends from --backend or
                       from etcd records)
  --etcd-ca FILE       the CA certificates (PEM) etcd's is checked against
                       (with https:// --etcd URLs; default: the system's)
  --etcd-cert FILE     a client certificate (PEM) for an etcd that checks
  --etcd-key FILE      clients' (--client-cert-auth), and its private key
  --etcd-user NAME     the etcd user to authenticate as; its password from
  --etcd-password-file FILE, else from GATEWAY_ETCD_PASSWORD in the
                       environment (never a flag's value: others can list it)
  --etcd-allow CIDR    send only to records whose address (and metrics
                       address) is in this range, e.g. 10.0.0.0/8
                       (repeatable); a record outside every range, or naming
                       a host name, is refused, logged and counted invalid
  --probe API          what the health probes ask: kserve (KServe v2 readiness
                       and repository, default) or openai (/v1/models); both
                       read vLLM-style /metrics
  --metrics-port PORT  the backends serve /metrics on this port of their host
                       (MLServer: 8082, Triton: 8002), not on their own port;
                       without it, on their own (a 404 there: no metrics)
  --metrics URL        where the --backend just before serves /metrics (for
                       servers sharing a host, each on a port of its own)
  --no-placement       do not load models: for servers that load on demand
                       (default with kserve: the gateway loads a model on the
                       owner it routes to, through the KServe v2 repository
                       API, as servers in explicit model-control mode need)
  --body-limit BYTES   most body bytes a KServe v2 request may send (1..=67108864,
                       default 67108864, 64 MiB: tensors travel in the body;
                       each request's body is held whole while it is routed):
                       past it, 413
  --admission-limit N  at most N requests in flight on each backend (1..=1000000;
                       default: no limit): past it a request is shed at once
                       with 429 and Retry-After (the gateway ignores clients'
                       x-urgency, as their other routing headers: every
                       request is Normal urgency)
  --model-slots N      the models each --backend holds at once, its LRU
                       (1..=16, default 4): a model counts as resident on a
                       backend until N others were sent there since
  --owners K           the most backends a model is spread over as its demand
                       grows (1..=1024, default 2)
  --owner-load X       how much of the mean load per backend one owner takes
                       from its model before the model gets another owner
                       (above 0, up to 1.25; default 1.25): lower gives the
                       popular models more warm copies sooner
  --prefix-bytes N     prefix affinity for LLM fleets: the first N bytes of an
                       OpenAI prompt (1..=65536) pick its owners, as the model
                       does without it (default: by the model alone)
  --session-header H   the header naming a request's conversation (as
                       x-session-id): its turns go back to the backend that
                       served the last one
  --receipt-header     each answer says why it went where it went, in
                       x-route-receipt (backend, reason, owners, predicted
                       prefix hit, runner-up)
  --kv-events URL      precise prefix routing (with --backend only): where the
                       --backend just before publishes its KV-cache events,
                       tcp://HOST:PORT (vLLM's --kv-events-config endpoint,
                       with the server's host for its `*`), or
                       tcp://HOST:PORT,replay=tcp://HOST:PORT with its replay
                       endpoint; a request goes to the backend caching the
                       most of its prompt's leading blocks
  --tokenizer DIR      with --kv-events: the prompts' tokens from this local
                       model directory's tokenizer.json (default: asked of
                       the first --kv-events backend, POST /tokenize, 2 s at
                       most; a prompt not tokenized routes without its blocks)

Operations (docs/operations.md):
  --admin-listen ADDR  where /metrics and readiness (/ready, /health,
                       /v2/health/ready) and liveness (/live) are served,
                       apart from client traffic (default 127.0.0.1:8081)
  --drain-timeout S    on SIGTERM or SIGINT: readiness answers 503 at once,
                       no new connection is accepted, and answers in flight
                       get S seconds to finish (1..=86400, default 300: a
                       9,000-token stream at 30 tokens/s); what is still open
                       then ends with an error its client sees (an event
                       stream: an SSE error event); exit 0
  --connect-timeout S  most seconds to connect to a backend (1..=300,
                       default 5); counted against the backend
  --first-token-timeout S
                       most seconds from a streamed request (\"stream\": true) to
                       its first token (1..=3600, default 60); counted
                       against the backend
  --idle-timeout S     most seconds between two frames of an answer (1..=3600,
                       default 60): a stalled stream ends with an SSE error
                       event; counted against the backend
  --unresponsive-after S
                       seconds a backend's health probes may go unanswered
                       (3 in a row at least) while a peer's are answered
                       before its requests waiting for a response head are
                       cut: 504 backend_unresponsive, retried elsewhere
                       (0..=3600, default 10; 0: never); counted against it
  --request-timeout S  most seconds for a whole request, answer included
                       (1..=86400, default 1800: a non-streamed generation's
                       head comes with its last token); never counted against
                       a backend (504, or an SSE error event mid-stream)
  --max-connections N  most client connections open at once (1..=1000000,
                       default 10000); a connection without a request for
                       --header-timeout is closed
  --header-timeout S   most seconds for a request's head to arrive whole, and
                       for a kept-alive connection's next request (1..=3600,
                       default 10): the connection is closed
  --max-requests N     most requests in flight at once (1..=1000000, default
                       10000): past it, 503 with Retry-After
  --max-buffered-bytes BYTES
                       most request-body bytes held at once over all requests
                       (1024..=68719476736, default 1073741824, 1 GiB): past
                       it, 503 with Retry-After
  --json-body-limit BYTES
                       most body bytes of a request on a route other than
                       KServe v2's /v2/... (1..=67108864, default 16777216,
                       16 MiB; --body-limit is KServe v2's): past it, 413
  --access-log FORMAT  a line per request on stdout (the gateway's messages
                       go to stderr), when its answer ends: text (key=value)
                       or json; off by default (id, method, path, model,
                       status, backend, reason, ttft_ms, duration_ms, ended:
                       docs/operations.md)
  -V, --version        the gateway's version
  -h, --help           this text

Each flag but --backend, --etcd, --metrics, --kv-events and --etcd-allow may be
given once.

Readiness (/health, /v2/health/ready, /ping) is 503 while no backend can serve
a model: each never reached (no probe answered, nor a request; with placement,
its repository never read), ejected, or its (backend, model) breakers open and
its probe failing or listing only models whose breakers are open. /v1/responses calls
that are stored (store: true unless false) or run in the background, and chat
completions with store: true, are sent once: never hedged, retried only when
the connection was refused.";
