//! `--staging-sweep`: vyre-cuda's end-to-end median under other staging chunk sizes and
//! copy-thread counts (fresh backends; each checked before timing). Extra keys `sweep.*`.

use crate::engines::vyre_cuda::open_with;
use crate::harness::{Ctx, Sink};
use crate::measure::{e2e_on, E2e};
use crate::report::{Outcome, Row};
use std::collections::BTreeMap;

/// The sweep's medians by key (empty without `--staging-sweep`).
pub fn sweep(ctx: &Ctx, job: &E2e<'_>, samples: usize) -> BTreeMap<String, f64> {
    let mut found = BTreeMap::new();
    if !ctx.opts.staging_sweep {
        return found;
    }
    for chunk_kib in [256usize, 512, 1024, 2048, 4096] {
        for threads in [4usize, 8, 15] {
            let key = format!("sweep.chunk_{chunk_kib}k.threads_{threads}.median_ns");
            let outcome = open_with(|options| {
                options.staging_chunk_bytes = chunk_kib << 10;
                options.copy_threads = threads;
            })
            .map(|backend| e2e_on(&backend, job, &ctx.config, ctx.sampling(2, samples)));
            match outcome {
                Ok(Outcome::Ok { stats, .. }) => {
                    found.insert(key, stats.median_ns);
                }
                Ok(Outcome::Fail { reason } | Outcome::Unsupported { reason }) | Err(reason) => {
                    found.insert(format!("{key}.error: {reason}"), 0.0);
                }
            }
        }
    }
    found
}

/// Adds sweep results to vyre-cuda's outcome in `row` and logs them.
pub fn attach(sink: &mut Sink, row: &mut Row, sweep: BTreeMap<String, f64>) {
    for (k, v) in &sweep {
        sink.log(format!("    {} {k} = {v:.0}", row.id));
    }
    if let Some(Outcome::Ok { extra, .. }) = row.engines.get_mut("vyre-cuda") {
        extra.extend(sweep);
    }
}
