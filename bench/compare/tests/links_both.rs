//! vyre-cuda and vyre-driver-cuda 0.7.2 linked into one binary keep vyre's backend
//! registry valid: vyre 0.7 fails every registry call when two registrations share an id or
//! a target id, so vyre-cuda registers as `"vyre-cuda"` (rank 4) beside vyre-driver-cuda's
//! `"cuda"` (rank 5).
//!
//! Without a CUDA device the registry half runs in full and every acquire must fail with an
//! error that says how to fix it; the GPU half prints `skipped: no CUDA device` and passes.
//! `VYRE_CUDA_REQUIRE_GPU=1` turns a missing device into a failure. With a device both
//! backends are acquired through the registry and run the same programs: vyre-cuda's
//! outputs must be byte-identical to vyre-reference 0.7.2; the incumbent's are compared and
//! printed, not asserted. `acquire_preferred_dispatch_backend` must pick vyre-cuda unless
//! vyre-driver-cuda outscores it on the device facts vyre-driver ranks by (printed).
//!
//! vyre-driver-cuda 0.7.2 panics (cudarc's dynamic loading) where libcuda cannot be loaded,
//! inside `acquire("cuda")` and so inside `acquire_preferred_dispatch_backend`; the tests
//! catch that panic and print a note.

#[allow(dead_code)]
#[path = "../src/programs.rs"]
mod programs;

use programs::Rng;
use std::panic::AssertUnwindSafe;
use vyre_cuda::{BACKEND_ID, TARGET_ID};
use vyre_driver::backend::{
    acquire, acquire_preferred_dispatch_backend, backend_dispatches, backend_precedence,
    backend_registration, registered_backends, registered_backends_by_precedence,
};
use vyre_driver::{DeviceProfile, DeviceTimingQuality, DispatchConfig, VyreBackend};
use vyre_foundation::ir::Program;
// A crate registers with vyre's registry only when it is linked.
use vyre_driver_cuda as _;
use vyre_libs as _;
use vyre_primitives as _;

/// vyre-driver-cuda 0.7.2's backend id and target id.
const INCUMBENT_ID: &str = "cuda";

fn require_gpu() -> bool {
    std::env::var("VYRE_CUDA_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// The text of the panic vyre-driver-cuda 0.7.2 raises where libcuda cannot be loaded:
/// cudarc's dynamic loading panics instead of returning an error, inside `acquire("cuda")`
/// and so inside `acquire_preferred_dispatch_backend`.
const CUDARC_NO_LIBCUDA: &str = "Unable to dynamically load the \"cuda\" shared library";

/// A panic's text.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// `f`, with a panic turned into `Err("panicked: ...")`. The known cudarc panic is kept out
/// of the panic hook's output (it is printed by the tests as a note); every other panic is
/// reported as usual.
fn catching<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !panic_text(info.payload()).contains(CUDARC_NO_LIBCUDA) {
                previous(info);
            }
        }));
    });
    std::panic::catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|panic| Err(format!("panicked: {}", panic_text(&*panic))))
}

/// `acquire(id)`, with its error (or panic) as text.
fn acquire_text(id: &str) -> Result<Box<dyn VyreBackend>, String> {
    catching(|| acquire(id).map_err(|e| e.to_string()))
}

/// Checks a failed acquire's text: vyre-cuda's must carry exactly one `Fix:`;
/// vyre-driver-cuda's must carry one, or be cudarc's panic where libcuda is missing (noted).
fn check_failure(id: &str, text: &str) {
    if id == BACKEND_ID {
        assert_eq!(text.matches("Fix:").count(), 1, "{id}: {text}");
    } else if text.starts_with("panicked: ") && text.contains(CUDARC_NO_LIBCUDA) {
        println!(
            "NOTE: {id} (vyre-driver-cuda 0.7.2) panics instead of failing where libcuda cannot be \
             loaded (cudarc dynamic loading); caught here"
        );
    } else {
        assert!(text.contains("Fix:"), "{id}: {text}");
    }
}

/// Both backends through the registry, or `None` after printing why (the skip line when
/// there is no device). A device that vyre-cuda opens but the incumbent does not is a
/// failure; so is no device under `VYRE_CUDA_REQUIRE_GPU=1`.
fn both() -> Option<(Box<dyn VyreBackend>, Box<dyn VyreBackend>)> {
    match (acquire_text(BACKEND_ID), acquire_text(INCUMBENT_ID)) {
        (Ok(ours), Ok(theirs)) => Some((ours, theirs)),
        (Err(ours), Err(theirs)) => {
            if require_gpu() {
                panic!("VYRE_CUDA_REQUIRE_GPU=1 but no CUDA device could be opened: vyre-cuda: {ours}; cuda: {theirs}");
            }
            println!("skipped: no CUDA device");
            None
        }
        (Ok(_), Err(theirs)) => panic!("vyre-cuda acquired, vyre-driver-cuda did not: {theirs}"),
        (Err(ours), Ok(_)) => panic!("vyre-driver-cuda acquired, vyre-cuda did not: {ours}"),
    }
}

