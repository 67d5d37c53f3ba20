//! The engines under comparison, behind one interface ([`Engine`]). An engine is a module
//! here: it opens itself on the device, names itself, and says what it can do (an emitter,
//! device PTX, vyre's backend API). The floor also has hand-written kernels; a workload
//! that times it calls them through [`floor::FloorEngine::device`].

pub mod floor;
pub mod incumbent;
pub mod vyre_cuda;

use crate::cli::Opts;
use crate::measure::R;
use floor::FloorEngine;
use incumbent::Incumbent;
use vyre_cuda::VyreCuda;
use vyre_driver::{DispatchConfig, VyreBackend};
use vyre_foundation::ir::Program;

/// One engine under comparison.
pub trait Engine {
    /// Its key in the report's rows: `floor`, `incumbent`, `vyre-cuda`.
    fn name(&self) -> &'static str;

    /// Compile, on the host: what [`Engine::emit_ptx`] calls (for notes), or why the
    /// engine has no emitter.
    fn emitter(&self) -> Result<String, String>;

    /// Compile, on the host (no device needed): its emitter's PTX for `program`.
    fn emit_ptx(&self, program: &Program, config: &DispatchConfig) -> R<String>;

    /// Compile for the opened device: the module text a dispatch of `program` hands the driver's
    /// JIT (vyre-cuda's vector entry, when there is one, is a module of its own);
    /// `None` where the engine cannot here (no emitter, or the device did not open).
    fn device_ptx(&self, program: &Program, config: &DispatchConfig) -> Option<R<String>>;

    /// Run: vyre's backend interface (borrowed, timed and resident dispatches, metrics),
    /// when the engine runs vyre Programs and opened on the device.
    fn backend(&self) -> Option<&dyn VyreBackend>;

    /// Run: the `DispatchConfig` this engine's users must pass for `program`: `base`, plus
    /// what the engine requires of that program (the incumbent: a positive `ulp_budget` for
    /// transcendental ops). Workloads that run many programs ask once per program, outside
    /// the timed region.
    fn config_for(&self, _program: &Program, base: &DispatchConfig) -> DispatchConfig {
        base.clone()
    }

    /// What [`Engine::config_for`] adds, for the notes; `None` when it adds nothing.
    fn config_needs(&self) -> Option<String> {
        None
    }

    /// Run: one end-to-end borrowed dispatch of `program`, outputs into `out`.
    fn dispatch(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        config: &DispatchConfig,
        out: &mut Vec<Vec<u8>>,
    ) -> R<()> {
        self.backend()
            .ok_or_else(|| "engine not available".to_string())?
            .dispatch_borrowed_into(program, inputs, config, out)
            .map_err(|err| err.to_string())
    }
}

/// The three engines of this harness.
pub struct Engines {
    pub floor: FloorEngine,
    pub ours: VyreCuda,
    pub inc: Incumbent,
}

impl Engines {
    /// Open every engine on device 0, logging what each found. Order matters: with
    /// `--blocking-sync` the primary context's flags are set before anyone retains it;
    /// vyre-cuda opens first, so its own driver defaults (applied before `cuInit`) take
    /// effect as they would in a program of its own; the incumbent compiles for the
    /// floor's compute capability.
    pub fn open(opts: &Opts, log: &mut Vec<String>) -> Self {
        if opts.blocking_sync {
            // Every wait then blocks the thread instead of spinning, so thread CPU time
            // is the host's own work.
            match floor::driver::set_blocking_sync(0) {
                Ok(()) => log.push("primary context: CU_CTX_SCHED_BLOCKING_SYNC".to_string()),
                Err(e) => log.push(format!("--blocking-sync failed: {e}")),
            }
        }
        let ours = VyreCuda::open(opts.ours_blocking_wait, log);
        let floor = FloorEngine::open(log);
        let inc = Incumbent::open(floor.sm().unwrap_or(90), log);
        Self { floor, ours, inc }
    }

    /// No engine opened (every workload that runs then starts its own processes).
    pub fn unopened() -> Self {
        Self {
            floor: FloorEngine::unopened(),
            ours: VyreCuda::unopened(),
            inc: Incumbent::unopened(),
        }
    }

    /// Every engine, in the order of every row: the floor, vyre-cuda, the incumbent.
    pub fn all(&self) -> [&dyn Engine; 3] {
        [&self.floor, &self.ours, &self.inc]
    }

    /// The engines that run vyre Programs, in the order the rows time them.
    pub fn vyre(&self) -> [&dyn Engine; 2] {
        [&self.ours, &self.inc]
    }

    /// Whether any engine opened the device.
    pub fn any_open(&self) -> bool {
        self.floor.get().is_some() || self.ours.get().is_some() || self.inc.backend().is_some()
    }

    /// Close in order: the floor's primary-context retain goes before the backends', then
    /// the incumbent, then vyre-cuda.
    pub fn close(self) {
        let Self { floor, ours, inc } = self;
        drop(floor);
        drop(inc);
        drop(ours);
    }
}
