//! `small_dispatch_threshold` (diagnostics only): warm end-to-end vadd at sizes around
//! vyre-cuda's packed small-dispatch arena, once through a backend whose packed path takes
//! everything up to 256 KiB and once through one with it disabled, samples interleaved and
//! in blocks. Where the packed path stops winning is where its default belongs.

use crate::engines::vyre_cuda::open_with;
use crate::harness::{Ctx, Sink};
use crate::programs::{self, Rng, SALT};
use crate::report::Stats;
use std::collections::BTreeMap;
use std::time::Instant;
use vyre_cuda::CudaBackend;

pub fn run(ctx: &Ctx, sink: &mut Sink) {
    let open = |bytes: usize| open_with(|options| options.small_dispatch_bytes = bytes);
    let (packed, general) = match (open(256 << 10), open(0)) {
        (Ok(p), Ok(g)) => (p, g),
        (Err(e), _) | (_, Err(e)) => return sink.log(format!("small_dispatch_threshold: {e}")),
    };
    let mut diag = BTreeMap::new();
    for n in [1usize, 1024, 2048, 4096, 8192, 12288, 16384] {
        if let Err(line) = one_size(ctx, sink, [&packed, &general], n, &mut diag) {
            return sink.log(line);
        }
    }
    sink.diagnostics("small_dispatch_threshold", diag);
}

/// Both backends on an `n`-element vadd, interleaved then in blocks; Err: the line to log.
fn one_size(
    ctx: &Ctx,
    sink: &mut Sink,
    engines: [&CudaBackend; 2],
    n: usize,
    diag: &mut BTreeMap<String, f64>,
) -> Result<(), String> {
    let program = programs::vadd(n as u32, SALT);
    let mut rng = Rng::new(n as u64 + 7);
    let (a, b) = (rng.u32_bytes(n), rng.u32_bytes(n));
    let inputs = [a.as_slice(), b.as_slice()];
    let want = programs::reference(&program, &inputs)
        .map_err(|e| format!("small_dispatch_threshold: reference: {e}"))?;
    let mut outs = [Vec::new(), Vec::new()];
    let dispatch = |k: usize, out: &mut Vec<Vec<u8>>| {
        engines[k]
            .dispatch_borrowed_into(&program, &inputs, &ctx.config, out)
            .map_err(|e| format!("small_dispatch_threshold n={n}: {e}"))
    };
    let mut samples: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..ctx.samples(400) + 30 {
        for (k, out) in outs.iter_mut().enumerate() {
            let t = Instant::now();
            dispatch(k, out)?;
            if round >= 30 {
                samples[k].push(t.elapsed().as_secs_f64() * 1e9);
            }
        }
    }
    let (bp, bg) = blocked(&dispatch, &mut outs)?;
    diag.insert(format!("n{n}_packed_blocked_median_ns"), bp);
    diag.insert(format!("n{n}_general_blocked_median_ns"), bg);
    sink.log(format!(
        "small_dispatch_threshold: vadd n={n} in blocks: packed {:.2} us, general {:.2} us, packed/general {:.3}",
        bp / 1e3,
        bg / 1e3,
        bp / bg
    ));
    if outs[0] != want || outs[1] != want {
        return Err(format!(
            "small_dispatch_threshold n={n}: output differs from the reference"
        ));
    }
    let arena = 3 * (4 * n).next_multiple_of(256) + 256;
    let [p, g] = samples.map(|mut v| Stats::from_ns(&mut v).median_ns);
    sink.log(format!(
        "small_dispatch_threshold: vadd n={n} (arena {arena} B): packed {:.2} us, general {:.2} us, packed/general {:.3}",
        p / 1e3,
        g / 1e3,
        p / g
    ));
    diag.insert(format!("n{n}_arena_bytes"), arena as f64);
    diag.insert(format!("n{n}_packed_median_ns"), p);
    diag.insert(format!("n{n}_general_median_ns"), g);
    Ok(())
}

/// The same in blocks (110 of one engine, the first 10 untimed, then 110 of the other,
/// four times): no engine runs right after the other. Medians (packed, general).
fn blocked(
    dispatch: &impl Fn(usize, &mut Vec<Vec<u8>>) -> Result<(), String>,
    outs: &mut [Vec<Vec<u8>>; 2],
) -> Result<(f64, f64), String> {
    let mut blocked: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..4 {
        for (k, out) in outs.iter_mut().enumerate() {
            for sample in 0..110 {
                let t = Instant::now();
                dispatch(k, out)?;
                if sample >= 10 {
                    blocked[k].push(t.elapsed().as_secs_f64() * 1e9);
                }
            }
        }
    }
    let [bp, bg] = blocked.map(|mut v| Stats::from_ns(&mut v).median_ns);
    Ok((bp, bg))
}
