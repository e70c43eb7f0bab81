//! A ring's points, and the most one ring may hold.

/// Largest number of points one ring may hold (16 Mi).
pub const MAX_POINTS: usize = 1 << 24;

#[derive(Debug, Clone, Copy)]
pub(super) struct Point {
    pub(super) hash: u64,
    pub(super) member: u32,
}
