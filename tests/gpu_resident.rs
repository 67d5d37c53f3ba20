//! Resident buffers, resident dispatch and resident sequences on the GPU, against
//! vyre-reference; bad handles, ranges, counts and budgets fail with the right
//! `BackendError`. Skips without a CUDA device.

mod common;

use common::gpu::{backend, fix_text, fresh, reference, Rng};
use common::kernels::{accumulate, affine, vadd, vadd_in_order, words};
use vyre_cuda::{CudaBackend, CudaOptions};
use vyre_driver::{
    BackendError, DispatchConfig, ResidentDispatchStep, ResidentReadRange, Resource, VyreBackend,
};

fn options() -> CudaOptions {
    CudaOptions::from_env().unwrap()
}

fn upload_new(backend: &CudaBackend, bytes: &[u8]) -> Resource {
    let r = backend.allocate_resident(bytes.len()).unwrap();
    backend.upload_resident(&r, bytes).unwrap();
    r
}

#[test]
fn resident_vadd_matches_the_reference_in_binding_order() {
    let Some(backend) = backend() else { return };
    let n = 10_000u32;
    let mut rng = Rng::new(1);
    let (a, b) = (rng.bytes_u32(n as usize), rng.bytes_u32(n as usize));
    let program = vadd(n, 9);
    let want = reference(&program, &[a.clone(), b.clone()]).unwrap();
    let ra = upload_new(backend, &a);
    let rb = upload_new(backend, &b);
    let out = backend.allocate_resident(n as usize * 4).unwrap();
    // Fresh buffers start zeroed.
    assert!(backend
        .download_resident(&out)
        .unwrap()
        .iter()
        .all(|&x| x == 0));
    // Binding order: out (0), b (1), a (2).
    let resources = [out.clone(), rb.clone(), ra.clone()];
    let timed = backend
        .dispatch_resident_timed(&program, &resources, &DispatchConfig::default())
        .unwrap();
    assert!(timed.outputs.is_empty());
    assert!(timed.device_ns.is_some() && timed.enqueue_ns.is_some() && timed.wait_ns.is_some());
    assert!(timed.wall_ns >= timed.device_ns.unwrap() / 2);
    assert_eq!(backend.download_resident(&out).unwrap(), want[0]);
    // The same through the VyreBackend trait object.
    let dynamic: &dyn VyreBackend = backend;
    dynamic
        .upload_resident(&out, &vec![0; n as usize * 4])
        .unwrap();
    let timed = dynamic
        .dispatch_resident_timed(&program, &resources, &DispatchConfig::default())
        .unwrap();
    assert!(timed.device_ns.is_some());
    assert_eq!(dynamic.download_resident(&out).unwrap(), want[0]);
    println!(
        "resident vadd n={n}: device {} ns, wall {} ns",
        timed.device_ns.unwrap(),
        timed.wall_ns
    );
    for r in [ra, rb, out] {
        backend.free_resident(r).unwrap();
    }
}

