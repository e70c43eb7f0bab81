//! SplitMix64's mixing function: the balancer's random draws (P2C's
//! samples, a clone's salt, a queued request's stream) go through it.

/// SplitMix64's step and finalizer (Steele, Lea and Flood, 2014):
/// decorrelates clones' streams and weak RNGs, and makes a stream of a
/// counter.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