#[test]
fn both_register_and_the_registry_stays_valid() {
    let registrations = registered_backends().expect("a valid registry with both linked");
    let ids: Vec<&str> = registrations.iter().map(|r| r.id).collect();
    println!("registered backends: {ids:?}");
    assert!(ids.contains(&BACKEND_ID), "{ids:?}");
    assert!(ids.contains(&INCUMBENT_ID), "{ids:?}");

    let ours = backend_registration(BACKEND_ID).expect("vyre-cuda's registration");
    assert_eq!(ours.id, BACKEND_ID);
    assert_eq!(ours.target_id.as_str(), TARGET_ID);
    assert!(!ours.reference_oracle);
    let theirs = backend_registration(INCUMBENT_ID).expect("vyre-driver-cuda's registration");
    assert_eq!(theirs.id, INCUMBENT_ID);
    assert_eq!(theirs.target_id.as_str(), INCUMBENT_ID);
    assert_eq!(theirs.payload_format, Some("ptx"));
    assert_ne!(ours.target_id.as_str(), theirs.target_id.as_str());

    assert_eq!(backend_precedence(BACKEND_ID), Ok(4));
    assert_eq!(backend_precedence(INCUMBENT_ID), Ok(5));
    assert_eq!(backend_dispatches(BACKEND_ID), Ok(true));
    assert_eq!(backend_dispatches(INCUMBENT_ID), Ok(true));
    let order: Vec<&str> = registered_backends_by_precedence()
        .expect("precedence order")
        .iter()
        .map(|r| r.id)
        .collect();
    println!("precedence order: {order:?}");
    let at = |id: &str| order.iter().position(|&x| x == id).expect(id);
    assert!(at(BACKEND_ID) < at(INCUMBENT_ID), "{order:?}");
}

#[test]
fn both_acquire_or_explain_why_not() {
    let ours = acquire_text(BACKEND_ID);
    let theirs = acquire_text(INCUMBENT_ID);
    for (id, result) in [(BACKEND_ID, &ours), (INCUMBENT_ID, &theirs)] {
        match result {
            Ok(backend) => {
                println!("acquire(\"{id}\"): ok, backend id {}", backend.id());
                assert_eq!(backend.id(), id);
            }
            Err(text) => {
                println!("acquire(\"{id}\"): {text}");
                check_failure(id, text);
            }
        }
    }
    match (&ours, &theirs) {
        (Ok(_), Ok(_)) => {}
        (Err(_), Err(_)) if !require_gpu() => println!("skipped: no CUDA device"),
        _ => panic!(
            "vyre-cuda {} / vyre-driver-cuda {} (VYRE_CUDA_REQUIRE_GPU={})",
            if ours.is_ok() { "acquired" } else { "failed" },
            if theirs.is_ok() { "acquired" } else { "failed" },
            require_gpu()
        ),
    }
}

/// One program with its inputs.
struct Job {
    name: String,
    program: Program,
    inputs: Vec<Vec<u8>>,
}

/// An elementwise u32 and f32 program, a reduction, and vyre-primitives / vyre-libs
/// fixtures (two with `Tanh` / `Exp`, which the incumbent runs only with a ULP budget).
fn jobs() -> Vec<Job> {
    let mut rng = Rng::new(7);
    let n = 1 << 16;
    let mut jobs = vec![
        Job {
            name: "vadd_u32_2^16".into(),
            program: programs::vadd(n as u32, programs::SALT),
            inputs: vec![rng.u32_bytes(n), rng.u32_bytes(n)],
        },
        Job {
            name: "saxpy_f32_2^16".into(),
            program: programs::saxpy(n as u32),
            inputs: vec![rng.f32_bytes(n), rng.f32_bytes(n)],
        },
        Job {
            name: "reduce_atomic_2^16".into(),
            program: programs::reduce_atomic(n as u32),
            inputs: vec![rng.u32_bytes(n)],
        },
    ];
    let registry = vyre_foundation::operation::OperationRegistry::global();
    for id in FIXTURES {
        let entry = registry
            .iter()
            .find(|e| e.id == *id)
            .unwrap_or_else(|| panic!("fixture {id} is not registered"));
        let build = entry.build.expect("a program builder");
        let inputs = entry.test_inputs.expect("fixture inputs");
        for (k, case) in inputs().into_iter().enumerate() {
            jobs.push(Job {
                name: format!("{id} #{k}"),
                program: build(),
                inputs: case,
            });
        }
    }
    jobs
}