#[test]
fn ranged_and_batched_transfers_round_trip() {
    let Some(backend) = backend() else { return };
    let dynamic: &dyn VyreBackend = backend;
    let mut rng = Rng::new(2);
    let x = dynamic.allocate_resident(4096).unwrap();
    let y = dynamic.allocate_resident(100).unwrap();
    let payload = rng.bytes_u32(1024);
    dynamic.upload_resident(&x, &payload).unwrap();
    // Sub-range uploads need not cover the buffer.
    dynamic.upload_resident_at(&x, 10, &[1, 2, 3]).unwrap();
    dynamic
        .upload_resident_at_many(&[(&x, 4000, &[9u8; 96][..]), (&y, 0, &[7u8; 100][..])])
        .unwrap();
    let mut expect = payload.clone();
    expect[10..13].copy_from_slice(&[1, 2, 3]);
    expect[4000..].fill(9);
    assert_eq!(dynamic.download_resident(&x).unwrap(), expect);
    assert_eq!(dynamic.download_resident_range(&y, 10, 5).unwrap(), [7; 5]);
    let mut reuse = Vec::with_capacity(4096);
    let before = reuse.as_ptr();
    dynamic.download_resident_into(&x, &mut reuse).unwrap();
    assert_eq!(reuse, expect);
    assert_eq!(
        reuse.as_ptr(),
        before,
        "download_resident_into reuses capacity"
    );
    dynamic
        .download_resident_range_into(&x, 4000, 0, &mut reuse)
        .unwrap();
    assert!(reuse.is_empty());
    let (mut o1, mut o2, mut o3) = (vec![0xAA; 3], Vec::new(), Vec::new());
    dynamic
        .download_resident_ranges_into(
            &[(&x, 8, 8), (&y, 99, 1), (&x, 0, 4096)],
            &mut [&mut o1, &mut o2, &mut o3],
        )
        .unwrap();
    assert_eq!((o1.as_slice(), o2.as_slice()), (&expect[8..16], &[7u8][..]));
    assert_eq!(o3, expect);
    let many = [rng.bytes_u32(1024), rng.bytes_u32(25)];
    dynamic
        .upload_resident_many(&[(&x, &many[0][..]), (&y, &many[1][..])])
        .unwrap();
    assert_eq!(dynamic.download_resident(&x).unwrap(), many[0]);
    assert_eq!(dynamic.download_resident(&y).unwrap(), many[1]);

    // Large enough for pinned, chunked, multi-worker staging in both directions.
    let big_len = 96 << 20;
    let big_bytes = rng.bytes_u32(big_len / 4);
    let big = upload_new(backend, &big_bytes);
    assert!(backend.download_resident(&big).unwrap() == big_bytes);
    let tail = backend
        .download_resident_range(&big, big_len - 12345, 12345)
        .unwrap();
    assert_eq!(tail, big_bytes[big_len - 12345..]);
    for r in [x, y, big] {
        dynamic.free_resident(r).unwrap();
    }
}

#[test]
fn bad_handles_are_clear_errors() {
    let Some(backend) = backend() else { return };
    let dynamic: &dyn VyreBackend = backend;
    let r = dynamic.allocate_resident(64).unwrap();
    let Resource::Resident(handle) = r else {
        panic!("allocate_resident returns a resident handle")
    };
    let (owner, id) = (handle.owner(), handle.id());
    dynamic.free_resident(r.clone()).unwrap();
    let text = fix_text(dynamic.download_resident(&r).unwrap_err());
    assert!(text.contains("already freed"), "{text}");
    let text = fix_text(dynamic.free_resident(r.clone()).unwrap_err());
    assert!(text.contains("already freed"), "{text}");
    // The slot is reused: the stale handle still fails and the new one works.
    let reused = dynamic.allocate_resident(64).unwrap();
    assert_ne!(reused, r);
    assert!(dynamic.upload_resident(&r, &[0; 64]).is_err());
    dynamic.upload_resident(&reused, &[5; 64]).unwrap();
    // Forged ids in this backend's namespace.
    for forged in [0u64, 1, u64::MAX, id ^ (1 << 40), id | 0xFF_FFFF] {
        let text = fix_text(
            dynamic
                .download_resident(&Resource::Resident(owner.handle(forged)))
                .unwrap_err(),
        );
        assert!(
            text.contains("another backend instance")
                || text.contains("never allocated")
                || text.contains("already freed"),
            "{forged:#x}: {text}"
        );
    }
    // A live id under a forged owner.
    let live = dynamic.allocate_resident(64).unwrap();
    let Resource::Resident(live_handle) = live else {
        panic!("a resident handle")
    };
    let stranger = vyre_driver::ResidentOwner::new().unwrap();
    let forged = Resource::Resident(stranger.handle(live_handle.id()));
    let text = fix_text(dynamic.download_resident(&forged).unwrap_err());
    assert!(text.contains("another backend instance"), "{text}");
    dynamic.free_resident(live).unwrap();
    // A handle from another backend instance.
    let other = fresh(options()).unwrap();
    let foreign = other.allocate_resident(64).unwrap();
    let text = fix_text(dynamic.download_resident(&foreign).unwrap_err());
    assert!(text.contains("another backend instance"), "{text}");
    assert!(dynamic.free_resident(foreign.clone()).is_err());
    other.free_resident(foreign).unwrap();
    // Host bytes where a handle belongs.
    let text = fix_text(
        dynamic
            .upload_resident(&Resource::Borrowed(vec![1]), &[1])
            .unwrap_err(),
    );
    assert!(text.contains("Resource::Borrowed"), "{text}");
    dynamic.free_resident(reused).unwrap();
}

