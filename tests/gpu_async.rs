//! Asynchronous and timed dispatch on the GPU against vyre-reference. Skips without a
//! CUDA device.

mod common;

use common::gpu::{backend, fix_text, reference, Rng};
use common::kernels::{signed_div, vadd};
use vyre_driver::{BackendError, DispatchConfig, VyreBackend};

#[test]
fn async_dispatch_matches_the_reference_and_polls_without_blocking() {
    let Some(backend) = backend() else { return };
    let dynamic: &dyn VyreBackend = backend;
    let n = 1 << 20;
    let mut rng = Rng::new(11);
    let inputs = vec![rng.bytes_u32(n as usize), rng.bytes_u32(n as usize)];
    let program = vadd(n, 4);
    let want = reference(&program, &inputs).unwrap();
    let pending = dynamic
        .dispatch_async(&program, &inputs, &DispatchConfig::default())
        .unwrap();
    let mut polls = 0u64;
    while !pending.is_ready() {
        polls += 1;
        std::thread::yield_now();
    }
    println!("async vadd 2^20: ready after {polls} polls");
    assert_eq!(pending.await_result().unwrap(), want);

    // Borrowed inputs may be dropped before the result is awaited.
    let pending = {
        let owned = inputs.clone();
        let borrowed: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        dynamic
            .dispatch_borrowed_async(&program, &borrowed, &DispatchConfig::default())
            .unwrap()
    };
    let mut outputs = vec![Vec::with_capacity(n as usize * 4)];
    let slot = outputs[0].as_ptr();
    pending.await_result_into(&mut outputs).unwrap();
    assert_eq!(outputs, want);
    assert_eq!(
        outputs[0].as_ptr(),
        slot,
        "await_result_into reuses the slot"
    );
}

#[test]
fn many_async_dispatches_in_flight_and_dropped_ones_do_not_leak() {
    let Some(backend) = backend() else { return };
    let mut rng = Rng::new(12);
    let programs: Vec<_> = (0..8).map(|salt| vadd(4096, salt)).collect();
    let inputs: Vec<Vec<Vec<u8>>> = (0..8)
        .map(|_| vec![rng.bytes_u32(4096), rng.bytes_u32(4096)])
        .collect();
    let pending: Vec<_> = programs
        .iter()
        .zip(&inputs)
        .map(|(p, i)| {
            backend
                .dispatch_async(p, i, &DispatchConfig::default())
                .unwrap()
        })
        .collect();
    for ((pending, program), inputs) in pending.into_iter().zip(&programs).zip(&inputs) {
        assert_eq!(pending.wait().unwrap(), reference(program, inputs).unwrap());
    }
    // Warm: dropping unawaited handles returns their memory to the pool.
    let big = vadd(1 << 22, 1);
    let big_inputs = vec![rng.bytes_u32(1 << 22), rng.bytes_u32(1 << 22)];
    backend
        .dispatch(&big, &big_inputs, &DispatchConfig::default())
        .unwrap();
    let (free_before, _) = backend.memory_info().unwrap();
    for _ in 0..20 {
        let pending = backend
            .dispatch_async(&big, &big_inputs, &DispatchConfig::default())
            .unwrap();
        drop(pending);
    }
    let (free_after, _) = backend.memory_info().unwrap();
    println!("20 dropped async dispatches: free {free_before} -> {free_after}");
    assert!(
        free_after + (64 << 20) >= free_before,
        "dropped dispatches leaked memory"
    );
}

#[test]
fn device_errors_come_back_from_await() {
    let Some(backend) = backend() else { return };
    let dynamic: &dyn VyreBackend = backend;
    let program = signed_div(64);
    let a: Vec<u8> = (0..64i32).flat_map(|v| (v * 7).to_le_bytes()).collect();
    let mut d: Vec<u8> = (1..=64i32).flat_map(|v| v.to_le_bytes()).collect();
    d[40..44].copy_from_slice(&0i32.to_le_bytes());
    assert!(reference(&program, &[a.clone(), d.clone()]).is_err());
    let pending = dynamic
        .dispatch_async(&program, &[a.clone(), d], &DispatchConfig::default())
        .unwrap();
    let error = pending.await_result().unwrap_err();
    assert!(
        matches!(error, BackendError::DispatchFailed { .. }),
        "{error:?}"
    );
    fix_text(error);
    // The failure does not poison later dispatches.
    let d: Vec<u8> = (1..=64i32).flat_map(|v| v.to_le_bytes()).collect();
    let inputs = vec![a, d];
    assert_eq!(
        dynamic
            .dispatch(&program, &inputs, &DispatchConfig::default())
            .unwrap(),
        reference(&program, &inputs).unwrap()
    );
    // Bad inputs fail at submission.
    fix_text(
        dynamic
            .dispatch_async(&program, &inputs[..1], &DispatchConfig::default())
            .err()
            .unwrap(),
    );
}

#[test]
fn timed_dispatch_reports_device_enqueue_and_wait_time() {
    let Some(backend) = backend() else { return };
    let dynamic: &dyn VyreBackend = backend;
    let n = 1 << 22;
    let mut rng = Rng::new(13);
    let inputs = vec![rng.bytes_u32(n as usize), rng.bytes_u32(n as usize)];
    let program = vadd(n, 2);
    let borrowed: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let timed = dynamic
        .dispatch_borrowed_timed(&program, &borrowed, &DispatchConfig::default())
        .unwrap();
    assert_eq!(timed.outputs, reference(&program, &inputs).unwrap());
    let (device, enqueue, wait) = (
        timed.device_ns.unwrap(),
        timed.enqueue_ns.unwrap(),
        timed.wait_ns.unwrap(),
    );
    println!(
        "timed vadd 2^22: wall {} device {device} enqueue {enqueue} wait {wait} (ns)",
        timed.wall_ns
    );
    assert!(device > 0 && device < timed.wall_ns);
    assert!(enqueue + wait <= timed.wall_ns + 1_000_000);
    assert!(backend.metric("vyre_cuda_timed_dispatches_total") >= 1);
}

