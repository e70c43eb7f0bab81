//! The fleets a run simulates, each a preset of the flags: `default`
//! (servers that serve 4 requests at once, at about 2 in flight per
//! backend) and `llm-batch` (LLM servers that batch: 32 serving slots,
//! completions of seconds, a batching service time, 16 or more requests
//! in flight per backend, and the balancer configured for them: `c` 1.15,
//! owners sized to carry 0.75 × the mean load each from one model).
//! Each is a preset of the settings (`Config::preset`); the flags given
//! on the command line apply on top of it.

/// One simulated fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// 4 serving slots, a request's time the same whatever else is in
    /// service, arrivals at 50% of warm capacity.
    Default,
    /// LLM servers: 32 serving slots, completions 10× the default's
    /// inference times (1.1 to 2.6 s alone), continuous batching (each
    /// request in service slows the others by 3% of their time alone: see
    /// [`crate::batching`]), arrivals at 75% of warm capacity at a full
    /// batch — about 21 requests in flight per backend. The balancer as
    /// a user of such servers would set it: a bounded-load factor `c` of
    /// 1.15 (for `bounded_load` too), and each owner of a model sized to
    /// carry 0.75 × a backend's mean load from it
    /// (`BalanceConfigBuilder::owner_load`), not `c` ×: with so many
    /// requests in flight per backend the cap `ceil(c × (total + 1) / n)`
    /// rounds up by little, so a tight `c` costs little, and owners with
    /// room under the cap for their other models' traffic keep the
    /// popular models' picks under it.
    LlmBatch,
}

impl Scenario {
    /// Every scenario, in the order the default run prints them.
    pub const ALL: [Scenario; 2] = [Scenario::Default, Scenario::LlmBatch];

    /// The name on the command line and in `--json`'s `scenario` field.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Default => "default",
            Scenario::LlmBatch => "llm-batch",
        }
    }

    /// The scenario named `name` on the command line.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}