#[test]
fn ranges_counts_lengths_and_budgets_are_checked() {
    let Some(backend) = backend() else { return };
    let dynamic: &dyn VyreBackend = backend;
    let r = dynamic.allocate_resident(100).unwrap();
    let expect_invalid = |error: BackendError, needle: &str| {
        assert!(
            matches!(error, BackendError::InvalidProgram { .. }),
            "{error:?}"
        );
        let text = fix_text(error);
        assert!(text.contains(needle), "{text}");
    };
    expect_invalid(
        dynamic.upload_resident(&r, &[0; 99]).unwrap_err(),
        "99 byte(s)",
    );
    expect_invalid(dynamic.upload_resident(&r, &[]).unwrap_err(), "0 byte(s)");
    expect_invalid(
        dynamic.upload_resident_at(&r, 98, &[0; 3]).unwrap_err(),
        "does not fit",
    );
    expect_invalid(
        dynamic
            .upload_resident_at(&r, usize::MAX, &[0; 3])
            .unwrap_err(),
        "does not fit",
    );
    expect_invalid(
        dynamic.download_resident_range(&r, 101, 0).unwrap_err(),
        "does not fit",
    );
    expect_invalid(
        dynamic
            .download_resident_range(&r, usize::MAX - 1, 4)
            .unwrap_err(),
        "does not fit",
    );
    // Nothing was written by the failed batch: it is validated before any copy.
    let ok_then_bad = dynamic
        .upload_resident_at_many(&[(&r, 0, &[1u8; 10][..]), (&r, 95, &[1u8; 10][..])])
        .unwrap_err();
    expect_invalid(ok_then_bad, "does not fit");
    assert!(dynamic
        .download_resident(&r)
        .unwrap()
        .iter()
        .all(|&b| b == 0));
    let mut one = Vec::new();
    expect_invalid(
        dynamic
            .download_resident_ranges_into(&[(&r, 0, 1), (&r, 1, 1)], &mut [&mut one])
            .unwrap_err(),
        "output slot",
    );
    // Zero-length allocations are refused.
    expect_invalid(dynamic.allocate_resident(0).unwrap_err(), "0 bytes");
    // Handle count mismatch for a dispatch.
    let text = fix_text(
        dynamic
            .dispatch_resident_timed(
                &vadd(25, 0),
                std::slice::from_ref(&r),
                &DispatchConfig::default(),
            )
            .unwrap_err(),
    );
    assert!(text.contains("out, b, a"), "{text}");
    dynamic.free_resident(r).unwrap();

    // Over budget: refused with the exact numbers before the driver is asked.
    let mut small = options();
    small.resident_budget = Some(1 << 20);
    let limited = fresh(small).unwrap();
    let keep = limited.allocate_resident(600 << 10).unwrap();
    match VyreBackend::allocate_resident(&limited, 600 << 10).unwrap_err() {
        BackendError::DeviceOutOfMemory {
            requested,
            available,
        } => assert_eq!((requested, available), (600 << 10, (1 << 20) - (600 << 10))),
        other => panic!("expected DeviceOutOfMemory, got {other:?}"),
    }
    // Larger than the device itself.
    let huge = backend.device_info().total_memory_bytes as usize * 2;
    assert!(matches!(
        VyreBackend::allocate_resident(backend, huge).unwrap_err(),
        BackendError::DeviceOutOfMemory { .. }
    ));
    limited.free_resident(keep).unwrap();
    limited.allocate_resident(1 << 20).unwrap();
}

