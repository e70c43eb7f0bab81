//! Configuration of a simulated model server.

use std::time::Duration;

use tower_model_balance::error::InvalidConfig;

/// Behaviour of one simulated model server. Defaults follow DESIGN.md's
/// `default` fleet scenario.
///
/// | field | default | range |
/// | --- | --- | --- |
/// | `resident_slots` (models) | 5 | 1 ..= 1 000 |
/// | `concurrency` (requests served at once; more queue, FIFO) | 4 | 1 ..= 10 000 |
/// | `cold_load` (holds a serving slot) | 300 ms | ≤ 10 min |
/// | `update_time` | 10 ms | ≤ 10 min |
/// | `inference` | 5 ..= 30 ms per model, by seed 0 | see [`InferenceTimes`] |
/// | `model_memory` (GPU memory of one resident model, bytes) | 16 GiB | 1 B ..= 1 TiB |
/// | `explicit_load` (models load only through the repository API) | `false` | |
/// | `repository` (the models the server can load) | any model | valid model IDs |
/// | `decode_time` (per token of a streamed answer, after the first) | 5 ms | ≤ 10 min |
/// | `stream_tokens` (tokens of a streamed answer whose body has no `max_tokens`) | 16 | 1 ..= 4 096 |
/// | `prefix_cache` (KV cache of prompt prefix blocks, tokens; 0 = off) | 0 | ≤ 2^40 |
/// | `prefill_rate` (prompt tokens prefilled per second, with the prefix cache on) | 20 000 | 1 ..= 10^9 |
///
/// The simulated GPU holds `resident_slots × model_memory` bytes: the
/// server reports that as its total GPU memory, and `resident models ×
/// model_memory` as used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Models kept resident (LRU).
    pub(crate) resident_slots: usize,
    /// Requests served at once; further requests queue.
    pub(crate) concurrency: usize,
    /// Time to load a model that is not resident; holds a serving slot.
    pub(crate) cold_load: Duration,
    /// Time to serve an update.
    pub(crate) update_time: Duration,
    /// Inference time of each model.
    pub(crate) inference: InferenceTimes,
    /// GPU memory of one resident model, in bytes.
    pub(crate) model_memory: u64,
    /// Models load only through the repository API (Triton's explicit
    /// model control), not on an inference request.
    pub(crate) explicit_load: bool,
    /// The models the repository holds, sorted and deduplicated; `None`:
    /// any model.
    pub(crate) repository: Option<Vec<String>>,
    /// Time to decode one token of a streamed answer, after the first.
    pub(crate) decode_time: Duration,
    /// Tokens of a streamed answer whose request names no `max_tokens`.
    pub(crate) stream_tokens: u32,
    /// Capacity of the prefix cache, in tokens; 0: off.
    pub(crate) prefix_cache: u64,
    /// Prompt tokens prefilled per second (prefix cache on).
    pub(crate) prefill_rate: u64,
}

/// Default GPU memory of one resident model: 16 GiB.
const DEFAULT_MODEL_MEMORY: u64 = 16 << 30;
/// Largest GPU memory of one resident model: 1 TiB.
const MAX_MODEL_MEMORY: u64 = 1 << 40;
/// Most tokens in a streamed answer, `stream_tokens` or a request's
/// `max_tokens`.
pub(crate) const MAX_STREAM_TOKENS: u32 = 4_096;
/// Largest prefix cache, in tokens: 2^40.
const MAX_PREFIX_CACHE: u64 = 1 << 40;
/// Fastest prefill, in tokens per second.
const MAX_PREFILL_RATE: u64 = 1_000_000_000;

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            resident_slots: 5,
            concurrency: 4,
            cold_load: Duration::from_millis(300),
            update_time: Duration::from_millis(10),
            inference: InferenceTimes::default(),
            model_memory: DEFAULT_MODEL_MEMORY,
            explicit_load: false,
            repository: None,
            decode_time: Duration::from_millis(5),
            stream_tokens: 16,
            prefix_cache: 0,
            prefill_rate: 20_000,
        }
    }
}

impl ServerConfig {
    /// Models kept resident.
    pub fn resident_slots(&self) -> usize {
        self.resident_slots
    }

    /// Requests served at once.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// Time to decode one token of a streamed answer, after the first.
    pub fn decode_time(&self) -> Duration {
        self.decode_time
    }

    /// Tokens of a streamed answer whose request names no `max_tokens`.
    pub fn stream_tokens(&self) -> u32 {
        self.stream_tokens
    }

    /// Capacity of the prefix cache, in tokens (0: off).
    pub fn prefix_cache(&self) -> u64 {
        self.prefix_cache
    }

    /// Prompt tokens prefilled per second, with the prefix cache on.
    pub fn prefill_rate(&self) -> u64 {
        self.prefill_rate
    }

    /// The models the server's repository holds, sorted; `None` when any
    /// model name is known.
    pub(crate) fn repository(&self) -> Option<&[String]> {
        self.repository.as_deref()
    }

