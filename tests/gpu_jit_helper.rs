//! GPU: the isolated JIT (`VYRE_CUDA_JIT_HELPER`, `backend/jit.rs`).
//!
//! * The helper executable, fed the PTX of `../shared/regressions/ptxas-crash-1` as the
//!   emitter wrote it before the fix (`tests/data/ptxas-crash-1.sm_90.ptx`, which crashed
//!   the driver's JIT inside a user's process on an H200), dies, and this process does not;
//!   a fresh helper then compiles a valid kernel to a cubin.
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
use vyre_driver::DispatchConfig;
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

#[test]
fn the_helper_dies_where_the_driver_jit_crashes_and_this_process_lives_on() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    if backend.device_info().compute_capability.0 != 9 {
        println!("skipped: the crashing PTX targets sm_90 and this device is not sm_90");
        return;
    }
    match ask_fresh_helper(CRASHING_PTX) {
        Err(status) => {
            println!("the JIT helper compiling the ptxas-crash-1 PTX ended: {status}");
            assert!(
                !status.success(),
                "the helper exited cleanly without a reply"
            );
        }
        Ok((tag, bytes)) => panic!(
            "the driver compiled the ptxas-crash-1 PTX (tag {tag}, {} bytes): this driver's \
             JIT no longer crashes on it, so this test shows nothing; update it",
            bytes.len()
        ),
    }
    let valid =
        vyre_cuda::codegen::emit_ptx(&add_one(), &DispatchConfig::default(), backend.target())
            .expect("emit vadd")
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
    let (mut cases, mut rejected) = (0usize, 0usize);
    let mut failures = Vec::new();
    for entry in vyre_primitives::harness::all_entries() {
        let Some(inputs) = entry.test_inputs else {
            continue;
        };
        let program = (entry.build)();
        let config = DispatchConfig::default();
        if backend.emit(&program, &config).is_err() {
            rejected += 1;
            continue;
        }
        for case in inputs() {
            cases += 1;
            let want = common::gpu::reference(&program, &case);
            let got = backend.dispatch(&program, &case, &config);
            match (want, got) {
                (Ok(want), Ok(got)) if want == got => {}
                (Err(_), Err(e)) => {
                    common::gpu::fix_text(e);
                }
                (want, got) => failures.push(format!(
                    "{}: reference {:?} vs backend {:?}",
                    entry.id,
                    want.map(|_| "ok"),
                    got.map(|_| "ok")
                )),
            }
        }
    }
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