fn chain_reference(x: &[u8], acc: &[u8], rounds: usize) -> (Vec<u8>, Vec<u8>) {
    let mut x = reference(&affine(1, 5, 64), &[x.to_vec()])
        .unwrap()
        .remove(0);
    let mut acc = acc.to_vec();
    for _ in 0..rounds {
        x = reference(&affine(3, 1, 64), &[x]).unwrap().remove(0);
        acc = reference(&accumulate(), &[x.clone(), acc])
            .unwrap()
            .remove(0);
    }
    (x, acc)
}

#[test]
fn sequences_run_in_order_and_honour_overrides() {
    let Some(backend) = backend() else { return };
    let n = 5000usize;
    let mut rng = Rng::new(3);
    let (x0, acc0) = (rng.bytes_u32(n), rng.bytes_u32(n));
    let x = upload_new(backend, &x0);
    let acc = upload_new(backend, &acc0);
    let shift = affine(1, 5, 64);
    let scale = affine(3, 1, 64);
    let add = accumulate();
    // The same `scale` step with a 32-wide workgroup and a grid sized for it.
    let grid = Some([(n as u32).div_ceil(32), 1, 1]);
    let x_only = [x.clone()];
    let acc_src = [acc.clone(), x.clone()];
    let steps = [
        ResidentDispatchStep {
            program: &shift,
            resources: &x_only,
            grid_override: None,
            workgroup_override: None,
        },
        ResidentDispatchStep {
            program: &scale,
            resources: &x_only,
            grid_override: grid,
            workgroup_override: Some([32, 1, 1]),
        },
        ResidentDispatchStep {
            program: &add,
            resources: &acc_src,
            grid_override: None,
            workgroup_override: None,
        },
    ];
    let (want_x, want_acc) = chain_reference(&x0, &acc0, 1);
    let ranges = [
        ResidentReadRange {
            resource: &acc,
            byte_offset: 0,
            byte_len: n * 4,
        },
        ResidentReadRange {
            resource: &x,
            byte_offset: 400,
            byte_len: 40,
        },
    ];
    let (mut got_acc, mut got_x) = (Vec::new(), Vec::new());
    let timing = backend
        .dispatch_resident_sequence_read_ranges_timed_into(
            &steps,
            &ranges,
            &mut [&mut got_acc, &mut got_x],
        )
        .unwrap();
    assert_eq!(got_acc, want_acc);
    assert_eq!(got_x, want_x[400..440]);
    assert!(timing.device_ns.is_some_and(|ns| ns > 0));
    println!("3-step resident sequence: {timing:?}");

    // The untimed variant through the trait, from fresh data.
    let dynamic: &dyn VyreBackend = backend;
    dynamic
        .upload_resident_many(&[(&x, &x0[..]), (&acc, &acc0[..])])
        .unwrap();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    dynamic
        .dispatch_resident_sequence_read_ranges_into(&steps, &ranges, &mut [&mut a, &mut b])
        .unwrap();
    assert_eq!((a, b), (want_acc, want_x[400..440].to_vec()));

    // A failing step (bad handle count) fails the whole sequence before anything runs.
    dynamic
        .upload_resident_many(&[(&x, &x0[..]), (&acc, &acc0[..])])
        .unwrap();
    let mixed = [
        ResidentDispatchStep {
            program: &shift,
            resources: &x_only,
            grid_override: None,
            workgroup_override: None,
        },
        ResidentDispatchStep {
            program: &add,
            resources: &x_only,
            grid_override: None,
            workgroup_override: None,
        },
    ];
    fix_text(
        dynamic
            .dispatch_resident_sequence_read_ranges_into(&mixed, &[], &mut [])
            .unwrap_err(),
    );
    assert_eq!(dynamic.download_resident(&x).unwrap(), x0, "nothing ran");
    backend.free_resident(x).unwrap();
    backend.free_resident(acc).unwrap();
}

