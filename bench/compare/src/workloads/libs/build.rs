//! The vyre-libs 0.7.2 workloads: each a program built through the library's public API,
//! exactly as a user calls it, at a size people run and at a small size that
//! vyre-reference checks, with deterministic non-trivial inputs.
//!
//! This file needs only the vyre crates and `crate::programs::Rng`, so the CPU test
//! (`tests/libs_workloads.rs`) includes it as it is and runs every program on the reference.

use crate::programs::Rng;
use vyre_foundation::ir::{BufferAccess, BufferDecl, DataType, Program};
use vyre_libs::decode::{base64_decode, inflate::inflate_stored_block};
use vyre_libs::math::conv::conv2d_3x3_direct;
use vyre_libs::math::linalg::{matmul, matmul_tiled};
use vyre_libs::math::scan::scan_prefix_sum;
use vyre_libs::nn::activation::{gelu, swiglu};
use vyre_libs::nn::attention::{flash_attention, quest_paging, softmax};
use vyre_libs::nn::norm::{layer_norm, rms_norm};
use vyre_primitives::decode::base64::standard_decode_table_ref;
use vyre_primitives::math::conv1d::conv1d_program;

/// The id prefix every row of this family shares (what `--only libs` selects).
pub const PREFIX: &str = "libs_";

/// The epsilon of both norms (a common default of layer and RMS norms).
pub const EPS: f32 = 1e-5;

/// The matmul_tiled tile: the k-axis split that matches the builder's default `[16, 16, 1]`
/// workgroup.
pub const TILE: u32 = 16;

/// The flash-attention head dimension.
pub const HEAD_DIM: u32 = 64;

/// The conv1d radius (17 taps): the kernel reads it from its `params` buffer, so its tap
/// loop's trip count is known only at run time.
pub const CONV1D_RADIUS: u32 = 8;

/// Quest paging: pages selected, and the head dimension of a page's metadata.
pub const QUEST_K: u32 = 16;
pub const QUEST_D: u32 = 128;

/// What bounds a workload's kernel: its share of the HBM roofline or of the FP32 peak is
/// the one that says how close to the device it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    Memory,
    Compute,
    /// Too little data to fill the device at the size people run (a 64 KiB stored block,
    /// a 256 KiB page table): rates are reported, no roofline share.
    Latency,
}

/// One vyre-libs workload. `size` is its one size parameter (a matrix side, an element
/// count, an image side, a byte count: `unit` says which).
pub struct Spec {
    /// Row id stem (`libs_matmul`); rows are `<id>_kernel` and `<id>_e2e`.
    pub id: &'static str,
    /// The vyre-libs call and its element type, for the notes.
    pub call: &'static str,
    pub unit: &'static str,
    pub large: u32,
    pub small: u32,
    pub bound: Bound,
    /// The program at `size`, through the vyre-libs API.
    pub build: fn(u32) -> Result<Program, String>,
    /// The values of the program's leading reference inputs (see [`inputs`]).
    pub data: fn(u32) -> Vec<Vec<u8>>,
    /// Arithmetic operations of one run at `size` (multiply and add count one each),
    /// where the workload is arithmetic.
    pub ops: Option<fn(u32) -> f64>,
    /// The hand-written floor of the workload, where one is simple.
    pub floor: Option<FloorKernel>,
}

/// The workloads a hand-written floor kernel exists for (`engines::floor::norm_ptx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorKernel {
    /// The RMS norm of one vector (`EPS`), grid-wide: two launches.
    RmsNorm,
    /// The layer norm of one vector (`EPS`): two launches.
    LayerNorm,
    /// The softmax of one vector: three launches (max, sum of exponentials, output).
    Softmax,
    /// The inclusive u32 prefix sum: three launches (tile totals, their offsets, output).
    PrefixSum,
}

