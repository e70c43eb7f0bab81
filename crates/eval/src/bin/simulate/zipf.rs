//! Zipf popularity: model `i` (rank 0 the most popular) draws a share
//! proportional to `1 / (i + 1)^s`.

use rand::Rng;

/// A Zipf distribution over `n` ranks, sampled by binary search of its CDF.
#[derive(Debug, Clone)]
pub struct Zipf {
    /// `cdf[i]`: the share of ranks `0..=i`; the last is exactly 1.
    cdf: Vec<f64>,
}

impl Zipf {
    /// Over `n ≥ 1` ranks with exponent `s ≥ 0` (0: uniform).
    pub fn new(n: usize, s: f64) -> Self {
        let weights: Vec<f64> = (1..=n.max(1)).map(|i| (i as f64).powf(-s)).collect();
        let total: f64 = weights.iter().sum();
        let mut sum = 0.0;
        let mut cdf: Vec<f64> = weights
            .iter()
            .map(|w| {
                sum += w;
                sum / total
            })
            .collect();
        if let Some(last) = cdf.last_mut() {
            *last = 1.0;
        }
        Self { cdf }
    }

    /// The number of ranks.
    pub fn len(&self) -> usize {
        self.cdf.len()
    }

    /// The share of requests rank `i` draws.
    pub fn share(&self, i: usize) -> f64 {
        match i {
            0 => self.cdf[0],
            _ => self.cdf[i] - self.cdf[i - 1],
        }
    }

    /// Draws a rank.
    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        let u: f64 = rng.gen();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn shares_sum_to_one_and_fall_with_rank() {
        let zipf = Zipf::new(1000, 1.1);
        let total: f64 = (0..zipf.len()).map(|i| zipf.share(i)).sum();
        assert!((total - 1.0).abs() < 1e-9);
        assert!((1..zipf.len()).all(|i| zipf.share(i) <= zipf.share(i - 1)));
        assert!((zipf.share(0) / zipf.share(1) - 2f64.powf(1.1)).abs() < 1e-9);
        // 1 / H(1000, 1.1), H ≈ ζ(1.1) − 1000^−0.1 / 0.1 ≈ 5.57.
        assert!((zipf.share(0) - 0.18).abs() < 0.01, "{}", zipf.share(0));
    }

    #[test]
    fn samples_follow_the_shares() {
        let zipf = Zipf::new(100, 1.0);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = [0u32; 100];
        let draws = 200_000;
        for _ in 0..draws {
            counts[zipf.sample(&mut rng)] += 1;
        }
        for rank in [0, 1, 9, 99] {
            let seen = f64::from(counts[rank]) / f64::from(draws);
            let want = zipf.share(rank);
            assert!(
                (seen - want).abs() < 0.1 * want + 0.001,
                "rank {rank}: {seen} vs {want}"
            );
        }
    }

    #[test]
    fn uniform_when_the_exponent_is_zero_and_one_rank_always_drawn() {
        let zipf = Zipf::new(4, 0.0);
        assert!((zipf.share(3) - 0.25).abs() < 1e-12);
        let one = Zipf::new(1, 1.1);
        let mut rng = SmallRng::seed_from_u64(1);
        assert!((0..100).all(|_| one.sample(&mut rng) == 0));
    }
}
