//! Shared pieces of the collective sweeps (issue 19 item 6, issue 20 item 2): the element
//! types and ops, deterministic per-rank inputs (random bits with NaNs, infinities,
//! subnormals and signed zeros; normal finite floats; small integers exact in every float
//! type), one-collective programs, byte comparisons that name the first differing element,
//! and a runner that prepares cases (inputs and the multi-rank oracle, which is slow on
//! large buffers) on worker threads while the calling thread drives the device in turn.

#![allow(dead_code)]

use super::gpu::Rng;
use vyre_foundation::ir::{BufferDecl, CollectiveOp, CommGroup, DataType, Node, Program};

/// Every collective op.
pub const OPS: [CollectiveOp; 6] = [
    CollectiveOp::Sum,
    CollectiveOp::Min,
    CollectiveOp::Max,
    CollectiveOp::BitAnd,
    CollectiveOp::BitOr,
    CollectiveOp::BitXor,
];

/// The element types of the sweep.
pub fn sweep_types() -> Vec<DataType> {
    vec![
        DataType::U32,
        DataType::I32,
        DataType::F32,
        DataType::F16,
        DataType::BF16,
        DataType::U64,
        DataType::F64,
    ]
}

pub fn is_float(ty: &DataType) -> bool {
    matches!(
        ty,
        DataType::F16 | DataType::BF16 | DataType::F32 | DataType::F64
    )
}

pub fn is_bitwise(op: CollectiveOp) -> bool {
    matches!(
        op,
        CollectiveOp::BitAnd | CollectiveOp::BitOr | CollectiveOp::BitXor
    )
}

pub fn size_of(ty: &DataType) -> usize {
    ty.size_bytes().expect("a fixed-size element type")
}

/// Which values a rank's buffer holds (integer types always get random bits with edges).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Values {
    /// Random bits, one element in twelve NaN (random payload), subnormal, infinite,
    /// signed zero, raw bits, or near the largest finite value; the rest normal values of
    /// magnitude 2^-4 .. 2^5 with random signs. Integers: random bits with 0, all ones,
    /// the sign bit alone and 1 among them.
    Bits,
    /// Normal finite floats of magnitude 2^-4 .. 2^5 only: any two add and compare exactly
    /// as IEEE says, whatever the rounding helper (no NaN, no subnormal in or out).
    Moderate,
    /// Integers -15 ..= 15 (zero as +0): every fold of up to 8 ranks is exact in every float
    /// type in any order, so a native (NCCL-order) reduction must match bit for bit.
    SmallInt,
}

/// (exponent bits, mantissa bits) of a float type.
fn float_format(ty: &DataType) -> Option<(u32, u32)> {
    match ty {
        DataType::F16 => Some((5, 10)),
        DataType::BF16 => Some((8, 7)),
        DataType::F32 => Some((8, 23)),
        DataType::F64 => Some((11, 52)),
        _ => None,
    }
}

fn compose(exp_bits: u32, man_bits: u32, sign: u64, exp: u64, man: u64) -> u64 {
    let man = man & ((1u64 << man_bits) - 1);
    let exp = exp & ((1u64 << exp_bits) - 1);
    (sign & 1) << (exp_bits + man_bits) | exp << man_bits | man
}