/// Every workload, in run order.
pub fn specs() -> Vec<Spec> {
    vec![
        Spec {
            id: "libs_matmul",
            call: "vyre_libs::math::linalg::matmul (u32, wrapping), M = K = N",
            unit: "side",
            large: 1024,
            small: 48,
            bound: Bound::Compute,
            build: |d| Ok(matmul("a", "b", "out", d, d, d)),
            data: |d| random_u32(d as usize * d as usize, 2, d),
            ops: Some(|d| 2.0 * f64::from(d).powi(3)),
            floor: None,
        },
        Spec {
            id: "libs_matmul_tiled",
            call: "vyre_libs::math::linalg::matmul_tiled (u32, wrapping, tile 16), M = K = N",
            unit: "side",
            large: 1024,
            small: 48,
            bound: Bound::Compute,
            build: |d| Ok(matmul_tiled("a", "b", "out", d, d, d, TILE)),
            data: |d| random_u32(d as usize * d as usize, 2, d ^ 0x71),
            ops: Some(|d| 2.0 * f64::from(d).powi(3)),
            floor: None,
        },
        Spec {
            id: "libs_rms_norm",
            call: "vyre_libs::nn::norm::rms_norm (f32, eps 1e-5), one vector",
            unit: "elements",
            large: 1 << 22,
            small: 1 << 12,
            bound: Bound::Memory,
            build: |n| Ok(rms_norm("input", "output", n, EPS)),
            data: |n| vec![Rng::new(u64::from(n) ^ 0x4e).f32_bytes(n as usize)],
            ops: None,
            floor: Some(FloorKernel::RmsNorm),
        },
        Spec {
            id: "libs_layer_norm",
            call: "vyre_libs::nn::norm::layer_norm (f32, eps 1e-5), one vector",
            unit: "elements",
            large: 1 << 22,
            small: 1 << 12,
            bound: Bound::Memory,
            build: |n| Ok(layer_norm("input", "output", n, EPS)),
            data: |n| vec![Rng::new(u64::from(n) ^ 0x1a).f32_bytes(n as usize)],
            ops: None,
            floor: Some(FloorKernel::LayerNorm),
        },
        Spec {
            id: "libs_gelu",
            call: "vyre_libs::nn::activation::gelu (f32, tanh form)",
            unit: "elements",
            large: 1 << 24,
            small: 1 << 12,
            bound: Bound::Memory,
            build: |n| Ok(gelu("input", "output", n)),
            data: |n| vec![activations(n as usize, u64::from(n) ^ 0x6e)],
            ops: None,
            floor: None,
        },
        Spec {
            id: "libs_swiglu",
            call: "vyre_libs::nn::activation::swiglu (f32)",
            unit: "elements",
            large: 1 << 24,
            small: 1 << 12,
            bound: Bound::Memory,
            build: |n| Ok(swiglu("gate", "up", "output", n)),
            data: |n| {
                let seed = u64::from(n) ^ 0x5a;
                vec![
                    activations(n as usize, seed),
                    activations(n as usize, seed + 1),
                ]
            },
            ops: None,
            floor: None,
        },
        Spec {
            id: "libs_prefix_sum",
            call: "vyre_libs::math::scan::scan_prefix_sum (u32 inclusive, multi-block)",
            unit: "elements",
            large: 1 << 24,
            // Above 1024 elements: the multi-block scan the large size runs.
            small: 1 << 14,
            bound: Bound::Memory,
            build: |n| Ok(scan_prefix_sum("input", "output", n)),
            data: |n| random_u32(n as usize, 1, n ^ 0x5c),
            ops: None,
            floor: Some(FloorKernel::PrefixSum),
        },
        Spec {
            id: "libs_conv2d_3x3",
            call: "vyre_libs::math::conv::conv2d_3x3_direct (f32, zero padding), square image",
            unit: "side",
            large: 2048,
            // 64^2 = 4096 pixels: the size where vyre-libs' own decision switches.
            small: 64,
            bound: Bound::Memory,
            build: |s| conv2d_3x3_direct("input", "kernel", "output", s, s),
            data: |s| {
                let mut rng = Rng::new(u64::from(s) ^ 0xc0);
                vec![rng.f32_bytes(s as usize * s as usize), rng.f32_bytes(9)]
            },
            ops: Some(|s| 18.0 * f64::from(s) * f64::from(s)),
            floor: None,
        },
        Spec {
            id: "libs_conv1d",
            call: "vyre_primitives::math::conv1d::conv1d_program (u32, wrapping, radius 8 from a params buffer)",
            unit: "elements",
            large: 1 << 24,
            small: 1 << 12,
            bound: Bound::Memory,
            build: |n| Ok(conv1d_program(n, CONV1D_RADIUS)),
            data: |n| {
                let taps = 2 * CONV1D_RADIUS as usize + 1;
                let mut rng = Rng::new(u64::from(n) ^ 0xc1);
                let params = [n, 1, CONV1D_RADIUS, 0];
                vec![
                    rng.u32_bytes(n as usize),
                    vec![0u8; n as usize * 4],
                    rng.u32_bytes(taps),
                    params.iter().flat_map(|w| w.to_le_bytes()).collect(),
                ]
            },
            ops: Some(|n| 2.0 * f64::from(2 * CONV1D_RADIUS + 1) * f64::from(n)),
            floor: None,
        },
        Spec {
            id: "libs_base64_decode",
            call:
                "vyre_libs::decode::base64_decode (one ASCII byte per u32 in, one byte per u32 out)",
            unit: "encoded bytes",
            large: 1 << 22,
            small: 1 << 12,
            bound: Bound::Memory,
            build: |n| Ok(base64_decode("input", "output", n)),
            data: |n| vec![words(&base64_text(n as usize)), table()],
            ops: None,
            floor: None,
        },
        Spec {
            id: "libs_inflate_stored",
            call: "vyre_libs::decode::inflate::inflate_stored_block (one byte per u32)",
            // A stored DEFLATE block holds at most 65535 bytes (LEN is 16 bits).
            unit: "block bytes (5-byte header + payload)",
            large: 5 + 65_535,
            small: 5 + 1000,
            bound: Bound::Latency,
            build: |n| Ok(inflate_stored_block("input", "output", n)),
            data: |n| vec![words(&stored_block(n as usize - 5))],
            ops: None,
            floor: None,
        },
        Spec {
            id: "libs_softmax",
            call: "vyre_libs::nn::attention::softmax (f32), one vector (the API is 1-D)",
            unit: "elements",
            large: 1 << 22,
            small: 1 << 12,
            bound: Bound::Memory,
            build: |n| Ok(softmax("input", "output", n)),
            data: |n| vec![activations(n as usize, u64::from(n) ^ 0x50)],
            ops: None,
            floor: Some(FloorKernel::Softmax),
        },
        Spec {
            id: "libs_flash_attention",
            call: "vyre_libs::nn::attention::flash_attention (f32 [s, 64] q, k, v, out)",
            unit: "sequence length (head dim 64)",
            large: 1024,
            small: 64,
            bound: Bound::Compute,
            build: |s| flash_attention("q", "k", "v", "out", s, HEAD_DIM),
            data: |s| {
                let count = (s * HEAD_DIM) as usize;
                let seed = u64::from(s) ^ 0xfa;
                (0..3).map(|k| unit_f32(count, seed + k)).collect()
            },
            // QK^T and PV: s^2 d multiply-adds each.
            ops: Some(|s| 4.0 * f64::from(s) * f64::from(s) * f64::from(HEAD_DIM)),
            floor: None,
        },
        Spec {
            id: "libs_quest_paging",
            call: "vyre_libs::nn::attention::quest_paging (f32 scores, top 16 of the pages, d_head 128)",
            unit: "pages (k 16, d_head 128)",
            large: 512,
            small: 64,
            bound: Bound::Latency,
            build: |p| Ok(quest_paging("query", "page_metadata", "scores", "io_queue", p, QUEST_K, QUEST_D)),
            data: |p| {
                let seed = u64::from(p) ^ 0x9e;
                vec![
                    unit_f32(QUEST_D as usize, seed),
                    unit_f32((p * QUEST_D) as usize, seed + 1),
                ]
            },
            // One multiply-add per metadata element (the scores).
            ops: Some(|p| 2.0 * f64::from(p) * f64::from(QUEST_D)),
            floor: None,
        },
    ]
}

