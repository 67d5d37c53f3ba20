//! The floor's kernel rows of the vyre-libs workloads that have a hand-written kernel
//! (`build::FloorKernel`): the grid-wide form of the workload, checked against
//! vyre-reference's output at the small size to a relative tolerance (it sums in another
//! order than the program, so not bit for bit), then timed with device events on resident
//! buffers at the large size.

use super::build::{FloorKernel, EPS};
use super::Job;
use crate::check::{compare, Expect};
use crate::engines::floor::driver::{Arg, DevBuf, Floor, Launch, OwnKernel, BLOCK};
use crate::engines::floor::{norm_ptx, ptx, scan_ptx};
use crate::measure::{measure, Sampling, R};
use crate::report::Outcome;
use std::collections::BTreeMap;
use std::time::Duration;
use vyre_foundation::ir::BufferAccess;

/// Elements of the scan's tile: a block of `BLOCK` threads, a `v4` each.
const SCAN_TILE: u32 = 4 * BLOCK;

/// The largest difference from the reference's element, relative to it, the floor may
/// show (its sums in another order move the statistics by a few ulp; softmax's
/// `ex2.approx` is within 2 ulp).
const TOLERANCE: f32 = 1e-4;

/// Where the buffer named `output` is among the reference's outputs: the buffers the
/// program writes, in binding order.
fn output_position(program: &vyre_foundation::ir::Program) -> Option<usize> {
    let mut written: Vec<_> = (program.buffers().iter())
        .filter(|b| {
            matches!(
                b.access(),
                BufferAccess::ReadWrite | BufferAccess::WriteOnly
            )
        })
        .collect();
    written.sort_by_key(|b| b.binding());
    written.iter().position(|b| b.name() == "output")
}

/// The floor's kernel row of `kind`: checked on `small`, timed on `large`.
pub(super) fn kernel_outcome(
    floor: &Floor,
    kind: FloorKernel,
    (small, large): (&Job, &Job),
    expect: &Expect,
    s: Sampling,
) -> Outcome {
    let unsupported = |reason: String| Outcome::Unsupported { reason };
    let reduction = match Reduction::load(floor, kind) {
        Ok(reduction) => reduction,
        Err(e) => return unsupported(e),
    };
    // The buffer named `output` (a program may declare scratch outputs of the same length:
    // the multi-block scan's partials).
    let (output, want) = match (expect, output_position(&small.program)) {
        (Expect::Full(outs), Some(output)) if output < outs.len() => (output, &outs[output]),
        (Expect::Full(_), _) => return unsupported("no buffer named `output` to check".into()),
        (Expect::Sampled { .. }, _) => return unsupported("the floor checks full outputs".into()),
    };
    // The scan is integer arithmetic: bit for bit; the f32 reductions sum in another order.
    let exact = kind == FloorKernel::PrefixSum;
    match reduction.run(floor, &small.inputs[0]) {
        Ok(got) => {
            let checked = match exact {
                true => compare(output, &got, want),
                false => within_tolerance(&got, want),
            };
            if let Err(reason) = checked {
                return Outcome::Fail { reason };
            }
        }
        Err(e) => return unsupported(e),
    }
    let timed = reduction
        .buffers(floor, &large.inputs[0])
        .and_then(|b| measure(s.warmup, s.samples, s.budget, || reduction.time(floor, &b)));
    match timed {
        Ok(stats) => Outcome::Ok {
            stats,
            extra: BTreeMap::new(),
            note: Some(format!(
                "hand-written grid-wide kernels ({} launches), checked {}",
                reduction.kernels.len(),
                match exact {
                    true => "bit for bit".to_string(),
                    false => format!("to {TOLERANCE:e} relative"),
                }
            )),
        },
        Err(e) => Outcome::Fail {
            reason: format!("error while timing: {e}"),
        },
    }
}

/// Every element of `got` within [`TOLERANCE`] of `want`'s (f32 words).
fn within_tolerance(got: &[u8], want: &[u8]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} bytes out, {} expected", got.len(), want.len()));
    }
    let words = |b: &[u8]| -> Vec<f32> {
        (b.chunks_exact(4))
            .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect()
    };
    let (got, want) = (words(got), words(want));
    // Relative to the element or, where it nearly cancels (a layer norm's `x - mean`), to
    // the output's mean magnitude; NaN anywhere is far (the comparison is false).
    let typical = want.iter().map(|w| w.abs()).sum::<f32>() / want.len().max(1) as f32;
    let close =
        |g: f32, w: f32| (g - w).abs() <= TOLERANCE * w.abs().max(typical).max(f32::MIN_POSITIVE);
    let far = (got.iter().zip(&want).enumerate()).find(|&(_, (&g, &w))| !close(g, w));
    match far {
        None => Ok(()),
        Some((i, (g, w))) => Err(format!(
            "element {i}: {g:e} against the reference's {w:e} (over {TOLERANCE:e} relative)"
        )),
    }
}

/// One of the floor's reductions over a vector (`norm_ptx`, `scan_ptx`), its kernels
/// loaded.
struct Reduction {
    kind: FloorKernel,
    kernels: Vec<OwnKernel>,
    multiprocessors: u32,
}

/// One vector's device buffers: `x`, the blocks' partial results (two arrays of `G`), `y`.
struct Buffers {
    x: DevBuf,
    partials: DevBuf,
    y: DevBuf,
    n: u32,
}