/// One float element as bits, the class picked by `class` (see [`Values::Bits`]).
fn float_bits(ty: &DataType, values: Values, class: usize, rng: &mut Rng) -> u64 {
    let (e, m) = float_format(ty).expect("a float type");
    let bias = (1u64 << (e - 1)) - 1;
    let max_exp = (1u64 << e) - 1;
    let sign = rng.next_u64() & 1;
    let mant = rng.next_u64();
    let moderate = |rng: &mut Rng| bias - 4 + rng.next_u64() % 9;
    match values {
        Values::SmallInt => {
            let v = (rng.next_u64() % 31) as i64 - 15;
            if v == 0 {
                return 0;
            }
            let magnitude = v.unsigned_abs();
            let top = 63 - u64::from(magnitude.leading_zeros());
            let fraction = (magnitude - (1 << top)) << (u64::from(m) - top);
            compose(e, m, u64::from(v < 0), bias + top, fraction)
        }
        Values::Moderate => compose(e, m, sign, moderate(rng), mant),
        Values::Bits => match class % 12 {
            0 => compose(e, m, sign, max_exp, mant | 1), // NaN, quiet or signalling
            1 => compose(e, m, sign, 0, mant | 1),       // subnormal
            2 => compose(e, m, sign, max_exp, 0),        // infinity
            3 => compose(e, m, sign, 0, 0),              // signed zero
            4 => mant,                                   // raw bits
            5 => compose(e, m, sign, max_exp - 1, mant), // near the largest finite
            _ => compose(e, m, sign, moderate(rng), mant),
        },
    }
}

/// One integer element as bits.
fn int_bits(bits: u32, class: usize, rng: &mut Rng) -> u64 {
    let all = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    match class % 8 {
        0 => 0,
        1 => all,
        2 => 1 << (bits - 1),
        3 => 1,
        _ => rng.next_u64() & all,
    }
}

/// `count` elements of `ty` for one rank; `seed` picks the data (rank-specific seeds give
/// rank-specific data, and the class pattern shifts with the seed, so even one element per
/// rank meets different classes on different ranks).
pub fn rank_values(ty: &DataType, count: usize, values: Values, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let size = size_of(ty);
    let shift = (seed as usize).wrapping_mul(5);
    let mut out = Vec::with_capacity(count * size);
    for i in 0..count {
        let class = i.wrapping_add(shift);
        let bits = if is_float(ty) {
            float_bits(ty, values, class, &mut rng)
        } else {
            int_bits(size as u32 * 8, class, &mut rng)
        };
        out.extend_from_slice(&bits.to_le_bytes()[..size]);
    }
    out
}

fn world_program(buffers: Vec<BufferDecl>, node: Node) -> Program {
    Program::wrapped(buffers, [64, 1, 1], vec![node])
}

/// `AllReduce(buf, op)` on a read-write buffer of `n` elements.
pub fn all_reduce(ty: &DataType, n: usize, op: CollectiveOp) -> Program {
    world_program(
        vec![BufferDecl::read_write("buf", 0, ty.clone()).with_count(n as u32)],
        Node::AllReduce {
            buffer: "buf".into(),
            op,
            group: CommGroup::WORLD,
        },
    )
}

/// `ReduceScatter(src -> out, op)`: `src` holds `world * m` elements, `out` `m`.
pub fn reduce_scatter(ty: &DataType, m: usize, world: usize, op: CollectiveOp) -> Program {
    world_program(
        vec![
            BufferDecl::read("src", 0, ty.clone()).with_count((world * m) as u32),
            BufferDecl::output("out", 1, ty.clone()).with_count(m as u32),
        ],
        Node::ReduceScatter {
            input: "src".into(),
            output: "out".into(),
            op,
            group: CommGroup::WORLD,
        },
    )
}

/// `AllGather(src -> out)`: `src` holds `n` elements, `out` `world * n`.
pub fn all_gather(ty: &DataType, n: usize, world: usize) -> Program {
    world_program(
        vec![
            BufferDecl::read("src", 0, ty.clone()).with_count(n as u32),
            BufferDecl::output("out", 1, ty.clone()).with_count((world * n) as u32),
        ],
        Node::AllGather {
            input: "src".into(),
            output: "out".into(),
            group: CommGroup::WORLD,
        },
    )
}

/// `Broadcast(buf, root)` on a read-write buffer of `n` elements.
pub fn broadcast(ty: &DataType, n: usize, root: u32) -> Program {
    world_program(
        vec![BufferDecl::read_write("buf", 0, ty.clone()).with_count(n as u32)],
        Node::Broadcast {
            buffer: "buf".into(),
            root,
            group: CommGroup::WORLD,
        },
    )
}