#[test]
fn repeated_sequences_replay_a_graph() {
    let Some(backend) = backend() else { return };
    let n = 3000usize;
    let rounds = 25u32;
    let mut rng = Rng::new(4);
    let (x0, acc0) = (rng.bytes_u32(n), rng.bytes_u32(n));
    let x = upload_new(backend, &x0);
    let acc = upload_new(backend, &acc0);
    let (shift, scale, add) = (affine(1, 5, 64), affine(3, 1, 64), accumulate());
    let x_only = [x.clone()];
    let acc_src = [acc.clone(), x.clone()];
    let step = |program, resources| ResidentDispatchStep {
        program,
        resources,
        grid_override: None,
        workgroup_override: None,
    };
    let prefix = [step(&shift, &x_only[..])];
    let repeated = [step(&scale, &x_only[..]), step(&add, &acc_src[..])];
    let ranges = [
        ResidentReadRange {
            resource: &acc,
            byte_offset: 0,
            byte_len: n * 4,
        },
        ResidentReadRange {
            resource: &x,
            byte_offset: 0,
            byte_len: n * 4,
        },
    ];
    let captures = backend.metric("vyre_cuda_graph_captures_total");
    let replays = backend.metric("vyre_cuda_graph_launches_total");
    let (mut got_acc, mut got_x) = (Vec::new(), Vec::new());
    let timing = backend
        .dispatch_resident_repeated_sequence_read_ranges_into(
            &prefix,
            &repeated,
            rounds,
            &ranges,
            &mut [&mut got_acc, &mut got_x],
        )
        .unwrap();
    let (want_x, want_acc) = chain_reference(&x0, &acc0, rounds as usize);
    assert_eq!(words(&got_acc), words(&want_acc));
    assert_eq!(got_x, want_x);
    // The prefix and all 25 repeats are one graph: one capture, one replay.
    assert_eq!(
        backend.metric("vyre_cuda_graph_captures_total"),
        captures + 1
    );
    assert_eq!(
        backend.metric("vyre_cuda_graph_launches_total"),
        replays + 1
    );
    println!("repeated sequence x{rounds}: {timing:?}");
    // The identical call again replays the cached graph without capturing.
    let hits = backend.metric("vyre_cuda_graph_cache_hits_total");
    backend
        .upload_resident_many(&[(&x, &x0[..]), (&acc, &acc0[..])])
        .unwrap();
    let again = backend
        .dispatch_resident_repeated_sequence_read_ranges_into(
            &prefix,
            &repeated,
            rounds,
            &ranges,
            &mut [&mut got_acc, &mut got_x],
        )
        .unwrap();
    assert_eq!(words(&got_acc), words(&want_acc));
    assert_eq!(got_x, want_x);
    assert_eq!(
        backend.metric("vyre_cuda_graph_captures_total"),
        captures + 1
    );
    assert_eq!(backend.metric("vyre_cuda_graph_cache_hits_total"), hits + 1);
    println!("repeated sequence x{rounds}, cached: {again:?}");
    // More repeats than one graph unrolls: the prefix with 64 repeats, 64 repeats, then
    // the remaining 22 (150 = 64 + 64 + 22).
    let long = 150u32;
    backend
        .upload_resident_many(&[(&x, &x0[..]), (&acc, &acc0[..])])
        .unwrap();
    let replays = backend.metric("vyre_cuda_graph_launches_total");
    backend
        .dispatch_resident_repeated_sequence_read_ranges_into(
            &prefix,
            &repeated,
            long,
            &ranges,
            &mut [&mut got_acc, &mut got_x],
        )
        .unwrap();
    let (long_x, long_acc) = chain_reference(&x0, &acc0, long as usize);
    assert_eq!(words(&got_acc), words(&long_acc));
    assert_eq!(got_x, long_x);
    assert_eq!(
        backend.metric("vyre_cuda_graph_launches_total"),
        replays + 3
    );
    // Zero repeats run only the prefix.
    let dynamic: &dyn VyreBackend = backend;
    dynamic
        .upload_resident_many(&[(&x, &x0[..]), (&acc, &acc0[..])])
        .unwrap();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    dynamic
        .dispatch_resident_repeated_sequence_read_ranges_into(
            &prefix,
            &repeated,
            0,
            &ranges,
            &mut [&mut a, &mut b],
        )
        .unwrap();
    let (want_x, want_acc) = chain_reference(&x0, &acc0, 0);
    assert_eq!((a, b), (want_acc, want_x));
    backend.free_resident(x).unwrap();
    backend.free_resident(acc).unwrap();
}