    /// Whether the repository holds `model` (always, without a repository
    /// list).
    pub(crate) fn knows(&self, model: &str) -> bool {
        self.repository
            .as_ref()
            .is_none_or(|models| models.binary_search_by(|m| m.as_str().cmp(model)).is_ok())
    }

    /// A builder starting from the defaults.
    pub fn builder() -> ServerConfigBuilder {
        ServerConfigBuilder {
            config: Self::default(),
        }
    }
}

/// Builds a validated [`ServerConfig`].
///
/// ```
/// use tower_model_balance_sim::ServerConfig;
///
/// let config = ServerConfig::builder().resident_slots(16).build().unwrap();
/// assert_eq!(config.concurrency(), 4);
/// assert_eq!(ServerConfig::builder().concurrency(0).build().unwrap_err().field, "concurrency");
/// assert_eq!(ServerConfig::builder().stream_tokens(0).build().unwrap_err().field, "stream_tokens");
/// assert_eq!(ServerConfig::builder().prefill_rate(0).build().unwrap_err().field, "prefill_rate");
/// assert_eq!(ServerConfig::builder().prefix_cache(1 << 41).build().unwrap_err().field, "prefix_cache");
/// assert_eq!(ServerConfig::builder().prefix_cache(65_536).build().unwrap().prefix_cache(), 65_536);
///
/// let explicit = ServerConfig::builder()
///     .explicit_load(true)
///     .repository(["resnet-50", "bert"])
///     .build()
///     .unwrap();
/// // Sorted.
/// assert!(format!("{explicit:?}").contains(r#"repository: Some(["bert", "resnet-50"])"#));
/// assert_eq!(ServerConfig::builder().repository(["a b"]).build().unwrap_err().field, "repository");
/// ```
#[derive(Debug, Clone)]
pub struct ServerConfigBuilder {
    config: ServerConfig,
}

impl ServerConfigBuilder {
    /// Sets the number of resident model slots (1 ..= 1 000; default 5).
    pub fn resident_slots(mut self, slots: usize) -> Self {
        self.config.resident_slots = slots;
        self
    }

    /// Sets the number of requests served at once (1 ..= 10 000; default 4).
    pub fn concurrency(mut self, requests: usize) -> Self {
        self.config.concurrency = requests;
        self
    }

    /// Sets the cold-load time (at most 10 min; default 300 ms).
    pub fn cold_load(mut self, time: Duration) -> Self {
        self.config.cold_load = time;
        self
    }

    /// Sets the update time (at most 10 min; default 10 ms).
    pub fn update_time(mut self, time: Duration) -> Self {
        self.config.update_time = time;
        self
    }

    /// Sets the inference times.
    pub fn inference(mut self, times: InferenceTimes) -> Self {
        self.config.inference = times;
        self
    }

    /// Sets the GPU memory of one resident model, in bytes (1 ..= 2^40;
    /// default 16 GiB).
    pub fn model_memory(mut self, bytes: u64) -> Self {
        self.config.model_memory = bytes;
        self
    }

    /// Sets whether models load only through the repository API (default
    /// `false`).
    ///
    /// `false` is the auto-load mode: an inference request for a model
    /// that is not resident loads it (a cold load) and is then served.
    /// `true` is the explicit mode of Triton (`--model-control-mode=explicit`),
    /// of MLServer and of vLLM's LoRA adapters: such a request is answered
    /// 404 at once, and a model loads only when asked through
    /// `POST /v2/repository/models/{name}/load` or
    /// `POST /v1/load_lora_adapter` (see [`protocol`](super::protocol)).
    pub fn explicit_load(mut self, on: bool) -> Self {
        self.config.explicit_load = on;
        self
    }

    /// Sets the models the server's repository holds (default: any model
    /// name is known). A request or load call for another model is
    /// answered 404 without a load, and the repository index lists
    /// exactly these models. Duplicates are ignored.
    pub fn repository<I, S>(mut self, models: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut models: Vec<String> = models.into_iter().map(Into::into).collect();
        models.sort_unstable();
        models.dedup();
        self.config.repository = Some(models);
        self
    }

    /// Sets the time to decode one token of a streamed answer (at most
    /// 10 min; default 5 ms): the wait between two token events. The head
    /// comes when the request has its serving slot; the first token after
    /// any cold load and the prefill, the service time of a whole answer.
    pub fn decode_time(mut self, time: Duration) -> Self {
        self.config.decode_time = time;
        self
    }

    /// Sets the number of tokens of a streamed answer whose request body
    /// has no `max_tokens` (1 ..= 4 096; default 16).
    pub fn stream_tokens(mut self, tokens: u32) -> Self {
        self.config.stream_tokens = tokens;
        self
    }