/// `None` when equal; else where the first element of `element` bytes differs and how many
/// differ (whole buffers are too large to print).
pub fn difference(got: &[u8], want: &[u8], element: usize) -> Option<String> {
    if got == want {
        return None;
    }
    if got.len() != want.len() {
        return Some(format!("{} bytes, want {} bytes", got.len(), want.len()));
    }
    let differing = got
        .chunks(element)
        .zip(want.chunks(element))
        .filter(|(a, b)| a != b)
        .count();
    let first = got
        .chunks(element)
        .zip(want.chunks(element))
        .position(|(a, b)| a != b)
        .expect("some element differs");
    let hex = |bytes: &[u8]| {
        bytes
            .iter()
            .rev()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let at = first * element;
    Some(format!(
        "{differing} of {} elements differ; first at {first}: got 0x{}, want 0x{}",
        want.len() / element,
        hex(&got[at..at + element]),
        hex(&want[at..at + element])
    ))
}

/// Per-rank, per-output comparison of two multi-rank results.
pub fn rank_difference(
    got: &[Vec<Vec<u8>>],
    want: &[Vec<Vec<u8>>],
    element: usize,
) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} ranks returned, want {}", got.len(), want.len()));
    }
    for (rank, (g, w)) in got.iter().zip(want).enumerate() {
        if g.len() != w.len() {
            return Some(format!(
                "rank {rank}: {} outputs, want {}",
                g.len(),
                w.len()
            ));
        }
        for (index, (g, w)) in g.iter().zip(w).enumerate() {
            if let Some(text) = difference(g, w, element) {
                return Some(format!("rank {rank} output {index}: {text}"));
            }
        }
    }
    None
}

/// Prepares every spec on worker threads (`prepare`, in any order) and hands each result
/// to `consume` on the calling thread as it arrives, at most a few at a time in flight.
pub fn pipelined<S: Sync, P: Send>(
    specs: &[S],
    prepare: impl Fn(usize, &S) -> P + Sync,
    mut consume: impl FnMut(usize, &S, P),
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let workers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .saturating_sub(1)
        .clamp(1, 15)
        .min(specs.len().max(1));
    let next = AtomicUsize::new(0);
    let mut consumed = 0;
    std::thread::scope(|scope| {
        let (send, receive) = std::sync::mpsc::sync_channel::<(usize, P)>(workers);
        for _ in 0..workers {
            let send = send.clone();
            let (next, prepare) = (&next, &prepare);
            scope.spawn(move || loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= specs.len() {
                    break;
                }
                let prepared = prepare(index, &specs[index]);
                if send.send((index, prepared)).is_err() {
                    break;
                }
            });
        }
        drop(send);
        for (index, prepared) in receive {
            consume(index, &specs[index], prepared);
            consumed += 1;
        }
    });
    assert_eq!(consumed, specs.len(), "every case was prepared and checked");
}

/// The element type the runtime folds `element` with for `op`: 64-bit integers fold the
/// bitwise operators as twice as many u32 words (`backend/collective/exec.rs`; the
/// reference has no 64-bit integer arithmetic), everything else as itself.
pub fn fold_element(op: CollectiveOp, element: &DataType) -> DataType {
    match element {
        DataType::U64 | DataType::I64 if is_bitwise(op) => DataType::U32,
        other => other.clone(),
    }
}

/// The fold kernel the runtime uses for `op` over `element` on `world` ranks
/// (`vyre_cuda::collective_fold_program` of [`fold_element`]), with the simulated gathered
/// buffer of `ranks` (one input each, rank order) and a zeroed `out` as its inputs.
pub fn fold_case(
    op: CollectiveOp,
    element: &DataType,
    ranks: &[Vec<Vec<u8>>],
) -> (Program, Vec<Vec<u8>>) {
    let program = vyre_cuda::collective_fold_program(op, fold_element(op, element), ranks.len())
        .expect("every collective op has a fold");
    let gathered: Vec<u8> = ranks.iter().flat_map(|r| r[0].iter().copied()).collect();
    let out = vec![0u8; ranks[0][0].len()];
    (program, vec![gathered, out])
}