/// The fixtures both backends run (ids in vyre's `OperationRegistry`).
const FIXTURES: &[&str] = &[
    "vyre-libs::math::clamp_u32",
    "vyre-libs::math::matmul",
    "vyre-primitives::reduce::workgroup_sum_u32",
    "vyre-libs::nn::gelu",
    "vyre-libs::nn::silu",
];

/// The jobs exist (every fixture id is registered, with inputs) and vyre-reference runs
/// each: no device needed.
#[test]
fn the_jobs_run_on_the_reference() {
    for job in jobs() {
        let borrowed: Vec<&[u8]> = job.inputs.iter().map(Vec::as_slice).collect();
        let want = programs::reference(&job.program, &borrowed)
            .unwrap_or_else(|e| panic!("{}: the reference fails: {e}", job.name));
        println!(
            "{}: {} outputs from the reference; needs a ULP budget on vyre-driver-cuda: {}",
            job.name,
            want.len(),
            programs::needs_ulp_budget(&job.program)
        );
    }
}

#[test]
fn both_dispatch_and_vyre_cuda_matches_the_reference() {
    let Some((ours, theirs)) = both() else {
        return;
    };
    let strict = DispatchConfig::default();
    let mut failures = Vec::new();
    for job in jobs() {
        let want = {
            let borrowed: Vec<&[u8]> = job.inputs.iter().map(Vec::as_slice).collect();
            programs::reference(&job.program, &borrowed)
                .unwrap_or_else(|e| panic!("{}: the reference fails: {e}", job.name))
        };
        let got = ours.dispatch(&job.program, &job.inputs, &strict);
        let ours_line = match &got {
            Ok(got) if *got == want => "byte-identical".to_string(),
            Ok(got) => {
                failures.push(job.name.clone());
                format!("DIFFERS ({})", first_difference(got, &want))
            }
            Err(e) => {
                failures.push(job.name.clone());
                format!("ERROR {e}")
            }
        };
        // The incumbent as its users must call it: a positive ULP budget for programs
        // with ops it lowers only approximately.
        let mut config = DispatchConfig::default();
        if programs::needs_ulp_budget(&job.program) {
            config.ulp_budget = Some(1);
        }
        let theirs_line = match theirs.dispatch(&job.program, &job.inputs, &config) {
            Ok(got) if got == want => "byte-identical".to_string(),
            Ok(got) => format!("differs ({})", first_difference(&got, &want)),
            Err(e) => format!("error {e}"),
        };
        println!(
            "{}: vyre-cuda {ours_line}; vyre-driver-cuda (ulp_budget {:?}) {theirs_line}",
            job.name, config.ulp_budget
        );
    }
    assert!(
        failures.is_empty(),
        "vyre-cuda differs from vyre-reference on {failures:?}"
    );
}

/// Where two output lists first differ.
fn first_difference(got: &[Vec<u8>], want: &[Vec<u8>]) -> String {
    if got.len() != want.len() {
        return format!("{} outputs, the reference has {}", got.len(), want.len());
    }
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        if g.len() != w.len() {
            return format!(
                "output {k}: {} bytes, the reference has {}",
                g.len(),
                w.len()
            );
        }
        if let Some(i) = g.iter().zip(w).position(|(a, b)| a != b) {
            let word = |b: &[u8]| {
                let s = i / 4 * 4;
                b.get(s..s + 4)
                    .map(|x| format!("{:#010x}", u32::from_le_bytes([x[0], x[1], x[2], x[3]])))
                    .unwrap_or_default()
            };
            return format!(
                "output {k} word {}: got {} want {}",
                i / 4,
                word(g),
                word(w)
            );
        }
    }
    "equal".into()
}

/// What `acquire_preferred_dispatch_backend` ranks candidates by
/// (reg:vyre-driver-0.7.2/src/backend/registry/acquire.rs, `BackendSelectionFacts`,
/// `compare_backend_selection_facts`, `backend_capability_score`, `timing_quality_score`;
/// private there, restated here): capability score, then timing quality, then memory
/// bandwidth, all higher first, then precedence rank, lower first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Facts {
    capability_score: u32,
    timing_quality: u32,
    mem_bw_gbps: u32,
    /// `u32::MAX - rank`, so that a higher key wins on every field.
    precedence_key: u32,
}

fn facts(profile: &DeviceProfile, rank: u32) -> Facts {
    Facts {
        capability_score: capability_terms(profile).iter().map(|(_, s)| s).sum(),
        timing_quality: match profile.timing_quality {
            DeviceTimingQuality::HostOnly => 0,
            DeviceTimingQuality::HostEnqueueWait => 1,
            DeviceTimingQuality::DeviceTimestamps => 2,
            DeviceTimingQuality::HardwareCounters => 3,
        },
        mem_bw_gbps: profile.mem_bw_gbps,
        precedence_key: u32::MAX - rank,
    }
}

