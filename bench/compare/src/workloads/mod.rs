//! The workloads, one module per family. [`list`] is the order they run in; a workload is
//! a function of the engines ([`Ctx`]) that pushes rows or diagnostics into a [`Sink`].

pub(crate) mod artifact;
mod cold_compile;
pub(crate) mod corpus;
mod diagnostics;
mod elementwise;
mod emit_corpus;
pub mod jit_probe;
mod latency;
pub(crate) mod libs;
mod reduce;
mod resident;
mod resident_sequence;
mod small_dispatch;
mod staging_sweep;

use crate::harness::{Ctx, Sink};
use elementwise::Shape;
use std::panic::AssertUnwindSafe;
use std::time::Instant;

/// How a workload runs: it times the engines of `Ctx` and pushes into the `Sink`.
type Run = Box<dyn Fn(&Ctx, &mut Sink)>;

/// One workload: its id (what `--only` selects by prefix) and how to run it.
pub struct Workload {
    pub id: String,
    run: Run,
}

fn workload(id: impl Into<String>, run: impl Fn(&Ctx, &mut Sink) + 'static) -> Workload {
    Workload {
        id: id.into(),
        run: Box::new(run),
    }
}

/// The workloads of this run, in order. Without a GPU only the emitter row and the artifact
/// rows (whose children report that they cannot open the device) run.
pub fn list(ctx: &Ctx) -> Vec<Workload> {
    let mut list = vec![
        workload("emit_ptx_corpus", emit_corpus::run),
        workload("tiny", latency::tiny),
        workload("warm_1024", latency::warm_1024),
    ];
    if !ctx.engines.any_open() {
        list.truncate(1);
        list.extend(artifact_workloads());
        return list;
    }
    let quick = ctx.opts.quick;
    let sizes: &[u32] = if quick { &[16, 20] } else { &[16, 20, 24, 26] };
    for &k in sizes {
        let id = format!("vadd_u32_2^{k}");
        let name = id.clone();
        list.push(workload(id, move |c, s| {
            elementwise::run(c, s, &name, Shape::Vadd, 1 << k)
        }));
    }
    let k = if quick { 20 } else { 24 };
    let id = format!("saxpy_f32_2^{k}");
    let name = id.clone();
    list.push(workload(id, move |c, s| {
        elementwise::run(c, s, &name, Shape::Saxpy, 1 << k)
    }));
    let user: &[u32] = if quick { &[20] } else { &[24, 26] };
    for &k in user {
        let id = format!("saxpy_user_f32_2^{k}");
        let name = id.clone();
        list.push(workload(id, move |c, s| {
            elementwise::run(c, s, &name, Shape::SaxpyUser, 1 << k)
        }));
        let id = format!("params_user_f32_2^{k}");
        let name = id.clone();
        list.push(workload(id, move |c, s| {
            elementwise::run(c, s, &name, Shape::ParamsUser, 1 << k)
        }));
    }
    let res: &[u32] = if quick { &[20] } else { &[24, 26] };
    for &k in res {
        let id = format!("resident_vadd_2^{k}");
        let name = id.clone();
        list.push(workload(id, move |c, s| resident::run(c, s, &name, 1 << k)));
    }
    list.push(workload("resident_sequence_100", resident_sequence::run));
    list.push(workload("small_dispatch_threshold", small_dispatch::run));
    list.push(workload("reduce_atomic_2^24", reduce::run));
    list.push(workload("cold_compile", cold_compile::run));
    list.extend(libs_workloads());
    // Diagnostics before the corpus: a corpus program that poisons the context (a sticky
    // error) must not take the floor's measurements with it.
    list.push(workload("diagnostics", diagnostics::run));
    list.push(workload("corpus", corpus::run));
    list.extend(artifact_workloads());
    // Probes that run only when `--only` names them.
    if ctx.named("jit_probe") {
        list.push(workload("jit_probe", jit_probe::run));
    }
    list
}

/// The vyre-libs workloads (`libs_*`): the roofline copy, then each workload's two rows.
fn libs_workloads() -> Vec<Workload> {
    let mut list = vec![workload("libs_hbm_copy", libs::hbm_copy)];
    for spec in libs::build::specs() {
        let id = spec.id;
        list.push(workload(id, move |c, s| libs::run(c, s, &spec)));
    }
    list
}

/// The artifact route's parts (issue 16): each engine runs in processes of its own, so
/// they run whether or not this process opened the engines.
fn artifact_workloads() -> Vec<Workload> {
    vec![
        workload("artifact_submit", artifact::submit),
        workload("artifact_cold", artifact::cold),
        workload("artifact_corpus", artifact::corpus),
        workload("artifact_chain", artifact::chain),
    ]
}

/// Run the workloads `--only` selects, skipping those that would start past the deadline;
/// a workload's panic is logged and the next one runs.
pub fn run_all(ctx: &Ctx, sink: &mut Sink, started: Instant) {
    let workloads = list(ctx);
    if !ctx.engines.any_open() && !artifact::only(ctx.opts.only.as_deref()) {
        sink.log("no GPU: only the emitter row and the artifact rows (engines in processes of their own) run".into());
    }
    let deadline = ctx.opts.deadline;
    for w in workloads {
        let id = w.id.as_str();
        if !ctx.wants(id) {
            continue;
        }
        if started.elapsed() > deadline {
            sink.log(format!(
                "{id}: SKIPPED (past the {} s deadline)",
                deadline.as_secs()
            ));
            continue;
        }
        let t = Instant::now();
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| (w.run)(ctx, sink)));
        if let Err(panic) = result {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            sink.log(format!("{id}: PANIC {msg}"));
        }
        sink.log(format!(
            "  ({id} took {:.1} s, {:.0} s total)",
            t.elapsed().as_secs_f64(),
            started.elapsed().as_secs_f64()
        ));
    }
}
