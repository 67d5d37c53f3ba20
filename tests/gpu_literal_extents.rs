//! Loads at literal indices (`KernelBinding::literal_extent`, emitter v46): a single-entry
//! kernel reads `p[3]` without a bounds check, and the host launches the kernel's
//! bounds-checked variant wherever a bound buffer is shorter than the elements it reads
//! at fixed indices. Without a device: what the emitter records and emits. With one:
//! every launch path (the packed small path, the general path, resident dispatch, a
//! captured resident sequence) matches vyre-reference with the buffer long enough, too
//! short and empty, so the unchecked loads never run past a short buffer.

mod common;

use common::gpu::{backend, fresh, reference, Rng};
use common::kernels::bin;
use vyre_cuda::codegen::{emit_ptx, PtxTarget};
use vyre_cuda::CudaOptions;
use vyre_driver::{DispatchConfig, ResidentDispatchStep, ResidentReadRange, Resource};
use vyre_foundation::ir::{BinOp, BufferAccess, BufferDecl, DataType, Expr, Node, Program};

/// `out[i] = x[i] * p[0] + p[3]` over `n` invocations; bindings `p` (0), `x` (1),
/// `out` (2), so resident handles go in that order.
fn scaled(n: u32) -> Program {
    let i = Expr::gid_x();
    let value = bin(
        BinOp::Add,
        bin(
            BinOp::Mul,
            Expr::load("x", i.clone()),
            Expr::load("p", Expr::u32(0)),
        ),
        Expr::load("p", Expr::u32(3)),
    );
    Program::wrapped(
        vec![
            BufferDecl::read("p", 0, DataType::U32),
            BufferDecl::read("x", 1, DataType::U32),
            BufferDecl::output("out", 2, DataType::U32).with_count(n),
        ],
        [64, 1, 1],
        vec![Node::if_then(
            Expr::lt(i.clone(), Expr::u32(n)),
            vec![Node::store("out", i, value)],
        )],
    )
}

/// One invocation folds `a[0..8]` (literal indices only) with xor and rotations into
/// `out[0]`: the shape of a hash round reading its state.
fn folded() -> Program {
    let mut acc = Expr::u32(0x9e37_79b9);
    for k in 0..8 {
        let rotated = bin(
            BinOp::BitOr,
            bin(BinOp::Shl, acc.clone(), Expr::u32(5)),
            bin(BinOp::Shr, acc, Expr::u32(27)),
        );
        acc = bin(BinOp::BitXor, rotated, Expr::load("a", Expr::u32(k)));
    }
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32),
            BufferDecl::storage("out", 1, BufferAccess::ReadWrite, DataType::U32).with_count(1),
        ],
        [1, 1, 1],
        vec![Node::if_then(
            Expr::eq(Expr::gid_x(), Expr::u32(0)),
            vec![Node::store("out", Expr::u32(0), acc)],
        )],
    )
}