/// The terms of vyre-driver 0.7.2's `backend_capability_score` a profile earns.
fn capability_terms(p: &DeviceProfile) -> Vec<(&'static str, u32)> {
    let terms = [
        (
            "max_storage_buffer_binding_size > 0",
            p.max_storage_buffer_binding_size > 0,
            16,
        ),
        (
            "max_invocations_per_workgroup >= 64",
            p.max_invocations_per_workgroup >= 64,
            8,
        ),
        (
            "max_invocations_per_workgroup >= 256",
            p.max_invocations_per_workgroup >= 256,
            4,
        ),
        ("subgroup_size > 0", p.subgroup_size > 0, 8),
        ("supports_subgroup_ops", p.supports_subgroup_ops, 8),
        ("has_subgroup_shuffle", p.has_subgroup_shuffle, 4),
        ("has_shared_memory", p.has_shared_memory, 4),
        ("supports_f16", p.supports_f16, 2),
        ("supports_bf16", p.supports_bf16, 2),
        ("supports_tensor_cores", p.supports_tensor_cores, 4),
        (
            "supports_indirect_dispatch",
            p.supports_indirect_dispatch,
            2,
        ),
        (
            "supports_device_timestamps",
            p.supports_device_timestamps,
            2,
        ),
        (
            "supports_hardware_counters",
            p.supports_hardware_counters,
            2,
        ),
    ];
    terms
        .into_iter()
        .filter(|(_, on, _)| *on)
        .map(|(name, _, score)| (name, score))
        .collect()
}

/// With a device: `acquire_preferred_dispatch_backend` picks vyre-cuda, unless the device
/// facts vyre-driver ranks by make vyre-driver-cuda win honestly; then the test prints why
/// (the capability terms only it earns) and asserts that the pick follows those facts.
/// Without a device: it fails, and says how to fix it.
#[test]
fn acquire_preferred_dispatch_backend_picks_vyre_cuda_unless_outscored() {
    let Some((ours, theirs)) = both() else {
        // Without a device it must fail: vyre-cuda (rank 4) is tried first and fails
        // cleanly; vyre-driver-cuda then fails too, or panics where libcuda is missing.
        let error = catching(|| {
            acquire_preferred_dispatch_backend()
                .map(|b| b.id().to_string())
                .map_err(|e| e.to_string())
        })
        .expect_err("no device, yet a backend was acquired");
        println!("acquire_preferred_dispatch_backend(): {error}");
        if error.starts_with("panicked: ") {
            check_failure(INCUMBENT_ID, &error);
        } else {
            assert!(error.contains(BACKEND_ID), "{error}");
            assert!(error.contains("Fix:"), "{error}");
        }
        return;
    };
    let ours_facts = facts(&ours.device_profile(), 4);
    let theirs_facts = facts(&theirs.device_profile(), 5);
    println!("vyre-cuda:        {ours_facts:?}");
    println!("vyre-driver-cuda: {theirs_facts:?}");
    let ours_terms = capability_terms(&ours.device_profile());
    let theirs_terms = capability_terms(&theirs.device_profile());
    let only_theirs: Vec<_> = theirs_terms
        .iter()
        .filter(|t| !ours_terms.contains(t))
        .collect();
    let only_ours: Vec<_> = ours_terms
        .iter()
        .filter(|t| !theirs_terms.contains(t))
        .collect();
    println!("capability terms only vyre-driver-cuda earns: {only_theirs:?}");
    println!("capability terms only vyre-cuda earns: {only_ours:?}");
    drop((ours, theirs));

    let picked = acquire_preferred_dispatch_backend().expect("a preferred backend");
    let picked = picked.id().to_string();
    println!("acquire_preferred_dispatch_backend() picked \"{picked}\"");
    let predicted = if ours_facts > theirs_facts {
        BACKEND_ID
    } else {
        INCUMBENT_ID
    };
    assert_eq!(
        picked, predicted,
        "the pick disagrees with vyre-driver 0.7.2's documented ordering"
    );
    if predicted == INCUMBENT_ID {
        // An honest loss on the device's own facts: reported, not papered over.
        println!(
            "NOTE: vyre-cuda loses acquire_preferred_dispatch_backend on these facts: \
             vyre-driver-cuda {theirs_facts:?} ranks above vyre-cuda {ours_facts:?} \
             (terms only it earns: {only_theirs:?}); precedence (rank 4 vs 5) only breaks ties"
        );
    } else {
        assert_eq!(picked, BACKEND_ID);
    }
}