/// `acc[i] = acc[i] * 3 + sum(k * seed[i] for k in 0..iters)`: in place on resident
/// buffers, slow enough (`iters` dependent steps per thread) to still be running when an
/// asynchronous dispatch returns.
fn slow_in_place(n: u32, iters: u32) -> vyre_foundation::ir::Program {
    use vyre_foundation::ir::{BinOp, BufferAccess, BufferDecl, DataType, Expr, Node, Program};
    let bin = common::kernels::bin;
    Program::wrapped(
        vec![
            BufferDecl::storage("acc", 0, BufferAccess::ReadWrite, DataType::U32).with_count(n),
            BufferDecl::read("seed", 1, DataType::U32).with_count(n),
        ],
        [256, 1, 1],
        vec![Node::if_then(
            bin(BinOp::Lt, Expr::gid_x(), Expr::u32(n)),
            vec![
                Node::let_bind(
                    "sum",
                    bin(BinOp::Mul, Expr::load("acc", Expr::gid_x()), Expr::u32(3)),
                ),
                Node::loop_for(
                    "k",
                    Expr::u32(0),
                    Expr::u32(iters),
                    vec![Node::assign(
                        "sum",
                        bin(
                            BinOp::Add,
                            Expr::var("sum"),
                            bin(
                                BinOp::Mul,
                                Expr::var("k"),
                                Expr::load("seed", Expr::gid_x()),
                            ),
                        ),
                    )],
                ),
                Node::store("acc", Expr::gid_x(), Expr::var("sum")),
            ],
        )],
    )
}

#[test]
fn resident_async_dispatch_returns_before_the_kernel_ends() {
    let Some(backend) = backend() else { return };
    let dynamic: &dyn VyreBackend = backend;
    let n = 4096u32;
    let mut rng = Rng::new(21);
    let (acc, seed) = (rng.bytes_u32(n as usize), rng.bytes_u32(n as usize));
    let small = slow_in_place(n, 1000);
    let want = reference(&small, &[acc.clone(), seed.clone()]).unwrap();
    let acc_r = dynamic.allocate_resident(acc.len()).unwrap();
    let seed_r = dynamic.allocate_resident(seed.len()).unwrap();
    let reset = |acc_bytes: &[u8]| {
        dynamic
            .upload_resident_many(&[(&acc_r, acc_bytes), (&seed_r, &seed[..])])
            .unwrap()
    };
    // Correct, with device time, results left in the buffers.
    reset(&acc);
    let handles = [acc_r.clone(), seed_r.clone()];
    let pending = dynamic
        .dispatch_resident_async(&small, &handles, &DispatchConfig::default())
        .unwrap();
    let timed = pending.await_timed_result().unwrap();
    assert!(
        timed.outputs.is_empty(),
        "results stay in the resident buffers"
    );
    assert!(timed.device_ns.is_some_and(|ns| ns > 0), "{timed:?}");
    assert_eq!(dynamic.download_resident(&acc_r).unwrap(), want[0]);

    // A long kernel (about 2^24 dependent steps per thread) is still running when the
    // call returns; `is_ready` polls; awaiting waits. Compiling a new program happens in
    // the call (before anything is enqueued), so the timed call reuses a module loaded by
    // a first dispatch: under load (a fuzz run beside it) the JIT alone took longer than
    // the kernel.
    let slow = slow_in_place(n, 1 << 24);
    dynamic
        .dispatch_resident_async(&slow, &handles, &DispatchConfig::default())
        .unwrap()
        .await_timed_result()
        .unwrap();
    reset(&acc);
    let started = std::time::Instant::now();
    let pending = dynamic
        .dispatch_resident_async(&slow, &handles, &DispatchConfig::default())
        .unwrap();
    let returned = started.elapsed();
    assert!(
        !pending.is_ready(),
        "returned {returned:?} after start, before the kernel ended"
    );
    let timed = pending.await_timed_result().unwrap();
    let device = std::time::Duration::from_nanos(timed.device_ns.unwrap());
    println!("resident async: returned after {returned:?}, kernel ran {device:?}");
    assert!(returned < device, "{returned:?} vs kernel {device:?}");

    // Dropping an unawaited dispatch waits for it: the buffer holds the finished result.
    reset(&acc);
    let pending = dynamic
        .dispatch_resident_async(&small, &handles, &DispatchConfig::default())
        .unwrap();
    drop(pending);
    assert_eq!(dynamic.download_resident(&acc_r).unwrap(), want[0]);

    // Handles are checked before anything is enqueued.
    let text = fix_text(
        dynamic
            .dispatch_resident_async(
                &small,
                std::slice::from_ref(&acc_r),
                &DispatchConfig::default(),
            )
            .err()
            .expect("one handle for two buffers"),
    );
    assert!(text.contains("resident handle"), "{text}");
    dynamic.free_resident(acc_r).unwrap();
    dynamic.free_resident(seed_r).unwrap();
}
