//! `cargo bench --bench dispatch`: per-dispatch overhead, end-to-end throughput, cold
//! compile and emitter time, each as a median over repeated samples (p10/p90 shown).
//! Every GPU workload is checked against vyre-reference before it is timed.
//! Without a GPU only the emitter rows run.

use std::time::{Duration, Instant};
use vyre_cuda::codegen::{emit_ptx, PtxTarget};
use vyre_cuda::CudaBackend;
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, Node, Program};

fn stats(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.1), at(0.9))
}

fn row(name: &str, samples: Vec<Duration>, bytes: Option<usize>) {
    let (p50, p10, p90) = stats(samples);
    let rate = bytes
        .map(|b| format!("{:8.2} GB/s", b as f64 / p50.as_secs_f64() / 1e9))
        .unwrap_or_default();
    println!(
        "{name:<34} p50 {:>10.1} us  p10 {:>10.1} us  p90 {:>10.1} us {rate}",
        p50.as_secs_f64() * 1e6,
        p10.as_secs_f64() * 1e6,
        p90.as_secs_f64() * 1e6
    );
}

fn vadd(n: u32, salt: u32) -> Program {
    let i = Expr::InvocationId { axis: 0 };
    let sum = Expr::BinOp {
        op: BinOp::Add,
        left: Box::new(Expr::load("a", i.clone())),
        right: Box::new(Expr::BinOp {
            op: BinOp::Add,
            left: Box::new(Expr::load("b", i.clone())),
            right: Box::new(Expr::u32(salt)),
        }),
    };
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::read("b", 1, DataType::U32).with_count(n),
            BufferDecl::output("out", 2, DataType::U32).with_count(n),
        ],
        [256, 1, 1],
        vec![Node::if_then(
            Expr::BinOp {
                op: BinOp::Lt,
                left: Box::new(i.clone()),
                right: Box::new(Expr::u32(n)),
            },
            vec![Node::store("out", i, sum)],
        )],
    )
}

fn random(count: u32, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..count)
        .flat_map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 32) as u32).to_le_bytes()
        })
        .collect()
}

fn check(backend: &CudaBackend, program: &Program, inputs: &[Vec<u8>]) {
    let values: Vec<vyre_reference::value::Value> =
        inputs.iter().cloned().map(Into::into).collect();
    let want: Vec<Vec<u8>> = vyre_reference::reference_eval(program, &values)
        .expect("reference")
        .iter()
        .map(|v| v.to_bytes())
        .collect();
    let got = backend
        .dispatch(program, inputs, &DispatchConfig::default())
        .expect("dispatch");
    assert_eq!(want, got, "FAIL: GPU output differs from vyre-reference");
}

fn main() {
    let config = DispatchConfig::default();
    // Emitter cost over the vyre-primitives corpus (CPU only).
    let programs: Vec<Program> = vyre_primitives::harness::all_entries()
        .map(|e| (e.build)())
        .collect();
    let mut emit_samples = Vec::new();
    for program in &programs {
        let started = Instant::now();
        let _ = emit_ptx(program, &config, PtxTarget::sm90());
        emit_samples.push(started.elapsed());
    }
    row("emit_ptx, corpus program", emit_samples, None);

    let backend = match CudaBackend::new() {
        Ok(backend) => backend,
        Err(error) => {
            println!("skipped: no CUDA device ({error})");
            return;
        }
    };
    println!(
        "device: {} / {}",
        backend.device_info().name,
        backend.target()
    );

    // tiny: one element, the per-dispatch floor.
    let tiny = vadd(1, 7);
    let tiny_inputs = vec![random(1, 1), random(1, 2)];
    check(&backend, &tiny, &tiny_inputs);
    let mut out = Vec::new();
    let borrowed: Vec<&[u8]> = tiny_inputs.iter().map(Vec::as_slice).collect();
    for _ in 0..50 {
        backend
            .dispatch_borrowed_into(&tiny, &borrowed, &config, &mut out)
            .unwrap();
    }
    let samples = (0..500)
        .map(|_| {
            let started = Instant::now();
            backend
                .dispatch_borrowed_into(&tiny, &borrowed, &config, &mut out)
                .unwrap();
            started.elapsed()
        })
        .collect();
    row("tiny dispatch (1 element)", samples, None);

    for log2 in [16u32, 20, 24, 26] {
        let n = 1u32 << log2;
        let program = vadd(n, 3);
        let inputs = vec![random(n, 11), random(n, 12)];
        check(&backend, &program, &inputs);
        let borrowed: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        let samples = (0..30)
            .map(|_| {
                let started = Instant::now();
                backend
                    .dispatch_borrowed_into(&program, &borrowed, &config, &mut out)
                    .unwrap();
                started.elapsed()
            })
            .collect();
        row(
            &format!("vadd_u32 2^{log2} end to end"),
            samples,
            Some(3 * n as usize * 4),
        );
    }

    // Cold compile: first dispatch of a never-seen program (new constant each time).
    let small_inputs = vec![random(1024, 5), random(1024, 6)];
    let samples = (0..30)
        .map(|salt| {
            let program = vadd(1024, 1000 + salt);
            let started = Instant::now();
            backend.dispatch(&program, &small_inputs, &config).unwrap();
            started.elapsed()
        })
        .collect();
    row("cold compile + first dispatch", samples, None);
    let warm = vadd(1024, 1000);
    let samples = (0..200)
        .map(|_| {
            let started = Instant::now();
            backend.dispatch(&warm, &small_inputs, &config).unwrap();
            started.elapsed()
        })
        .collect();
    row("warm re-dispatch, 1024 elements", samples, None);
    for (name, value) in backend.metric_snapshot() {
        println!("metric {name} = {value}");
    }
}