impl Reduction {
    fn load(floor: &Floor, kind: FloorKernel) -> R<Self> {
        let (major, minor) = floor.facts.compute_capability;
        let (text, names): (String, &[&str]) = match kind {
            FloorKernel::RmsNorm => (
                norm_ptx::rms_norm(),
                &["floor_rms_partials", "floor_rms_apply"],
            ),
            FloorKernel::LayerNorm => (
                norm_ptx::layer_norm(),
                &["floor_ln_partials", "floor_ln_apply"],
            ),
            FloorKernel::Softmax => (
                norm_ptx::softmax(),
                &[
                    "floor_softmax_max",
                    "floor_softmax_sum",
                    "floor_softmax_apply",
                ],
            ),
            FloorKernel::PrefixSum => (
                scan_ptx::prefix_sum(),
                &[
                    "floor_scan_totals",
                    "floor_scan_offsets",
                    "floor_scan_apply",
                ],
            ),
        };
        let text = ptx::header(major, minor) + &text;
        let kernels = (names.iter())
            .map(|name| floor.load_kernel(&text, name))
            .collect::<R<Vec<_>>>()?;
        Ok(Self {
            kind,
            kernels,
            multiprocessors: floor.facts.multiprocessors.max(1) as u32,
        })
    }

    /// Blocks of each launch: enough to cover the `v4` groups, at most 8 a multiprocessor.
    fn grid(&self, n: u32) -> u32 {
        (n / 4).div_ceil(BLOCK).clamp(1, self.multiprocessors * 8)
    }

    /// Words of the partial results: two arrays of `G` (the scan: a total a tile).
    fn partial_words(&self, n: u32) -> u32 {
        match self.kind {
            FloorKernel::PrefixSum => n / SCAN_TILE,
            _ => 2 * self.grid(n),
        }
    }

    fn buffers(&self, floor: &Floor, x: &[u8]) -> R<Buffers> {
        let multiple = match self.kind {
            FloorKernel::PrefixSum => SCAN_TILE as usize,
            _ => 4,
        };
        if x.len() % (4 * multiple) != 0 {
            return Err(format!(
                "the floor's kernel takes a multiple of {multiple} elements"
            ));
        }
        let n = u32::try_from(x.len() / 4).map_err(|_| "over 2^32 elements".to_string())?;
        floor.bind()?;
        let b = Buffers {
            x: DevBuf::new(x.len())?,
            partials: DevBuf::new(self.partial_words(n) as usize * 4)?,
            y: DevBuf::new(x.len())?,
            n,
        };
        floor.upload(&b.x, x)?;
        Ok(b)
    }

    /// `f` over the launches of one run over `b` (the parameters as `norm_ptx` declares
    /// them: x, n, then the kernel's own).
    fn with_launches<T>(&self, b: &Buffers, f: impl FnOnce(&[Launch<'_>]) -> R<T>) -> R<T> {
        let grid = self.grid(b.n);
        let (x, n, y) = (Arg::Ptr(b.x.ptr), Arg::U32(b.n), Arg::Ptr(b.y.ptr));
        let (first, second) = (
            Arg::Ptr(b.partials.ptr),
            Arg::Ptr(b.partials.ptr + u64::from(grid) * 4),
        );
        let g = Arg::U32(grid);
        let k = &self.kernels;
        match self.kind {
            FloorKernel::RmsNorm | FloorKernel::LayerNorm => {
                let sums = [x, n, first];
                let apply = [x, n, first, y, g, Arg::F32(EPS)];
                f(&[(&k[0], grid, &sums), (&k[1], grid, &apply)])
            }
            FloorKernel::Softmax => {
                let maxes = [x, n, first];
                let sums = [x, n, first, second, g];
                let apply = [x, n, first, second, y, g];
                f(&[
                    (&k[0], grid, &maxes),
                    (&k[1], grid, &sums),
                    (&k[2], grid, &apply),
                ])
            }
            FloorKernel::PrefixSum => {
                let tiles = b.n / SCAN_TILE;
                let totals = [x, n, first];
                let offsets = [first, Arg::U32(tiles)];
                let apply = [x, n, first, y];
                f(&[
                    (&k[0], tiles, &totals),
                    (&k[1], 1, &offsets),
                    (&k[2], tiles, &apply),
                ])
            }
        }
    }

    /// The reduction of `x`, read back.
    fn run(&self, floor: &Floor, x: &[u8]) -> R<Vec<u8>> {
        let b = self.buffers(floor, x)?;
        self.with_launches(&b, |launches| floor.run_kernels(launches))?;
        let mut y = vec![0u8; x.len()];
        floor.download(&mut y, &b.y)?;
        Ok(y)
    }

    fn time(&self, floor: &Floor, b: &Buffers) -> R<Duration> {
        self.with_launches(b, |launches| floor.kernels_time(launches))
    }
}

#[cfg(test)]
mod tests {
    use super::super::build::{inputs, specs};
    use super::output_position;

    /// The output each floor is checked against is the workload's result: as long as the
    /// input, and for the scan its inclusive prefix sum.
    #[test]
    fn every_floor_checks_the_workloads_result() {
        for spec in specs().into_iter().filter(|s| s.floor.is_some()) {
            let program = (spec.build)(spec.small).unwrap();
            let data = inputs(&program, (spec.data)(spec.small)).unwrap();
            let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
            let outs = crate::programs::reference(&program, &refs).unwrap();
            let at = output_position(&program).expect("a buffer named output");
            assert_eq!(outs[at].len(), data[0].len(), "{}", spec.id);
            if spec.id == "libs_prefix_sum" {
                let words = |b: &[u8]| -> Vec<u32> {
                    b.chunks(4)
                        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
                        .collect()
                };
                let sums: Vec<u32> = (words(&data[0]).iter())
                    .scan(0u32, |acc, x| {
                        *acc = acc.wrapping_add(*x);
                        Some(*acc)
                    })
                    .collect();
                assert_eq!(words(&outs[at]), sums);
            }
        }
    }
}
