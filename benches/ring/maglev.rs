//! Maglev's lookup table (Eisenbud et al., "Maglev: A Fast and Reliable
//! Software Network Load Balancer", NSDI 2016, section 3.4, Algorithm 1),
//! the baseline of `benches/ring.rs`.
//!
//! The `maglev` crate builds the same table, but first materialises every
//! node's whole permutation: N × M words, 80 GB at N = 10 000 (M, the
//! table size, is the first prime at or above 100 N, as the crate takes
//! it). This one computes each permutation entry when it needs it, so the
//! table is built in O(M + N) memory; its entries are `u32` member
//! indices (the crate's are `isize`), and a lookup is one read of
//! `table[hash % M]` — a smaller table and one read fewer than the crate's
//! `get`, so a baseline at least as fast as the crate's. At N ≤ 64 the
//! bench checks the two tables are equal.

/// A Maglev lookup table over member indices `0..n`.
pub struct Maglev {
    table: Box<[u32]>,
}

impl Maglev {
    /// The table over nodes with these 64-bit hashes: node `i`'s
    /// permutation starts at `hash % M` and steps by `hash % (M − 1) + 1`,
    /// as the `maglev` crate derives them through an identity hasher.
    pub fn new(nodes: &[u64]) -> Self {
        let m = first_prime_from(100 * nodes.len().max(1));
        let (m64, n) = (m as u64, nodes.len());
        let offset: Vec<u64> = nodes.iter().map(|&h| h % m64).collect();
        let skip: Vec<u64> = nodes.iter().map(|&h| h % (m64 - 1) + 1).collect();
        let mut next = vec![0u64; n];
        let mut table = vec![u32::MAX; m];
        let mut filled = 0;
        'fill: while filled < m && n > 0 {
            for i in 0..n {
                let mut c = ((offset[i] + next[i] * skip[i]) % m64) as usize;
                while table[c] != u32::MAX {
                    next[i] += 1;
                    c = ((offset[i] + next[i] * skip[i]) % m64) as usize;
                }
                table[c] = i as u32;
                next[i] += 1;
                filled += 1;
                if filled == m {
                    break 'fill;
                }
            }
        }
        Self {
            table: table.into_boxed_slice(),
        }
    }

    /// The member owning `hash`.
    #[inline]
    pub fn get(&self, hash: u64) -> u32 {
        self.table[(hash % self.table.len() as u64) as usize]
    }

    /// The table's entries, for the check against the `maglev` crate.
    pub fn entries(&self) -> &[u32] {
        &self.table
    }
}

/// The first prime at or above `from` (trial division: M is at most a few
/// million here).
fn first_prime_from(from: usize) -> usize {
    let is_prime = |k: usize| {
        k >= 2
            && (2..)
                .take_while(|d| d * d <= k)
                .all(|d| !k.is_multiple_of(d))
    };
    (from..)
        .find(|&k| is_prime(k))
        .expect("a prime above any usize we use")
}
