//! A tiny deterministic RNG (SplitMix64): the fuzzer needs reproducible streams from a
//! `u64` seed and nothing else, so it does not pull in `rand`.

/// SplitMix64 (Steele, Lea, Flood 2014): a full-period 64-bit generator whose every seed,
/// including 0, gives a good stream. A scripted stream ([`Rng::scripted`]) first returns
/// the bytes it was given, so a coverage-guided fuzzer (`fuzz/`) steers every choice of the
/// generators.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
    script: std::sync::Arc<[u8]>,
    read: usize,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self {
            state: seed,
            script: std::sync::Arc::from(&[][..]),
            read: 0,
        }
    }

    /// A stream whose values come from `bytes` (8 per value, little-endian, the last one
    /// zero-padded) and then continue as SplitMix64 seeded with the script's length.
    pub fn scripted(bytes: &[u8]) -> Self {
        Self {
            state: bytes.len() as u64,
            script: std::sync::Arc::from(bytes),
            read: 0,
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        if self.read < self.script.len() {
            let chunk = &self.script[self.read..self.script.len().min(self.read + 8)];
            self.read += 8;
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            return u64::from_le_bytes(word);
        }
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in `0..n` (`n > 0`; 0 when `n == 0`).
    pub fn below(&mut self, n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        ((u64::from(self.next_u32()) * u64::from(n)) >> 32) as u32
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u32) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u32) as usize]
    }

    /// An index drawn with the given relative weights (all-zero weights give 0).
    pub fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u32 = weights.iter().sum();
        if total == 0 {
            return 0;
        }
        let mut x = self.below(total);
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.len() - 1
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u32 + 1) as usize;
            items.swap(i, j);
        }
    }

    /// A fresh seed derived from this stream (for sub-generators).
    pub fn fork(&mut self) -> u64 {
        self.next_u64()
    }
}

/// The seed of program `index` in a run started from `base`: independent streams per
/// program, so any one program can be regenerated from (base, index) alone.
pub fn program_seed(base: u64, index: u64) -> u64 {
    let mut r = Rng::new(base ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03));
    r.next_u64()
}
