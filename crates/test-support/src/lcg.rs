//! A deterministic RNG for `ModelBalancer::from_rng` in tests.

use tower::util::rng::Rng;

/// A linear congruential generator (Knuth's MMIX constants), top bits.
#[derive(Clone)]
pub struct Lcg(pub u64);

impl Rng for Lcg {
    fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 11
    }
}
