//! Prompt text for the checks: code-like lines, deterministic from a seed.

/// A line of code-like text from `seed` and `i`: what the tokenizer was
/// trained on, so about four bytes a token.
pub fn line(seed: u64, i: u64) -> String {
    let x = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(i.wrapping_mul(1_442_695_040_888_963_407));
    format!(
        "value_{} = compute(items[{}], key=\"k{}\")\n",
        x % 997,
        (x >> 16) % 89,
        (x >> 32) % 9973
    )
}

/// `n` lines of text from `seed`.
pub fn text(seed: u64, n: u64) -> String {
    (0..n).map(|i| line(seed, i)).collect()
}