/// The values of every reference input of `program` (the buffers
/// [`vyre_reference::is_reference_input`] selects, in `Program::buffers` order): `data` for
/// the leading ones, zeros of the declared size for the rest (the read-write outputs and
/// length counters the library's builders declare, as its own tests pass them).
pub fn inputs(program: &Program, data: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, String> {
    let decls: Vec<&BufferDecl> = (program.buffers().iter())
        .filter(|d| vyre_reference::is_reference_input(d))
        .collect();
    if data.len() > decls.len() {
        return Err(format!(
            "{} data buffers for {} reference inputs",
            data.len(),
            decls.len()
        ));
    }
    let mut out = data;
    for decl in &decls[out.len()..] {
        out.push(vec![0u8; declared_bytes(decl)?]);
    }
    for (value, decl) in out.iter().zip(&decls) {
        let want = declared_bytes(decl)?;
        if value.len() != want {
            return Err(format!(
                "buffer `{}`: {} bytes of data, {want} declared",
                decl.name(),
                value.len()
            ));
        }
    }
    Ok(out)
}

/// The bytes a buffer declares (every buffer of these programs has 4-byte elements).
pub fn declared_bytes(decl: &BufferDecl) -> Result<usize, String> {
    match decl.element() {
        DataType::U32 | DataType::I32 | DataType::F32 => Ok(decl.count() as usize * 4),
        other => Err(format!(
            "buffer `{}`: element type {other:?} is not 4 bytes",
            decl.name()
        )),
    }
}

/// The device buffers of `program` (every non-workgroup buffer), in binding order: what
/// a resident dispatch takes one resource for each of.
pub fn bindings(program: &Program) -> Vec<&BufferDecl> {
    let mut decls: Vec<&BufferDecl> = (program.buffers().iter())
        .filter(|d| d.access() != BufferAccess::Workgroup)
        .collect();
    decls.sort_by_key(|d| d.binding());
    decls
}

/// The bytes a run must move: every device buffer once (inputs read, outputs written).
pub fn moved_bytes(program: &Program) -> Result<f64, String> {
    let mut sum = 0usize;
    for decl in bindings(program) {
        sum += declared_bytes(decl)?;
    }
    Ok(sum as f64)
}

/// `count` random u32 words in each of `buffers` buffers.
fn random_u32(count: usize, buffers: usize, seed: u32) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(u64::from(seed) ^ 0xabcd);
    (0..buffers).map(|_| rng.u32_bytes(count)).collect()
}

