//! `cargo bench --bench dispatch`: per-dispatch overhead, end-to-end throughput, cold
//! compile and emitter time, each as a median over repeated samples (p10/p90 shown).
//! Every GPU workload is checked against vyre-reference before it is timed.
//! Without a GPU only the emitter rows run.

use std::time::{Duration, Instant};
// Their operations register only when the crates are linked.
use vyre_cuda::codegen::{emit_ptx, PtxTarget};
use vyre_cuda::{CudaBackend, CudaOptions, PoolKind};
use vyre_driver::{DispatchConfig, ResidentDispatchStep, Resource};
use vyre_foundation::ir::{BinOp, BufferAccess, BufferDecl, DataType, Expr, Node, Program};
use vyre_libs as _;
use vyre_primitives as _;

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

/// `x[i] = x[i] * 3 + 1`, in place over the whole (runtime-sized) buffer.
fn affine() -> Program {
    let i = Expr::InvocationId { axis: 0 };
    let bin = |op, l, r| Expr::BinOp {
        op,
        left: Box::new(l),
        right: Box::new(r),
    };
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

/// saxpy as users write it: `y[i] = alpha[0] * x[i] + y[i]` (f32) for `i < len(y)`, the
/// scale in a one-element buffer and `y` updated in place: 12 bytes moved per element,
/// as vadd.
fn saxpy_user() -> Program {
    let i = Expr::InvocationId { axis: 0 };
    let bin = |op, l, r| Expr::BinOp {
        op,
        left: Box::new(l),
        right: Box::new(r),
    };
    let scaled = bin(
        BinOp::Mul,
        Expr::load("alpha", Expr::u32(0)),
        Expr::load("x", i.clone()),
    );
    Program::wrapped(
        vec![
            BufferDecl::read("alpha", 0, DataType::F32).with_count(1),
            BufferDecl::read("x", 1, DataType::F32),
            BufferDecl::read_write("y", 2, DataType::F32),
        ],
        [256, 1, 1],
        vec![Node::if_then(
            bin(BinOp::Lt, i.clone(), Expr::buf_len("y")),
            vec![Node::store(
                "y",
                i.clone(),
                bin(BinOp::Add, scaled, Expr::load("y", i)),
            )],
        )],
    )
}

/// Wall time of `samples` warm borrowed dispatches, end to end.
fn e2e_samples(
    backend: &CudaBackend,
    program: &Program,
    inputs: &[Vec<u8>],
    samples: usize,
) -> Vec<Duration> {
    let borrowed: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let (config, mut out) = (DispatchConfig::default(), Vec::new());
    (0..samples)
        .map(|_| {
            let started = Instant::now();
            backend
                .dispatch_borrowed_into(program, &borrowed, &config, &mut out)
                .unwrap();
            started.elapsed()
        })
        .collect()
}

fn ns_row(name: &str, mut samples: Vec<u64>, bytes: Option<usize>) {
    samples.sort_unstable();
    row(
        name,
        samples.into_iter().map(Duration::from_nanos).collect(),
        bytes,
    );
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

fn check(backend: &CudaBackend, program: &Program, inputs: &[Vec<u8>]) -> Vec<Vec<u8>> {
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
    want
}

fn main() {
    let config = DispatchConfig::default();
    // Emitter cost over the vyre-primitives + vyre-libs corpus (CPU only).
    let programs: Vec<Program> = vyre_foundation::operation::OperationRegistry::global()
        .iter()
        .filter_map(|e| e.build.map(|build| build()))
        .collect();
    let mut emit_samples = Vec::new();
    for program in &programs {
        let started = Instant::now();
        let _ = emit_ptx(program, config.workgroup_override, PtxTarget::sm90());
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
    if std::env::var("VYRE_BENCH_ONLY").as_deref() == Ok("resident-in-place") {
        resident_in_place(&backend, &config);
        return;
    }

    // tiny: one element, the per-dispatch floor.
    let tiny = vadd(1, 7);
    let tiny_inputs = vec![random(1, 1), random(1, 2)];
    let _ = check(&backend, &tiny, &tiny_inputs);
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

    // Reference-checked outputs of the end-to-end rows, reused by the resident rows.
    let mut checked = std::collections::HashMap::new();
    let mut vadd_p50 = std::collections::HashMap::new();
    for log2 in [16u32, 20, 24, 26] {
        let n = 1u32 << log2;
        let program = vadd(n, 3);
        let inputs = vec![random(n, 11), random(n, 12)];
        let mut want = check(&backend, &program, &inputs);
        let samples = e2e_samples(&backend, &program, &inputs, 30);
        vadd_p50.insert(log2, stats(samples.clone()).0);
        row(
            &format!("vadd_u32 2^{log2} end to end"),
            samples,
            Some(3 * n as usize * 4),
        );
        checked.insert(log2, (inputs, want.remove(0)));
    }

    // User-style saxpy beside vadd of the same bytes (issue 18's target: <= 1.1x).
    for log2 in [24u32, 26] {
        let n = 1u32 << log2;
        let program = saxpy_user();
        let alpha = 2.5f32.to_le_bytes().to_vec();
        let inputs = vec![alpha, random(n, 13), random(n, 14)];
        let _ = check(&backend, &program, &inputs);
        let samples = e2e_samples(&backend, &program, &inputs, 30);
        let ratio = stats(samples.clone()).0.as_secs_f64() / vadd_p50[&log2].as_secs_f64();
        row(
            &format!("saxpy_user_f32 2^{log2} end to end"),
            samples,
            Some(3 * n as usize * 4),
        );
        println!("  saxpy_user_f32 2^{log2} / vadd_u32 2^{log2} p50: {ratio:.3}x");
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

    // Resident vadd: kernel time from CUDA events, no host transfers. Same program and
    // inputs as the end-to-end rows, so the reference-checked output is reused.
    for log2 in [24u32, 26] {
        let n = 1u32 << log2;
        let program = vadd(n, 3);
        let (inputs, want) = checked.remove(&log2).expect("checked above");
        let ra = backend.allocate_resident(inputs[0].len()).unwrap();
        let rb = backend.allocate_resident(inputs[1].len()).unwrap();
        let out = backend.allocate_resident(n as usize * 4).unwrap();
        let mut back = Vec::new();
        let (mut up, mut down) = (Vec::new(), Vec::new());
        // vadd's bindings: a 0, b 1, out 2.
        let handles: Vec<Resource> = vec![ra.clone(), rb.clone(), out.clone()];
        for _ in 0..6 {
            let started = Instant::now();
            backend
                .upload_resident_many(&[(&ra, &inputs[0][..]), (&rb, &inputs[1][..])])
                .unwrap();
            up.push(started.elapsed());
            backend
                .dispatch_resident_timed(&program, &handles, &config)
                .unwrap();
            let started = Instant::now();
            backend.download_resident_into(&out, &mut back).unwrap();
            down.push(started.elapsed());
            assert!(
                back == want,
                "FAIL: resident vadd differs from vyre-reference"
            );
        }
        let mut device = Vec::new();
        let mut wall = Vec::new();
        for _ in 0..30 {
            let timed = backend
                .dispatch_resident_timed(&program, &handles, &config)
                .unwrap();
            device.push(timed.device_ns.unwrap());
            wall.push(timed.wall_ns);
        }
        ns_row(
            &format!("resident vadd 2^{log2} device"),
            device,
            Some(3 * n as usize * 4),
        );
        ns_row(&format!("resident vadd 2^{log2} wall"), wall, None);
        row(
            &format!("upload_resident_many 2x2^{log2} u32"),
            up.split_off(1),
            Some(2 * n as usize * 4),
        );
        row(
            &format!("download_resident_into 2^{log2} u32"),
            down.split_off(1),
            Some(n as usize * 4),
        );
        for r in [ra, rb, out] {
            backend.free_resident(r).unwrap();
        }
    }

    resident_in_place(&backend, &config);

    // Pinned staging bandwidth: 256 MiB host <-> resident, repeated.
    {
        let bytes = random(1 << 26, 41);
        let r = backend.allocate_resident(bytes.len()).unwrap();
        let mut back = Vec::new();
        backend.upload_resident(&r, &bytes).unwrap();
        backend.download_resident_into(&r, &mut back).unwrap();
        let up: Vec<Duration> = (0..8)
            .map(|_| {
                let started = Instant::now();
                backend.upload_resident(&r, &bytes).unwrap();
                started.elapsed()
            })
            .collect();
        let down: Vec<Duration> = (0..8)
            .map(|_| {
                let started = Instant::now();
                backend.download_resident_into(&r, &mut back).unwrap();
                started.elapsed()
            })
            .collect();
        assert!(back == bytes, "FAIL: resident round trip");
        row("upload 256 MiB (pinned, chunked)", up, Some(bytes.len()));
        row(
            "download 256 MiB (pinned, chunked)",
            down,
            Some(bytes.len()),
        );
        backend.free_resident(r).unwrap();
    }

    // A 100-step resident sequence on 2^20 elements: graph replay vs direct launches.
    {
        let n = 1u32 << 20;
        let program = affine();
        let x0 = random(n, 51);
        let x = backend.allocate_resident(x0.len()).unwrap();
        let xs = [x.clone()];
        let step = ResidentDispatchStep {
            program: &program,
            resources: &xs,
            grid_override: None,
            workgroup_override: None,
        };
        // One step is checked against vyre-reference; the 100-step result against the
        // same function applied on the host (x * 3 + 1, wrapping).
        let one = vyre_reference::reference_eval(
            &program,
            &[vyre_reference::value::Value::from(x0.clone())],
        )
        .expect("reference")[0]
            .to_bytes();
        let step_host = |bytes: &[u8]| -> Vec<u8> {
            bytes
                .chunks_exact(4)
                .flat_map(|c| {
                    let v = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    v.wrapping_mul(3).wrapping_add(1).to_le_bytes()
                })
                .collect()
        };
        assert!(
            one == step_host(&x0),
            "FAIL: host model differs from vyre-reference"
        );
        let mut want = x0.clone();
        for _ in 0..100 {
            want = step_host(&want);
        }
        let mut got = Vec::new();
        let ranges = [vyre_driver::ResidentReadRange {
            resource: &x,
            byte_offset: 0,
            byte_len: x0.len(),
        }];
        backend.upload_resident(&x, &x0).unwrap();
        backend
            .dispatch_resident_repeated_sequence_read_ranges_into(
                &[],
                std::slice::from_ref(&step),
                100,
                &ranges,
                &mut [&mut got],
            )
            .unwrap();
        assert!(
            got == want,
            "FAIL: 100-step sequence differs from vyre-reference"
        );
        let (mut graph_device, mut graph_wall) = (Vec::new(), Vec::new());
        for _ in 0..20 {
            let t = backend
                .dispatch_resident_repeated_sequence_read_ranges_into(
                    &[],
                    std::slice::from_ref(&step),
                    100,
                    &[],
                    &mut [],
                )
                .unwrap();
            graph_device.push(t.device_ns.unwrap() / 100);
            graph_wall.push(t.wall_ns / 100);
        }
        let steps: Vec<ResidentDispatchStep<'_>> = (0..100)
            .map(|_| ResidentDispatchStep {
                program: &program,
                resources: &xs,
                grid_override: None,
                workgroup_override: None,
            })
            .collect();
        let (mut direct_device, mut direct_wall) = (Vec::new(), Vec::new());
        for _ in 0..20 {
            let t = backend
                .dispatch_resident_sequence_read_ranges_timed_into(&steps, &[], &mut [])
                .unwrap();
            direct_device.push(t.device_ns.unwrap() / 100);
            direct_wall.push(t.wall_ns / 100);
        }
        ns_row("100-step seq 2^20, graph, device/step", graph_device, None);
        ns_row("100-step seq 2^20, graph, wall/step", graph_wall, None);
        ns_row(
            "100-step seq 2^20, direct, device/step",
            direct_device,
            None,
        );
        ns_row("100-step seq 2^20, direct, wall/step", direct_wall, None);
        backend.free_resident(x).unwrap();
    }

    // Transient pools compared: size classes vs the driver's stream-ordered pool.
    for kind in [PoolKind::SizeClasses, PoolKind::StreamOrdered] {
        let mut options = CudaOptions::from_env().unwrap();
        options.pool = kind;
        let pooled = CudaBackend::with_options(options).unwrap();
        for log2 in [10u32, 20] {
            let n = 1u32 << log2;
            let program = vadd(n, 1000);
            let inputs = vec![random(n, 61), random(n, 62)];
            let _ = check(&pooled, &program, &inputs);
            let borrowed: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
            let samples = (0..200)
                .map(|_| {
                    let started = Instant::now();
                    pooled
                        .dispatch_borrowed_into(&program, &borrowed, &config, &mut out)
                        .unwrap();
                    started.elapsed()
                })
                .collect();
            row(&format!("pool {kind:?} vadd 2^{log2}"), samples, None);
        }
        // Which paths the pooled backend took and what it allocated, to read its rows by.
        let paths = pooled.metric_snapshot().into_iter().filter(|(name, _)| {
            [
                "packed",
                "vector",
                "chunked",
                "allocations",
                "reuses",
                "stream_creations",
            ]
            .iter()
            .any(|part| name.contains(part))
        });
        let paths: Vec<String> = paths
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        println!("pool {kind:?} metrics: {}", paths.join(" "));
    }

    for (name, value) in backend.metric_snapshot() {
        println!("metric {name} = {value}");
    }
}

/// Resident in-place saxpy as users write it (`y = alpha[0] * x + y`): kernel time of an
/// in-place update, 12 bytes per element. The first dispatch is checked against
/// vyre-reference; the timed ones keep updating y. `VYRE_BENCH_ONLY=resident-in-place`
/// runs only these rows.
fn resident_in_place(backend: &CudaBackend, config: &DispatchConfig) {
    // (vyre-reference takes minutes over 2^26 elements.)
    for log2 in [22u32, 24] {
        let n = 1u32 << log2;
        let program = saxpy_user();
        let inputs = [1.5f32.to_le_bytes().to_vec(), random(n, 23), random(n, 24)];
        let values: Vec<vyre_reference::value::Value> =
            inputs.iter().cloned().map(Into::into).collect();
        let want = vyre_reference::reference_eval(&program, &values).expect("reference");
        let resources: Vec<Resource> = inputs
            .iter()
            .map(|bytes| {
                let r = backend.allocate_resident(bytes.len()).unwrap();
                backend.upload_resident(&r, bytes).unwrap();
                r
            })
            .collect();
        backend
            .dispatch_resident_timed(&program, &resources, config)
            .unwrap();
        let mut back = Vec::new();
        backend
            .download_resident_into(&resources[2], &mut back)
            .unwrap();
        assert!(
            back == want[0].to_bytes(),
            "FAIL: resident saxpy differs from vyre-reference"
        );
        let device: Vec<u64> = (0..30)
            .map(|_| {
                let timed = backend
                    .dispatch_resident_timed(&program, &resources, config)
                    .unwrap();
                timed.device_ns.unwrap()
            })
            .collect();
        ns_row(
            &format!("resident saxpy_user_f32 in place 2^{log2} device"),
            device,
            Some(3 * n as usize * 4),
        );
        for r in resources {
            backend.free_resident(r).unwrap();
        }
    }
}
