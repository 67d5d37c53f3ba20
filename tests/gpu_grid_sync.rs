//! GPU: programs with grid-wide barriers are byte-identical to vyre-reference on both
//! launch paths (one cooperative launch, and one launch per segment), fail like it on a
//! fault without hanging (a program whose faulting lane its workgroup would wait for in
//! the cooperative entry launches split), fall back to the split path when the grid
//! cannot be resident, and run inside captured sequences. The telemetry counters prove
//! which path ran.

mod common;

use common::gpu::{backend, reference};
use common::grid_programs::{self, GridCase};
use vyre_cuda::{CudaBackend, CudaOptions};
use vyre_driver::{DispatchConfig, ResidentDispatchStep, ResidentReadRange, VyreBackend};

const COOPERATIVE: &str = "vyre_cuda_grid_sync_cooperative_launches_total";
const SPLIT: &str = "vyre_cuda_grid_sync_split_launches_total";
const MODULE_LOADS: &str = "vyre_cuda_module_loads_total";

fn split_backend() -> CudaBackend {
    let mut options = CudaOptions::from_env().unwrap();
    options.split_grid_sync = true;
    CudaBackend::with_options(options).unwrap()
}

/// Runs `case` on `backend` against the reference; returns the (cooperative, split)
/// counter increments.
fn check(backend: &CudaBackend, case: &GridCase) -> (u64, u64) {
    let (coop, split) = (backend.metric(COOPERATIVE), backend.metric(SPLIT));
    let want = reference(&case.program, &case.inputs);
    let got = backend.dispatch(&case.program, &case.inputs, &DispatchConfig::default());
    match (&want, &got) {
        (Ok(want), Ok(got)) => assert!(
            want == got,
            "{}: bytes differ from the reference",
            case.name
        ),
        (Err(want), Err(got)) => {
            assert!(case.expect_error, "{}: unexpected failure {got}", case.name);
            assert!(
                got.to_string().matches("Fix:").count() == 1,
                "{}: {got}",
                case.name
            );
            println!("{}: reference `{want}`, gpu `{got}`", case.name);
        }
        (want, got) => panic!(
            "{}: reference {:?} vs gpu {:?}",
            case.name,
            want.as_ref().map(|_| "ok"),
            got.as_ref().map(|_| "ok")
        ),
    }
    (
        backend.metric(COOPERATIVE) - coop,
        backend.metric(SPLIT) - split,
    )
}

/// `VyreBackend::cooperative_grid_sync_fits` for `case` (through the trait object).
fn dynamic_fits(backend: &CudaBackend, case: &GridCase) -> bool {
    let dynamic: &dyn VyreBackend = backend;
    let inputs: Vec<&[u8]> = case.inputs.iter().map(Vec::as_slice).collect();
    dynamic
        .cooperative_grid_sync_fits(&case.program, &inputs, &DispatchConfig::default())
        .unwrap_or_else(|e| panic!("{}: cooperative_grid_sync_fits failed: {e}", case.name))
}

#[test]
fn grid_barriers_match_the_reference_on_both_paths() {
    let Some(shared) = backend() else { return };
    let cooperative = shared.cooperative_grid_sync();
    println!(
        "device {}: cooperative launch {}",
        shared.device_info().name,
        shared.device_info().cooperative_launch
    );
    assert_eq!(cooperative, shared.device_info().cooperative_launch);
    let split = split_backend();
    assert!(!split.cooperative_grid_sync());
    let after_fault = grid_programs::chained_passes(256);
    let cases = grid_programs::all();
    for case in &cases {
        // The trait's residency answer agrees with the path the dispatch then takes.
        let runs_cooperative = cooperative && case.cooperative;
        let fits = dynamic_fits(shared, case);
        assert_eq!(
            fits, runs_cooperative,
            "{}: cooperative_grid_sync_fits",
            case.name
        );
        assert!(
            !dynamic_fits(&split, case),
            "{}: fits on a split backend",
            case.name
        );
        let path = check(shared, case);
        let expected = if runs_cooperative { (1, 0) } else { (0, 1) };
        assert_eq!(
            path, expected,
            "{}: (cooperative, split) launches",
            case.name
        );
        println!(
            "{}: default backend ran {}",
            case.name,
            if path.0 == 1 { "cooperative" } else { "split" }
        );
        assert_eq!(check(&split, case), (0, 1), "{}: forced split", case.name);
        if case.expect_error {
            // No hang, and the next dispatch is fine on both paths.
            check(shared, &after_fault);
            check(&split, &after_fault);
        }
    }
    println!(
        "{} grid-sync cases run on both paths, 0 failed",
        cases.len()
    );
    // The registry-facing capability follows the device.
    let dynamic: &dyn VyreBackend = shared;
    assert_eq!(dynamic.supports_grid_sync(), cooperative);
    // A program without grid-wide barriers has nothing to launch cooperatively.
    let plain = common::kernels::vadd(16, 1);
    let (a, b) = (vec![1u8; 64], vec![2u8; 64]);
    assert!(!dynamic
        .cooperative_grid_sync_fits(&plain, &[&a, &b], &DispatchConfig::default())
        .unwrap());
    let mut config = DispatchConfig::default();
    config.cooperative = true;
    let case = &cases[0];
    let flagged = shared.dispatch(&case.program, &case.inputs, &config);
    assert_eq!(flagged.is_ok(), cooperative, "{flagged:?}");
    assert!(split
        .dispatch(&case.program, &case.inputs, &config)
        .is_err());
}

