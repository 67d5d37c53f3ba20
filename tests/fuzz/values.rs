//! Edge values: the literals and buffer contents the generator draws from, so that every
//! operation meets 0, 1, -1, MIN, MAX, NaN (quiet, signed, with payload), ±inf,
//! subnormals, ±0, rounding ties and conversion limits.

use super::rng::Rng;
use vyre_foundation::ir::DataType;

pub const U32_EDGES: &[u32] = &[
    0,
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    15,
    16,
    31,
    32,
    33,
    63,
    64,
    0xFF,
    0x100,
    0xFFFF,
    0x1_0000,
    0x7FFF_FFFF,
    0x8000_0000,
    0x8000_0001,
    0xFFFF_FFFE,
    u32::MAX,
];

pub const I32_EDGES: &[i32] = &[
    0,
    1,
    -1,
    2,
    -2,
    3,
    -3,
    7,
    -7,
    31,
    32,
    33,
    -32,
    100,
    -100,
    i32::MAX,
    i32::MIN,
    i32::MIN + 1,
    i32::MAX - 1,
];

/// f32 bit patterns: zeros, ones, halves (rounding ties), NaNs, infinities, subnormals,
/// the normal limits and integer-conversion limits.
pub const F32_EDGE_BITS: &[u32] = &[
    0x0000_0000, // +0
    0x8000_0000, // -0
    0x3F80_0000, // 1
    0xBF80_0000, // -1
    0x3F00_0000, // 0.5
    0xBF00_0000, // -0.5
    0x3FC0_0000, // 1.5
    0x4020_0000, // 2.5
    0xC020_0000, // -2.5
    0x4060_0000, // 3.5
    0x3EFF_FFFF, // 0.49999997
    0x7FC0_0000, // NaN
    0xFFC0_1234, // -NaN with payload
    0x7F80_0001, // signalling NaN
    0x7F80_0000, // +inf
    0xFF80_0000, // -inf
    0x0000_0001, // smallest subnormal
    0x8000_0001, // -smallest subnormal
    0x007F_FFFF, // largest subnormal
    0x0080_0000, // smallest normal
    0x8080_0000, // -smallest normal
    0x0080_0001,
    0x7F7F_FFFF, // f32::MAX
    0xFF7F_FFFF, // f32::MIN
    0x4B80_0001, // 16777218 (2^24 + 2)
    0x4B00_0001, // 8388609
    0x4F00_0000, // 2^31
    0xCF00_0000, // -2^31
    0xCF00_0001, // just below -2^31
    0x4F80_0000, // 2^32
    0x4F7F_FFFF, // just below 2^32
    0x1E3C_E508, // tiny normal
    0x2000_0000, // 1.08e-19 (product underflows)
    0x1F80_0000,
    0x4049_0FDB, // pi
    0x7F00_0000, // 1.7e38 (sum overflows)
];

pub fn f32_edge(rng: &mut Rng) -> f32 {
    if rng.chance(80) {
        f32::from_bits(*rng.pick(F32_EDGE_BITS))
    } else {
        random_f32(rng)
    }
}

/// An f64 where rounding it to f32 changes what code sees: f32 values, integers and
/// halves nudged by less than an f32 ulp (casts truncate the f64, not its rounding),
/// magnitudes under the smallest f32 (truthy, rounding to ±0) or over the largest
/// (rounding to ±inf), NaNs with payloads, and raw bits.
pub fn f64_edge(rng: &mut Rng) -> f64 {
    let nudge = *rng.pick(&[1e-12, -1e-12, 1e-9, -1e-9]);
    match rng.below(10) {
        0..=1 => f64::from(f32_edge(rng)),
        2..=3 => f64::from(rng.below(70)) - 5.0 + nudge,
        4 => f64::from(rng.below(16)) + 0.5 + nudge,
        5 => *rng.pick(&[1e-50, -1e-50, 1e-320, 5e-46, 1e-39, -1e-40]),
        6 => *rng.pick(&[
            1e39,
            -1e39,
            1e300,
            3.4028235677973366e38,
            4294967296.5,
            -2147483648.9,
        ]),
        7 => f64::from_bits(*rng.pick(&[
            0x7FF8_0000_0000_0001u64,
            0xFFF0_0000_0000_0001,
            0x7FF0_0000_0000_0000,
            0x8000_0000_0000_0000,
        ])),
        8 => f64::from(random_f32(rng)) * (1.0 + 1e-10),
        _ => f64::from_bits(rng.next_u64()),
    }
}

