//! GPU: the isolated JIT (`VYRE_CUDA_JIT_HELPER`, `backend/jit.rs`).
//!
//! * The PTX of `../shared/regressions/ptxas-crash-1` as the emitter wrote it before the
//!   fix (`tests/data/ptxas-crash-1.sm_90.ptx`), which crashed the driver's in-process JIT
//!   inside a user's process, is loaded in-process by a child process (its fate is
//!   printed), and compiled by the helper through the driver's linker into a cubin that
//!   loads in this process. (A helper that dies is reported and replaced: the unit test
//!   `backend::jit::tests::a_helper_that_crashes_is_reported_and_replaced`.)
//! * A backend whose modules all compile in the helper runs the vyre-primitives fixtures
//!   byte-identical to vyre-reference, and the original crash program to the reference's
//!   error.
//!
//! The helper is `$VYRE_CUDA_JIT_HELPER`, else the `vyre-cuda-jit` binary cargo built
//! beside this test.

mod common;
#[path = "fuzz/mod.rs"]
mod fuzz;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use vyre_cuda::{CudaError, CudaOptions};
use vyre_foundation::ir::{BufferDecl, DataType, Expr, Node, Program};

const CRASHING_PTX: &str = include_str!("data/ptxas-crash-1.sm_90.ptx");

fn helper() -> PathBuf {
    std::env::var_os(vyre_cuda::JIT_HELPER_ENV)
        .filter(|h| !h.is_empty())
        .map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_vyre-cuda-jit")),
            PathBuf::from,
        )
}

/// One request to a fresh helper: the reply (tag, bytes), or how the helper ended.
fn ask_fresh_helper(ptx: &str) -> Result<(u8, Vec<u8>), std::process::ExitStatus> {
    let mut child = Command::new(helper())
        .args(["--device", "0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the JIT helper");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let _ = stdin.write_all(&(ptx.len() as u64).to_le_bytes());
    let _ = stdin.write_all(ptx.as_bytes());
    drop(stdin);
    let mut reply = Vec::new();
    let _ = stdout.read_to_end(&mut reply);
    let status = child.wait().expect("reap the helper");
    if reply.len() < 9 {
        return Err(status);
    }
    Ok((reply[0], reply[9..].to_vec()))
}

/// `out[i] = a[i] + 1`.
fn add_one() -> Program {
    let gid = Expr::InvocationId { axis: 0 };
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32),
            BufferDecl::output("out", 1, DataType::U32).with_count(64),
        ],
        [64, 1, 1],
        vec![Node::store(
            "out",
            gid.clone(),
            Expr::add(Expr::load("a", gid), Expr::u32(1)),
        )],
    )
}

/// Environment variable that makes [`in_process_load_probe`] load a PTX file.
const PROBE_ENV: &str = "VYRE_CUDA_JIT_PROBE_PTX";

/// Child of [`the_reported_ptx_compiles_in_the_helper_and_loads_here`]: loads the PTX
/// named by `VYRE_CUDA_JIT_PROBE_PTX` with the in-process JIT (`cuModuleLoadDataEx`).
#[test]
#[ignore]
fn in_process_load_probe() {
    let Ok(path) = std::env::var(PROBE_ENV) else {
        return;
    };
    let ptx = std::fs::read_to_string(path).expect("probe PTX");
    let device = vyre_cuda::driver::Device::open(0).expect("device");
    let loaded = vyre_cuda::driver::Module::load_ptx(&device, &ptx);
    println!("in-process load returned: {:?}", loaded.map(|_| "a module"));
}

#[test]
fn the_reported_ptx_compiles_in_the_helper_and_loads_here() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    if backend.device_info().compute_capability.0 != 9 {
        println!("skipped: the reported PTX targets sm_90 and this device is not sm_90");
        return;
    }
    // What the in-process JIT does with it, in a child process (it killed a user's
    // process on an H200; measured on an H100 with driver 580.159.04: SIGSEGV at the
    // default -O3 and -O4 through cuModuleLoadDataEx, fine at -O1, while the linker path
    // compiles it at every level).
    let probe_file =
        std::env::temp_dir().join(format!("vyre-cuda-probe-{}.ptx", std::process::id()));
    std::fs::write(&probe_file, CRASHING_PTX).expect("write probe PTX");
    let child = Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--exact",
            "in_process_load_probe",
            "--ignored",
            "--nocapture",
        ])
        .env(PROBE_ENV, &probe_file)
        .output()
        .expect("run the probe child");
    let _ = std::fs::remove_file(&probe_file);
    println!(
        "in-process JIT of the ptxas-crash-1 PTX, in a child process: {}",
        child.status
    );
    // The helper compiles it through the driver's linker; the cubin loads in this process.
    let (tag, cubin) = ask_fresh_helper(CRASHING_PTX).expect("the helper answers");
    assert_eq!(tag, 0, "{}", String::from_utf8_lossy(&cubin));
    let device = vyre_cuda::driver::Device::open(0).expect("device");
    let module = vyre_cuda::driver::Module::load_cubin(&device, &cubin, CRASHING_PTX)
        .expect("the helper's cubin loads");
    module.function("vyre_main").expect("the entry is there");
    println!(
        "the helper compiled it to a {}-byte cubin, loaded here",
        cubin.len()
    );
    // A valid kernel too.
    let valid = vyre_cuda::codegen::emit_ptx(&add_one(), None, backend.target())
        .expect("emit")
        .ptx;
    let (tag, cubin) = ask_fresh_helper(&valid).expect("a fresh helper answers");
    assert_eq!(tag, 0, "{}", String::from_utf8_lossy(&cubin));
    assert!(
        cubin.starts_with(b"\x7fELF"),
        "the helper's reply is not a cubin"
    );
}

#[test]
fn dispatch_through_the_helper_matches_the_reference() {
    let Some(backend) = common::gpu::fresh(CudaOptions {
        jit_helper: Some(helper()),
        ..CudaOptions::from_env().expect("options")
    }) else {
        return;
    };
    let common::gpu::CorpusRun {
        cases,
        rejected,
        failures,
    } = common::gpu::run_fixture_corpus(&backend);
    println!("through the JIT helper: {cases} fixture cases run, {rejected} programs rejected, {} failing", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(cases > 100, "too few fixture cases ran ({cases})");

    // The reported program: the reference's run-time error, cleanly.
    let path = fuzz::case::regression_dir().join("cpu-ptxas-crash-1-original.case");
    let text = std::fs::read_to_string(&path).expect("the crash-1 case");
    let saved = fuzz::case::parse(&path, &text).expect("parse");
    let case = saved.case;
    assert!(common::gpu::reference(&case.program, &case.inputs).is_err());
    match backend.dispatch(&case.program, &case.inputs, &case.config) {
        Err(CudaError::KernelRuntime { message, .. }) => println!("crash-1 program: {message}"),
        other => panic!("expected the reference's run-time error, got {other:?}"),
    }
}