/// `count` f32 activations in +-[1/8, 8): where gelu and silu are curved (the f32
/// generator of the harness, +-[1, 1024), saturates them).
pub fn activations(count: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(count * 4);
    for _ in 0..count {
        let r = rng.next_u32();
        let exponent = 124 + (r >> 23) % 6; // 2^-3 .. 2^2
        let bits = (r & 0x8000_0000) | (exponent << 23) | (r & 0x007F_FFFF);
        out.extend_from_slice(&bits.to_le_bytes());
    }
    out
}

/// `count` f32 values in +-[1/8, 1): attention inputs whose dot products over 64 or 128
/// lanes stay in exp's comfortable range.
pub fn unit_f32(count: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(count * 4);
    for _ in 0..count {
        let r = rng.next_u32();
        let exponent = 124 + (r >> 23) % 3; // 2^-3 .. 2^-1
        let bits = (r & 0x8000_0000) | (exponent << 23) | (r & 0x007F_FFFF);
        out.extend_from_slice(&bits.to_le_bytes());
    }
    out
}

/// One byte per little-endian u32 word: the layout the decode builders read.
pub fn words(bytes: &[u8]) -> Vec<u8> {
    bytes
        .iter()
        .flat_map(|&b| u32::from(b).to_le_bytes())
        .collect()
}

/// The base64 decode table the builder's table buffer must hold.
fn table() -> Vec<u8> {
    (standard_decode_table_ref().iter())
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// `len` bytes (a multiple of 4) of standard base64 encoding random bytes, the last quad
/// padded with `==` so the padding path runs too.
pub fn base64_text(len: usize) -> Vec<u8> {
    let mut rng = Rng::new(len as u64 ^ 0xb64);
    let mut text: Vec<u8> = (0..len)
        .map(|_| BASE64[(rng.next_u32() % 64) as usize])
        .collect();
    if len >= 4 {
        // `xx==` decodes one byte only when the second symbol's low 4 bits are zero.
        text[len - 3] = BASE64[(rng.next_u32() % 4 * 16) as usize];
        text[len - 2] = b'=';
        text[len - 1] = b'=';
    }
    text
}

/// A final stored DEFLATE block (BFINAL = 1, BTYPE = 00) of `payload` random bytes.
pub fn stored_block(payload: usize) -> Vec<u8> {
    let len = payload as u16;
    let mut block = vec![0x01];
    block.extend_from_slice(&len.to_le_bytes());
    block.extend_from_slice(&(!len).to_le_bytes());
    let mut rng = Rng::new(payload as u64 ^ 0xdef1);
    block.extend((0..payload).map(|_| rng.next_u32() as u8));
    block
}