/// `x[i] = x[i] / d[i]` over i32 (a zero divisor faults). Bindings: `x` 0, `d` 1.
fn quotient() -> vyre_foundation::ir::Program {
    use vyre_foundation::ir::{BinOp, BufferAccess, BufferDecl, DataType, Expr, Node, Program};
    let i = Expr::gid_x();
    Program::wrapped(
        vec![
            BufferDecl::storage("x", 0, BufferAccess::ReadWrite, DataType::I32),
            BufferDecl::storage("d", 1, BufferAccess::ReadOnly, DataType::I32),
        ],
        [64, 1, 1],
        vec![Node::if_then(
            Expr::lt(i.clone(), Expr::buf_len("x")),
            vec![Node::store(
                "x",
                i.clone(),
                common::kernels::bin(BinOp::Div, Expr::load("x", i.clone()), Expr::load("d", i)),
            )],
        )],
    )
}

#[test]
fn sequences_replay_cached_graphs_until_their_buffers_are_freed() {
    let Some(backend) = backend() else { return };
    let n = 1000usize;
    let mut rng = Rng::new(6);
    let x0 = rng.bytes_u32(n);
    let x = upload_new(backend, &x0);
    let scale = affine(3, 1, 64);
    let x_only = [x.clone()];
    let steps: Vec<ResidentDispatchStep<'_>> = (0..10)
        .map(|_| ResidentDispatchStep {
            program: &scale,
            resources: &x_only,
            grid_override: None,
            workgroup_override: None,
        })
        .collect();
    let mut want = x0.clone();
    for _ in 0..10 {
        want = reference(&scale, &[want]).unwrap().remove(0);
    }
    let ranges = [ResidentReadRange {
        resource: &x,
        byte_offset: 0,
        byte_len: n * 4,
    }];
    let metric = |name: &str| backend.metric(name);
    let (captures, hits) = (
        metric("vyre_cuda_graph_captures_total"),
        metric("vyre_cuda_graph_cache_hits_total"),
    );
    let mut got = Vec::new();
    // First sight: launched directly; second: captured; third: replayed from the cache.
    for (call, (want_captures, want_hits)) in [(0, 0), (1, 0), (1, 1)].into_iter().enumerate() {
        backend.upload_resident(&x, &x0).unwrap();
        backend
            .dispatch_resident_sequence_read_ranges_into(&steps, &ranges, &mut [&mut got])
            .unwrap();
        assert_eq!(got, want, "call {call}");
        assert_eq!(
            (
                metric("vyre_cuda_graph_captures_total") - captures,
                metric("vyre_cuda_graph_cache_hits_total") - hits
            ),
            (want_captures, want_hits),
            "call {call}"
        );
    }
    let cached = metric("vyre_cuda_cached_graphs");
    assert!(cached >= 1);
    // Freeing the buffer drops its graphs; the freed handle is refused, never replayed.
    backend.free_resident(x.clone()).unwrap();
    assert!(metric("vyre_cuda_cached_graphs") < cached);
    let text = fix_text(
        backend
            .dispatch_resident_sequence_read_ranges_into(&steps, &[], &mut [])
            .unwrap_err(),
    );
    assert!(text.contains("already freed"), "{text}");

    // A cached graph that faults reports the fault, and the next call is clean.
    let divide = quotient();
    let ints =
        |values: &[i32]| -> Vec<u8> { values.iter().flat_map(|v| v.to_le_bytes()).collect() };
    let numerators: Vec<i32> = (0..256).map(|k| 1000 + k).collect();
    let divisors: Vec<i32> = (0..256).map(|k| 1 + k % 7).collect();
    let mut zero_at_9 = divisors.clone();
    zero_at_9[9] = 0;
    let q = upload_new(backend, &ints(&numerators));
    let d = upload_new(backend, &ints(&divisors));
    let pair = [q.clone(), d.clone()];
    let two = [0, 1].map(|_| ResidentDispatchStep {
        program: &divide,
        resources: &pair,
        grid_override: None,
        workgroup_override: None,
    });
    let q_range = [ResidentReadRange {
        resource: &q,
        byte_offset: 0,
        byte_len: 256 * 4,
    }];
    let expected = |divisors: &[i32]| {
        let mut x = ints(&numerators);
        for _ in 0..2 {
            x = reference(&divide, &[x, ints(divisors)]).unwrap().remove(0);
        }
        x
    };
    for call in 0..3 {
        backend.upload_resident(&q, &ints(&numerators)).unwrap();
        backend
            .dispatch_resident_sequence_read_ranges_into(&two, &q_range, &mut [&mut got])
            .unwrap();
        assert_eq!(got, expected(&divisors), "call {call}");
    }
    backend.upload_resident(&d, &ints(&zero_at_9)).unwrap();
    let text = fix_text(
        backend
            .dispatch_resident_sequence_read_ranges_into(&two, &q_range, &mut [&mut got])
            .unwrap_err(),
    );
    assert!(text.to_lowercase().contains("division"), "{text}");
    assert!(got.is_empty(), "a faulted sequence returns no bytes");
    backend.upload_resident(&d, &ints(&divisors)).unwrap();
    backend.upload_resident(&q, &ints(&numerators)).unwrap();
    backend
        .dispatch_resident_sequence_read_ranges_into(&two, &q_range, &mut [&mut got])
        .unwrap();
    assert_eq!(got, expected(&divisors), "after the fault");
    backend.free_resident(q).unwrap();
    backend.free_resident(d).unwrap();
}