    /// Turns on a KV cache of prompt prefix blocks holding up to `tokens`
    /// tokens (at most 2^40; default 0, off), as vLLM's automatic prefix
    /// caching: blocks of 16 tokens, a token 4 bytes of prompt text (see
    /// [`protocol::prompt_blocks`](super::protocol::prompt_blocks)), LRU
    /// by block with a prompt's tail evicted before its head. A capacity
    /// below 16 tokens holds no block.
    ///
    /// With the cache on, an OpenAI chat or completion inference is
    /// served as vLLM serves it: its prefill takes its uncached prompt
    /// tokens ÷ [`prefill_rate`](Self::prefill_rate), one prefill at a
    /// time per server in the order the requests took their serving
    /// slots (after any cold load), and its tokens follow at
    /// [`decode_time`](Self::decode_time) each, many requests at once
    /// (continuous batching: [`concurrency`](Self::concurrency) is the
    /// batch size, vLLM's `--max-num-seqs`). A whole (not streamed)
    /// answer comes after the prefill and its `max_tokens` (else
    /// `stream_tokens`) decode steps. The model's inference time is not
    /// used for these routes then; the KServe v2 route, embeddings and
    /// updates are served as without the cache. Answers report their
    /// `usage` with `prompt_tokens_details.cached_tokens`, and
    /// [`ServerStats`](super::ServerStats) counts `prompt_tokens` and
    /// `cached_tokens`.
    pub fn prefix_cache(mut self, tokens: u64) -> Self {
        self.config.prefix_cache = tokens;
        self
    }

    /// Sets the prompt tokens prefilled per second with the prefix cache
    /// on (1 ..= 10^9; default 20 000).
    pub fn prefill_rate(mut self, tokens_per_sec: u64) -> Self {
        self.config.prefill_rate = tokens_per_sec;
        self
    }

    /// Validates and returns the config.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming the first field out of range.
    pub fn build(self) -> Result<ServerConfig, InvalidConfig> {
        let c = self.config;
        let ten_minutes = Duration::from_secs(600);
        if !(1..=1_000).contains(&c.resident_slots) {
            return Err(InvalidConfig::new("resident_slots", "1 ..= 1000"));
        }
        if !(1..=10_000).contains(&c.concurrency) {
            return Err(InvalidConfig::new("concurrency", "1 ..= 10000"));
        }
        if c.cold_load > ten_minutes {
            return Err(InvalidConfig::new("cold_load", "at most 10 min"));
        }
        if c.update_time > ten_minutes {
            return Err(InvalidConfig::new("update_time", "at most 10 min"));
        }
        if c.decode_time > ten_minutes {
            return Err(InvalidConfig::new("decode_time", "at most 10 min"));
        }
        if !(1..=MAX_STREAM_TOKENS).contains(&c.stream_tokens) {
            return Err(InvalidConfig::new("stream_tokens", "1 ..= 4096"));
        }
        if c.prefix_cache > MAX_PREFIX_CACHE {
            return Err(InvalidConfig::new("prefix_cache", "at most 2^40 tokens"));
        }
        if !(1..=MAX_PREFILL_RATE).contains(&c.prefill_rate) {
            return Err(InvalidConfig::new("prefill_rate", "1 ..= 10^9 tokens/s"));
        }
        if !(1..=MAX_MODEL_MEMORY).contains(&c.model_memory) {
            return Err(InvalidConfig::new("model_memory", "1 ..= 2^40 bytes"));
        }
        let valid = |m: &String| tower_model_balance::route::ModelId::new(m).is_ok();
        if c.repository
            .as_ref()
            .is_some_and(|ms| !ms.iter().all(valid))
        {
            return Err(InvalidConfig::new("repository", "valid model IDs"));
        }
        Ok(c)
    }
}

/// Inference time per model: drawn uniformly in `min ..= max` (whole
/// milliseconds) from the xxh3 hash of the model name under `seed`, so every
/// server and the workload generator agree on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InferenceTimes {
    seed: u64,
    min_ms: u64,
    max_ms: u64,
}

impl Default for InferenceTimes {
    fn default() -> Self {
        Self {
            seed: 0,
            min_ms: 5,
            max_ms: 30,
        }
    }
}

impl InferenceTimes {
    /// Times in `min_ms ..= max_ms` drawn by `seed`.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `inference` when `min_ms > max_ms` or
    /// `max_ms` exceeds 60 000.
    pub fn new(seed: u64, min_ms: u64, max_ms: u64) -> Result<Self, InvalidConfig> {
        if min_ms > max_ms || max_ms > 60_000 {
            return Err(InvalidConfig::new("inference", "min_ms <= max_ms <= 60000"));
        }
        Ok(Self {
            seed,
            min_ms,
            max_ms,
        })
    }

    /// The inference time of `model`.
    pub fn of(&self, model: &str) -> Duration {
        let span = self.max_ms - self.min_ms + 1;
        let hash = xxhash_rust::xxh3::xxh3_64_with_seed(model.as_bytes(), self.seed);
        Duration::from_millis(self.min_ms + hash % span)
    }
}
