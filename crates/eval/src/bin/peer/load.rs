//! What each run of the comparison sends: the fleet job's plan, or
//! prompts sharing long prefixes.

/// What each run sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// The fleet job's plan: Zipf(1.1) over 32 models, a prompt of
    /// its own per request.
    Plain,
    /// Prompts sharing long prefixes (`prefix.rs`).
    Prefix,
}
