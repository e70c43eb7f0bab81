//! [`RequestKind`] and [`Urgency`]: what a request does, and how much its
//! caller cares about latency.

/// What a request does: inference is routed by model affinity, an update
/// (online learning, index write) by load alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RequestKind {
    /// Reads the model: routed to a backend that holds it (the default).
    #[default]
    Inference,
    /// Writes: no locality, routed to a less loaded backend (P2C).
    Update,
}

/// How much the caller cares about latency for this request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum Urgency {
    /// Ordinary traffic (the default).
    #[default]
    Normal,
    /// Latency-sensitive traffic.
    High,
    /// Traffic that must not be delayed.
    Critical,
}