#[test]
fn device_buffers_dispatch_and_reject_foreign_buffers() {
    let Some(backend) = backend() else { return };
    let dynamic: &dyn VyreBackend = backend;
    let n = 777u32;
    let mut rng = Rng::new(5);
    let (a, b) = (rng.bytes_u32(n as usize), rng.bytes_u32(n as usize));
    let program = vadd_in_order(n);
    let want = reference(&program, &[a.clone(), b.clone()]).unwrap();
    let mut da = dynamic.allocate_device_buffer(a.len()).unwrap();
    let mut db = dynamic.allocate_device_buffer(b.len()).unwrap();
    let mut dout = dynamic.allocate_device_buffer(n as usize * 4).unwrap();
    assert_eq!(da.backend_id(), vyre_cuda::BACKEND_ID);
    assert_eq!(da.byte_len(), a.len());
    dynamic.upload_device_buffer(&mut *da, &a).unwrap();
    dynamic.upload_device_buffer(&mut *db, &b).unwrap();
    dynamic
        .dispatch_with_device_buffers(
            &program,
            &[&*da, &*db],
            &mut [&mut *dout],
            &DispatchConfig::default(),
        )
        .unwrap();
    assert_eq!(dynamic.download_device_buffer(&*dout).unwrap(), want[0]);
    // Wrong length upload.
    fix_text(dynamic.upload_device_buffer(&mut *da, &a[4..]).unwrap_err());
    // A buffer of another backend id.
    let wgpu = vyre_driver::HostShimBuffer::allocate("wgpu", 16);
    let error = dynamic.download_device_buffer(&*wgpu).unwrap_err();
    assert!(
        matches!(error, BackendError::UnsupportedFeature { .. }),
        "{error:?}"
    );
    // A host shim claiming to be "vyre-cuda".
    let impostor = vyre_driver::HostShimBuffer::allocate(vyre_cuda::BACKEND_ID, 16);
    let text = fix_text(dynamic.download_device_buffer(&*impostor).unwrap_err());
    assert!(text.contains("not created by vyre-cuda"), "{text}");
    // A buffer of another CudaBackend instance.
    let other = fresh(options()).unwrap();
    let theirs = VyreBackend::allocate_device_buffer(&other, 16).unwrap();
    let text = fix_text(
        dynamic
            .dispatch_with_device_buffers(
                &program,
                &[&*da, &*theirs],
                &mut [&mut *dout],
                &DispatchConfig::default(),
            )
            .unwrap_err(),
    );
    assert!(text.contains("another CudaBackend instance"), "{text}");
    let resident_before = backend.metric("vyre_cuda_resident_buffers");
    dynamic.free_device_buffer(da).unwrap();
    drop(db); // dropping frees too
    assert_eq!(
        backend.metric("vyre_cuda_resident_buffers"),
        resident_before - 2
    );
    dynamic.free_device_buffer(dout).unwrap();
}

