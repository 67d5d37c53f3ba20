//! The oracles: vyre's validator, `vyre-reference` (forward and lane-reversed, to discard
//! programs whose result depends on lane order), panic capture, and output comparison.

use super::case::FuzzCase;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;
use vyre_foundation::ir::Program;
use vyre_foundation::validate::{
    validate::validate_with_options, BackendCapabilities, ValidationOptions,
};
use vyre_reference::value::Value;

/// vyre's validator with the options the reference and the backend use: the defaults
/// plus subgroup operations (vyre-reference's default `subgroup-ops` feature runs them,
/// and `backend::validated` allows them), so the generator's subgroup programs are
/// judged as the reference judges them.
pub fn validate(program: &Program) -> Result<(), String> {
    let options = ValidationOptions::default().with_backend_capabilities(BackendCapabilities {
        supports_subgroup_ops: true,
        ..Default::default()
    });
    let report = validate_with_options(program, options);
    if report.errors.is_empty() {
        Ok(())
    } else {
        Err(report
            .errors
            .iter()
            .map(|e| e.message().to_string())
            .collect::<Vec<_>>()
            .join("; "))
    }
}

/// The outcome of running something that may fail or panic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok(Vec<Vec<u8>>),
    Err(String),
    Panic(String),
}

impl Outcome {
    pub fn is_ok(&self) -> bool {
        matches!(self, Self::Ok(_))
    }

    pub fn label(&self) -> &'static str {
        match self {
            Self::Ok(_) => "ok",
            Self::Err(_) => "error",
            Self::Panic(_) => "panic",
        }
    }
}

/// Run `f`, turning a panic into `Err(message)`.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_quiet_panic_hook();
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "panic with a non-string payload".to_string()
        }
    })
}

thread_local! {
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Panics inside [`catch`] are expected fuzz findings: keep them off stderr (they are
/// reported with the program instead). Panics elsewhere still print.
fn install_quiet_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(|q| q.get()) {
                previous(info);
            }
        }));
    });
}

/// [`catch`] with this thread's panic output suppressed.
pub fn catch_quiet<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_quiet_panic_hook();
    QUIET.with(|q| q.set(true));
    let result = catch(f);
    QUIET.with(|q| q.set(false));
    result
}

fn values(inputs: &[Vec<u8>]) -> Vec<Value> {
    inputs.iter().cloned().map(Value::from).collect()
}

fn bytes(outputs: Vec<Value>) -> Vec<Vec<u8>> {
    outputs.iter().map(Value::to_bytes).collect()
}

/// `vyre_reference::reference_eval` (or its dispatch-floor variant when the config sets
/// `dispatch_elements`).
pub fn reference(case: &FuzzCase) -> Outcome {
    let inputs = values(&case.inputs);
    let floor = case.config.dispatch_elements.unwrap_or(0);
    match catch_quiet(|| {
        if floor == 0 {
            vyre_reference::reference_eval(&case.program, &inputs)
        } else {
            vyre_reference::reference_eval_with_dispatch(&case.program, &inputs, floor)
        }
        .map_err(|e| e.to_string())
    }) {
        Ok(Ok(out)) => Outcome::Ok(bytes(out)),
        Ok(Err(e)) => Outcome::Err(e),
        Err(p) => Outcome::Panic(p),
    }
}

/// `vyre_reference::reference_eval_lane_reversed`.
pub fn reference_reversed(case: &FuzzCase) -> Outcome {
    let inputs = values(&case.inputs);
    match catch_quiet(|| {
        vyre_reference::reference_eval_lane_reversed(&case.program, &inputs)
            .map_err(|e| e.to_string())
    }) {
        Ok(Ok(out)) => Outcome::Ok(bytes(out)),
        Ok(Err(e)) => Outcome::Err(e),
        Err(p) => Outcome::Panic(p),
    }
}

/// What the reference says about a case.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub outcome: Outcome,
    /// Forward and lane-reversed runs disagree: the result depends on lane order, so no
    /// GPU is required to reproduce it (the case is discarded).
    pub lane_order_dependent: bool,
}

/// Run the reference forward, and — when it succeeds — lane-reversed too.
pub fn judge(case: &FuzzCase) -> Verdict {
    let outcome = reference(case);
    let lane_order_dependent = match &outcome {
        Outcome::Ok(forward) => {
            // The reversed order only exists for the plain grid.
            case.config.dispatch_elements.is_none()
                && match reference_reversed(case) {
                    Outcome::Ok(reversed) => &reversed != forward,
                    _ => true,
                }
        }
        _ => false,
    };
    Verdict {
        outcome,
        lane_order_dependent,
    }
}

/// A short description of the first difference between two output sets.
pub fn first_difference(program: &Program, want: &[Vec<u8>], got: &[Vec<u8>]) -> String {
    if want.len() != got.len() {
        return format!("{} outputs expected, {} returned", want.len(), got.len());
    }
    let outputs: Vec<_> = program
        .buffers()
        .iter()
        .filter(|d| vyre_reference::is_reference_output(d))
        .collect();
    for (index, (w, g)) in want.iter().zip(got).enumerate() {
        let name = outputs
            .get(index)
            .map_or_else(|| format!("output {index}"), |d| d.name().to_string());
        if w.len() != g.len() {
            return format!("{name}: {} bytes expected, {} returned", w.len(), g.len());
        }
        let element = outputs
            .get(index)
            .map_or(vyre_foundation::ir::DataType::U32, |d| d.element());
        let size = super::values::element_size(&element);
        if let Some(at) = w.iter().zip(g.iter()).position(|(a, b)| a != b) {
            let start = at / size * size;
            let end = (start + size).min(w.len());
            let differing = w
                .chunks(size)
                .zip(g.chunks(size))
                .filter(|(a, b)| a != b)
                .count();
            return format!(
                "{name}[{}] ({element}): expected {} got {} ({differing} of {} elements differ)",
                start / size,
                super::case::describe_bytes(&element, &w[start..end]),
                super::case::describe_bytes(&element, &g[start..end]),
                w.len() / size
            );
        }
    }
    "no difference".into()
}
