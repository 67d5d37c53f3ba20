//! The direct `CudaBackend` resident workflow: allocate device buffers, upload once, run a
//! sequence of dispatches without host round trips, read back a range, compare with
//! vyre-reference, and print the device timing.
//!
//! `cargo run --release --example resident_pipeline`
//! (without a GPU it says so and exits non-zero)

use std::time::Instant;
use vyre_cuda::CudaBackend;
use vyre_driver::{ResidentDispatchStep, ResidentReadRange};
use vyre_foundation::ir::{BinOp, BufferAccess, BufferDecl, DataType, Expr, Node, Program};

const N: u32 = 1 << 18;
const ROUNDS: u32 = 20;

fn bin(op: BinOp, l: Expr, r: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(l),
        right: Box::new(r),
    }
}

/// In place: `x[i] = x[i] * 3 + 1`.
fn scale() -> Program {
    let i = Expr::gid_x();
    Program::wrapped(
        vec![BufferDecl::storage(
            "x",
            0,
            BufferAccess::ReadWrite,
            DataType::U32,
        )],
        [256, 1, 1],
        vec![Node::if_then(
            bin(BinOp::Lt, i.clone(), Expr::buf_len("x")),
            vec![Node::store(
                "x",
                i.clone(),
                bin(
                    BinOp::Add,
                    bin(BinOp::Mul, Expr::load("x", i), Expr::u32(3)),
                    Expr::u32(1),
                ),
            )],
        )],
    )
}

/// `acc[i] ^= x[i]` (bindings: acc 0, x 1).
fn mix() -> Program {
    let i = Expr::gid_x();
    Program::wrapped(
        vec![
            BufferDecl::read("x", 1, DataType::U32),
            BufferDecl::storage("acc", 0, BufferAccess::ReadWrite, DataType::U32),
        ],
        [256, 1, 1],
        vec![Node::if_then(
            bin(BinOp::Lt, i.clone(), Expr::buf_len("acc")),
            vec![Node::store(
                "acc",
                i.clone(),
                bin(
                    BinOp::BitXor,
                    Expr::load("acc", i.clone()),
                    Expr::load("x", i),
                ),
            )],
        )],
    )
}

fn main() {
    let backend = match CudaBackend::new() {
        Ok(backend) => backend,
        Err(error) => {
            eprintln!("no CUDA GPU available, nothing to run: {error}");
            std::process::exit(2);
        }
    };
    println!(
        "device: {} ({})",
        backend.device_info().name,
        backend.target()
    );
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut random = |count: u32| -> Vec<u8> {
        (0..count)
            .flat_map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 32) as u32).to_le_bytes()
            })
            .collect()
    };
    let (x0, acc0) = (random(N), random(N));
    let (scale, mix) = (scale(), mix());

    let started = Instant::now();
    let x = backend.allocate_resident(x0.len()).expect("allocate x");
    let acc = backend.allocate_resident(acc0.len()).expect("allocate acc");
    backend
        .upload_resident_many(&[(&x, &x0[..]), (&acc, &acc0[..])])
        .expect("upload");
    let uploaded = started.elapsed();

    let xs = [x.clone()];
    let pair = [acc.clone(), x.clone()];
    let step = |program, resources| ResidentDispatchStep {
        program,
        resources,
        grid_override: None,
        workgroup_override: None,
    };
    let repeated = [step(&scale, &xs[..]), step(&mix, &pair[..])];
    let (mut head, mut tail) = (Vec::new(), Vec::new());
    let timing = backend
        .dispatch_resident_repeated_sequence_read_ranges_into(
            &[],
            &repeated,
            ROUNDS,
            &[
                ResidentReadRange {
                    resource: &acc,
                    byte_offset: 0,
                    byte_len: 4096,
                },
                ResidentReadRange {
                    resource: &x,
                    byte_offset: x0.len() - 4096,
                    byte_len: 4096,
                },
            ],
            &mut [&mut head, &mut tail],
        )
        .expect("resident sequence");

    // The same chain on the CPU reference, one step at a time.
    let reference = |program: &Program, inputs: Vec<Vec<u8>>| -> Vec<u8> {
        let values: Vec<vyre_reference::value::Value> =
            inputs.into_iter().map(Into::into).collect();
        vyre_reference::reference_eval(program, &values).expect("reference")[0].to_bytes()
    };
    let (mut rx, mut racc) = (x0.clone(), acc0.clone());
    for _ in 0..ROUNDS {
        rx = reference(&scale, vec![rx]);
        racc = reference(&mix, vec![rx.clone(), racc]);
    }
    let ok = head == racc[..4096] && tail == rx[rx.len() - 4096..];
    let steps = 2 * ROUNDS;
    println!(
        "{steps} resident dispatches over 2 x {} KiB: device {:.3} ms ({:.1} us/step), wall {:.3} ms, upload {:.3} ms",
        x0.len() >> 10,
        timing.device_ns.unwrap_or(0) as f64 / 1e6,
        timing.device_ns.unwrap_or(0) as f64 / 1e3 / f64::from(steps),
        timing.wall_ns as f64 / 1e6,
        uploaded.as_secs_f64() * 1e3,
    );
    backend.free_resident(x).expect("free");
    backend.free_resident(acc).expect("free");
    if ok {
        println!("OK: ranged readbacks match vyre-reference byte for byte");
    } else {
        eprintln!("FAIL: GPU results differ from vyre-reference");
        std::process::exit(1);
    }
}