#[test]
fn the_registry_backend_forwards_the_resident_api() {
    let Some(_) = backend() else { return };
    use vyre_cuda as _;
    let acquired = vyre_driver::backend::acquire(vyre_cuda::BACKEND_ID).unwrap();
    let n = 512u32;
    let mut rng = Rng::new(6);
    let (a, b) = (rng.bytes_u32(n as usize), rng.bytes_u32(n as usize));
    let program = vadd(n, 1);
    let want = reference(&program, &[a.clone(), b.clone()]).unwrap();
    let ra = acquired.allocate_resident(a.len()).unwrap();
    let rb = acquired.allocate_resident(b.len()).unwrap();
    let out = acquired.allocate_resident(n as usize * 4).unwrap();
    acquired
        .upload_resident_many(&[(&ra, &a[..]), (&rb, &b[..])])
        .unwrap();
    let timed = acquired
        .dispatch_resident_timed(
            &program,
            &[out.clone(), rb.clone(), ra.clone()],
            &DispatchConfig::default(),
        )
        .unwrap();
    assert!(timed.device_ns.is_some());
    assert_eq!(acquired.download_resident(&out).unwrap(), want[0]);
    // vyre 0.7.2's registry wrapper forwards supports_resident_dispatch; it still does not
    // forward the device-buffer methods (nor dispatch_resident_async, which it runs through
    // the trait's synchronous default): the direct backend has them.
    assert!(acquired.supports_resident_dispatch());
    assert!(matches!(
        acquired.allocate_device_buffer(4).unwrap_err(),
        BackendError::UnsupportedFeature { .. }
    ));
    for r in [ra, rb, out] {
        acquired.free_resident(r).unwrap();
    }
}

#[test]
fn lifecycle_prepare_shutdown_and_recovery_reporting() {
    let Some(shared) = backend() else { return };
    assert!(VyreBackend::supports_resident_dispatch(shared));
    assert!(!shared.device_lost());
    shared.try_recover().unwrap();
    let instance = fresh(options()).unwrap();
    instance.prepare().unwrap();
    let (free_before, _) = instance.memory_info().unwrap();
    let held: Vec<Resource> = (0..8)
        .map(|_| instance.allocate_resident(32 << 20).unwrap())
        .collect();
    let (free_during, _) = instance.memory_info().unwrap();
    assert!(free_before - free_during >= 8 * (32 << 20));
    let program = vadd(64, 0);
    let inputs = vec![vec![1u8; 256], vec![2u8; 256]];
    instance
        .dispatch(&program, &inputs, &DispatchConfig::default())
        .unwrap();
    VyreBackend::shutdown(&instance).unwrap();
    let (free_after, _) = shared.memory_info().unwrap();
    println!(
        "shutdown: free before {free_before}, while holding {free_during}, after {free_after}"
    );
    assert!(
        free_after + (16 << 20) >= free_before,
        "resident memory must be released by shutdown"
    );
    let text = fix_text(
        instance
            .dispatch(&program, &inputs, &DispatchConfig::default())
            .unwrap_err(),
    );
    assert!(text.contains("shut down"), "{text}");
    assert!(instance.download_resident(&held[0]).is_err());
    assert!(instance.allocate_resident(4).is_err());
    instance.shutdown().unwrap();
}