#[test]
fn grids_too_large_to_be_resident_fall_back_to_split_launches() {
    let Some(backend) = backend() else { return };
    // 64-invocation workgroups, more than 32 per multiprocessor: beyond any device's
    // residency, so the cooperative launch cannot be used.
    let sms = backend.device_info().multiprocessor_count;
    let case = grid_programs::chained_passes(64 * 33 * sms);
    let loads = backend.metric(MODULE_LOADS);
    assert!(
        !dynamic_fits(backend, &case),
        "{}: reported as fitting",
        case.name
    );
    assert_eq!(check(backend, &case), (0, 1), "{}", case.name);
    // Over the device's residency bound for 64-invocation blocks the cooperative entry's
    // module is never compiled: the segment entries' module is the one load.
    assert_eq!(backend.metric(MODULE_LOADS) - loads, 1, "{}", case.name);
    println!(
        "{} invocations: split fallback, identical to the reference",
        64 * 33 * sms
    );
}

#[test]
fn a_grid_that_fits_compiles_only_the_cooperative_module() {
    let Some(backend) = backend() else { return };
    // A size no other test dispatches: a kernel of its own.
    let case = grid_programs::chained_passes(64 * 5);
    let loads = backend.metric(MODULE_LOADS);
    if backend.cooperative_grid_sync() {
        assert!(dynamic_fits(backend, &case), "{}", case.name);
        assert_eq!(check(backend, &case), (1, 0), "{}", case.name);
    } else {
        assert_eq!(check(backend, &case), (0, 1), "{}", case.name);
    }
    // One module either way: the cooperative entry's alone, or (without cooperative
    // launches) the segment entries'.
    assert_eq!(backend.metric(MODULE_LOADS) - loads, 1, "{}", case.name);
    // A backend that always splits compiles the segment entries' module alone.
    let split = split_backend();
    let loads = split.metric(MODULE_LOADS);
    assert_eq!(check(&split, &case), (0, 1), "{}", case.name);
    assert_eq!(split.metric(MODULE_LOADS) - loads, 1, "{}", case.name);
}

#[test]
fn captured_sequences_run_grid_barriers() {
    let Some(backend) = backend() else { return };
    let case = grid_programs::chained_passes(256);
    let want = reference(&case.program, &case.inputs).unwrap();
    let n = 256 * 4;
    let resources: Vec<_> = [
        &case.inputs[0],
        &case.inputs[1],
        &case.inputs[2],
        &vec![0u8; n],
    ]
    .into_iter()
    .map(|bytes| {
        let r = backend.allocate_resident(bytes.len()).unwrap();
        backend.upload_resident(&r, bytes).unwrap();
        r
    })
    .collect();
    let step = ResidentDispatchStep {
        program: &case.program,
        resources: &resources,
        grid_override: None,
        workgroup_override: None,
    };
    let ranges = [ResidentReadRange {
        resource: &resources[3],
        byte_offset: 0,
        byte_len: n,
    }];
    let rounds = 3u32;
    let (coop, split) = (backend.metric(COOPERATIVE), backend.metric(SPLIT));
    let captures = backend.metric("vyre_cuda_graph_captures_total");
    let mut got = Vec::new();
    backend
        .dispatch_resident_repeated_sequence_read_ranges_into(
            &[],
            std::slice::from_ref(&step),
            rounds,
            &ranges,
            &mut [&mut got],
        )
        .unwrap();
    assert_eq!(got, want[2], "the repeated program's output");
    assert_eq!(
        backend.metric("vyre_cuda_graph_captures_total"),
        captures + 1
    );
    let path = (
        backend.metric(COOPERATIVE) - coop,
        backend.metric(SPLIT) - split,
    );
    assert_eq!(path.0 + path.1, u64::from(rounds), "{path:?}");
    println!(
        "captured sequence x{rounds}: {} cooperative, {} split launches",
        path.0, path.1
    );
    // Where the device cannot capture cooperative launches the backend splits them in
    // graphs (and logs it); either way the launches are all of one kind.
    assert!(path.0 == 0 || path.1 == 0, "{path:?}");
    for r in resources {
        backend.free_resident(r).unwrap();
    }
}