fn words(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn the_emitter_records_literal_extents_and_a_checked_variant() {
    let kernel = emit_ptx(&scaled(1000), None, PtxTarget::sm90()).expect("emits");
    let extent = |name: &str| {
        let binding = kernel.abi.bindings.iter().find(|b| &*b.name == name);
        binding.expect("a binding").literal_extent
    };
    assert_eq!((extent("p"), extent("x"), extent("out")), (4, 0, 0));
    let checked = kernel.checked_ptx.as_ref().expect("a checked variant");
    // The trusting entry selects no address for `p`'s loads; the checked one selects one
    // per load (`x[i]` keeps its check in both).
    let selects = |ptx: &str| ptx.matches("selp.b64").count();
    assert_eq!(selects(checked), selects(&kernel.ptx) + 2, "{checked}");

    let kernel = emit_ptx(&folded(), None, PtxTarget::sm90()).expect("emits");
    assert_eq!(kernel.abi.bindings[0].literal_extent, 8);
    assert!(kernel.checked_ptx.is_some());

    // A buffer read only at invocation-dependent indices has no extent and no variant.
    let plain = common::kernels::affine(3, 1, 64);
    let kernel = emit_ptx(&plain, None, PtxTarget::sm90()).expect("emits");
    assert!(kernel.checked_ptx.is_none());
    assert!(kernel.abi.bindings.iter().all(|b| b.literal_extent == 0));
}

/// The parameter buffers every path runs with: long enough, one short of `p[3]`, empty.
fn params() -> [Vec<u8>; 3] {
    [words(&[7, 11, 13, 17]), words(&[7, 11, 13]), Vec::new()]
}

#[test]
fn every_launch_path_matches_the_reference_with_short_buffers() {
    let Some(shared) = backend() else { return };
    let general = fresh(CudaOptions {
        small_dispatch_bytes: 0,
        ..CudaOptions::from_env().expect("options")
    })
    .expect("a second backend");
    let n = 1000u32;
    let program = scaled(n);
    let x = Rng::new(5).bytes_u32(n as usize);
    let config = DispatchConfig::default();
    for p in params() {
        let want = reference(&program, &[p.clone(), x.clone()]).expect("the reference runs it");
        for (path, backend) in [("packed small path", shared), ("general path", &general)] {
            let got = backend.dispatch(&program, &[p.clone(), x.clone()], &config);
            assert_eq!(got.expect(path), want, "{path}, p of {} bytes", p.len());
        }

        // Resident dispatch, and a resident sequence run three times (captured as a CUDA
        // graph on its second sight, replayed on its third).
        let upload = |bytes: &[u8]| {
            let r = shared.allocate_resident(bytes.len().max(4)).unwrap();
            shared.upload_resident_at(&r, 0, bytes).unwrap();
            r
        };
        // A zero-length resident buffer cannot be allocated: the empty case binds a
        // 4-byte buffer whose one element is zero, so `p[3]` is still past its end.
        let rp = if p.is_empty() {
            upload(&[0; 4])
        } else {
            upload(&p)
        };
        let want = if p.is_empty() {
            reference(&program, &[vec![0; 4], x.clone()]).unwrap()
        } else {
            want
        };
        let rx = upload(&x);
        let out = shared.allocate_resident(n as usize * 4).unwrap();
        let resources: [Resource; 3] = [rp.clone(), rx.clone(), out.clone()];
        shared
            .dispatch_resident_timed(&program, &resources, &config)
            .expect("resident dispatch");
        assert_eq!(shared.download_resident(&out).unwrap(), want[0], "resident");
        let step = ResidentDispatchStep {
            program: &program,
            resources: &resources,
            grid_override: None,
            workgroup_override: None,
        };
        let read = ResidentReadRange {
            resource: &out,
            byte_offset: 0,
            byte_len: n as usize * 4,
        };
        for round in 0..3 {
            let mut got = Vec::new();
            shared
                .dispatch_resident_sequence_read_ranges_into(
                    std::slice::from_ref(&step),
                    std::slice::from_ref(&read),
                    &mut [&mut got],
                )
                .expect("resident sequence");
            assert_eq!(got, want[0], "sequence round {round}");
        }
        for r in [rp, rx, out] {
            shared.free_resident(r).unwrap();
        }
    }

    let program = folded();
    for a in [
        words(&[1, 2, 3, 4, 5, 6, 7, 8]),
        words(&[1, 2, 3, 4, 5]),
        Vec::new(),
    ] {
        let inputs = [a.clone(), vec![0; 4]];
        let want = reference(&program, &inputs).expect("the reference runs it");
        for (path, backend) in [("packed small path", shared), ("general path", &general)] {
            let got = backend.dispatch(&program, &inputs, &config);
            assert_eq!(got.expect(path), want, "{path}, a of {} bytes", a.len());
        }
    }
    println!(
        "literal extents: every path matched the reference with long, short and empty buffers"
    );
}