/// A finite f32 with a moderate exponent (so arithmetic on it stays interesting).
pub fn random_f32(rng: &mut Rng) -> f32 {
    let raw = rng.next_u32();
    let exponent = 100 + (raw >> 24) % 56; // 2^-27 .. 2^28
    f32::from_bits((raw & 0x807F_FFFF) | (exponent << 23))
}

pub fn u32_edge(rng: &mut Rng) -> u32 {
    match rng.below(10) {
        0..=6 => *rng.pick(U32_EDGES),
        7 => rng.below(64),
        _ => rng.next_u32(),
    }
}

pub fn i32_edge(rng: &mut Rng) -> i32 {
    match rng.below(10) {
        0..=6 => *rng.pick(I32_EDGES),
        7 => rng.below(64) as i32 - 32,
        _ => rng.next_u32() as i32,
    }
}

/// Little-endian bytes for `count` elements of `element` with edge-heavy contents.
pub fn buffer_bytes(rng: &mut Rng, element: &DataType, count: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(count * 8);
    for _ in 0..count {
        match element {
            DataType::U32 => out.extend(u32_edge(rng).to_le_bytes()),
            DataType::I32 => out.extend(i32_edge(rng).to_le_bytes()),
            DataType::F32 => out.extend(f32_edge(rng).to_bits().to_le_bytes()),
            DataType::F64 => out.extend(f64_edge(rng).to_bits().to_le_bytes()),
            DataType::Bool => {
                // Raw words: the reference keeps a Bool element's raw value.
                let word = match rng.below(8) {
                    0..=2 => 0,
                    3..=5 => 1,
                    6 => *rng.pick(&[2u32, 5, 0x100, 0x8000_0000, u32::MAX]),
                    _ => rng.next_u32(),
                };
                out.extend(word.to_le_bytes());
            }
            DataType::U8 | DataType::I8 | DataType::Bytes => out.push(u32_edge(rng) as u8),
            DataType::U16 | DataType::I16 => out.extend((u32_edge(rng) as u16).to_le_bytes()),
            DataType::U64 | DataType::I64 => {
                // Mostly values that fit in u32 (so checked casts succeed), some that do not.
                let v: u64 = match rng.below(20) {
                    0..=17 => u64::from(u32_edge(rng)),
                    18 => i64::from(i32_edge(rng)) as u64,
                    _ => rng.next_u64(),
                };
                out.extend(v.to_le_bytes());
            }
            // Raw element types (`Stmt::RawCopy`): their bytes, whatever they hold.
            other if other.size_bytes().is_some() => {
                for _ in 0..element_size(other) {
                    out.push(u32_edge(rng) as u8);
                }
            }
            other => panic!("no test data for element type {other}"),
        }
    }
    out
}

/// Bytes per element of the element types the generator uses (for the raw types of
/// `Stmt::RawCopy`: their size, one byte for the 4-bit ones).
pub fn element_size(element: &DataType) -> usize {
    match element {
        DataType::U8 | DataType::I8 | DataType::Bytes => 1,
        DataType::U16 | DataType::I16 => 2,
        DataType::U64 | DataType::I64 => 8,
        DataType::U32 | DataType::I32 | DataType::F32 | DataType::Bool => 4,
        other => other.size_bytes().unwrap_or(4),
    }
}

/// The reference's element count of a buffer of `bytes` bytes (`Buffer::len`: by the bit
/// width where the type has one, two 4-bit elements a byte).
pub fn element_count(element: &DataType, bytes: usize) -> u32 {
    let count = match (element.bit_width(), element.size_bytes()) {
        (Some(bits), _) => bytes.saturating_mul(8) / bits,
        (None, Some(size)) if size > 0 => bytes / size,
        _ => bytes,
    };
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// The bytes the reference allocates for `count` elements (vyre's packed size).
pub fn declared_bytes(element: &DataType, count: u32) -> usize {
    match element.packed_size_bytes(count as usize) {
        Ok(Some(bytes)) => bytes,
        _ => count as usize * element_size(element),
    }
}
