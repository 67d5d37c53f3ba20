//! The main job: build a fused elementwise vyre Program over a few million elements,
//! dispatch it on the GPU through vyre's backend registry, compare every byte with
//! vyre-reference and print the timing.
//!
//! `cargo run --release --example quickstart`

use std::time::Instant;
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, Node, Program};

const N: u32 = 1 << 22;

fn bin(op: BinOp, l: Expr, r: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(l),
        right: Box::new(r),
    }
}

/// out[i] = (a[i] * 3 + b[i]) ^ (a[i] >> 7), then rotated by i: a fused integer kernel.
fn program() -> Program {
    let i = Expr::InvocationId { axis: 0 };
    let a = Expr::load("a", i.clone());
    let b = Expr::load("b", i.clone());
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(N),
            BufferDecl::read("b", 1, DataType::U32).with_count(N),
            BufferDecl::output("out", 2, DataType::U32).with_count(N),
        ],
        [256, 1, 1],
        vec![Node::if_then(
            bin(BinOp::Lt, i.clone(), Expr::u32(N)),
            vec![Node::store(
                "out",
                i.clone(),
                bin(
                    BinOp::RotateLeft,
                    bin(
                        BinOp::BitXor,
                        bin(BinOp::Add, bin(BinOp::Mul, a.clone(), Expr::u32(3)), b),
                        bin(BinOp::Shr, a, Expr::u32(7)),
                    ),
                    i,
                ),
            )],
        )],
    )
}

fn main() {
    // Linking the crate registers "vyre-cuda"; `use ... as _` makes sure it is linked.
    use vyre_cuda as _;
    let backend = match vyre_driver::backend::acquire(vyre_cuda::BACKEND_ID) {
        Ok(backend) => backend,
        Err(error) => {
            eprintln!("no CUDA GPU available, nothing to run: {error}");
            std::process::exit(2);
        }
    };
    let program = program();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
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
    let inputs = vec![random(N), random(N)];
    let config = DispatchConfig::default();

    // The direct API tells which device and PTX target the registry's backend uses.
    let direct = vyre_cuda::CudaBackend::new().expect("the registry opened this device");
    let kernel = direct.emit(&program, &config).expect("emit PTX");
    let started = Instant::now();
    let outputs = match backend.dispatch(&program, &inputs, &config) {
        Ok(outputs) => outputs,
        Err(error) => {
            eprintln!("dispatch failed: {error}");
            std::process::exit(1);
        }
    };
    let first = started.elapsed();
    let mut warm = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let _ = backend
            .dispatch(&program, &inputs, &config)
            .expect("warm dispatch");
        warm.push(started.elapsed());
    }
    warm.sort();
    let median = warm[warm.len() / 2];

    let reference_inputs: Vec<vyre_reference::value::Value> =
        inputs.iter().cloned().map(Into::into).collect();
    let reference: Vec<Vec<u8>> = vyre_reference::reference_eval(&program, &reference_inputs)
        .expect("reference run")
        .iter()
        .map(|v| v.to_bytes())
        .collect();
    let matches = reference == outputs;
    let bytes = (3 * N as usize * 4) as f64;
    println!("program: fused elementwise u32 kernel over {N} elements");
    println!(
        "device: {} ({} SMs), target {}",
        direct.device_info().name,
        direct.device_info().multiprocessor_count,
        direct.target()
    );
    println!("ptx: {} bytes", kernel.ptx.len());
    println!(
        "first dispatch (compile + load + run): {:.3} ms",
        first.as_secs_f64() * 1e3
    );
    println!(
        "warm dispatch median of 10: {:.3} ms ({:.2} GB/s end to end)",
        median.as_secs_f64() * 1e3,
        bytes / median.as_secs_f64() / 1e9
    );
    println!(
        "byte-exact match with vyre-reference: {}",
        if matches { "yes" } else { "NO" }
    );
    if !matches {
        std::process::exit(1);
    }
}
