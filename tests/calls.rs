//! Calls run the way the reference runs them: composite ops are inlined (vyre's
//! `inline_composite_calls`), an `Expr::BufferRef` argument rebinds the callee's buffer to
//! the caller's, and a call with no IR body is a clear error. The emitter checks run
//! everywhere; the dispatches (against vyre-reference) need a GPU.

mod common;

use vyre_driver::DispatchConfig;
use vyre_foundation::ir::{BufferDecl, DataType, Expr, Node, Program};
use vyre_foundation::operation::{OperationRegistration, OperationTier};

/// An external (third-party) op: vyre classifies ids by namespace.
const LOOKUP: &str = "vyre_cuda_tests::table_lookup";

/// `out[0] = table[index[0]] * 3`: a composite op over a table it does not own.
fn lookup_body() -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("table", 0, DataType::U32).with_count(16),
            BufferDecl::read("index", 1, DataType::U32).with_count(1),
            BufferDecl::output("out", 2, DataType::U32).with_count(1),
        ],
        [1, 1, 1],
        vec![Node::store(
            "out",
            Expr::u32(0),
            Expr::mul(
                Expr::load("table", Expr::load("index", Expr::u32(0))),
                Expr::u32(3),
            ),
        )],
    )
}

inventory::submit! {
    OperationRegistration::new(LOOKUP, OperationTier::External, Some(lookup_body), None, None)
}

/// Each invocation looks its id (mod 16) up in the caller's `lut` through the op.
fn caller(op: &str) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("lut", 0, DataType::U32).with_count(16),
            BufferDecl::output("out", 1, DataType::U32).with_count(64),
        ],
        [64, 1, 1],
        vec![Node::store(
            "out",
            Expr::gid_x(),
            Expr::call(
                op,
                vec![
                    Expr::buffer_ref("lut"),
                    Expr::rem(Expr::gid_x(), Expr::u32(16)),
                ],
            ),
        )],
    )
}

fn lut() -> Vec<u8> {
    (0..16u32).flat_map(|v| (v * 7 + 1).to_le_bytes()).collect()
}

#[test]
fn a_buffer_reference_argument_reads_the_callers_buffer() {
    let program = caller(LOOKUP);
    let inputs = vec![lut()];
    let want = common::gpu::reference(&program, &inputs).expect("the reference runs the call");
    let expected: Vec<u8> = (0..64u32)
        .flat_map(|i| (((i % 16) * 7 + 1) * 3).to_le_bytes())
        .collect();
    assert_eq!(want, vec![expected]);
    let ptx = vyre_cuda::codegen::emit_ptx(&program, None, vyre_cuda::codegen::PtxTarget::sm90());
    assert!(ptx.is_ok(), "{:?}", ptx.err());
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    let got = backend.dispatch(&program, &inputs, &DispatchConfig::default());
    assert_eq!(got.unwrap(), want);
}

#[test]
fn a_call_without_an_ir_body_is_a_clear_error() {
    let program = caller("vyre_cuda_tests::no_such_op");
    let error = vyre_cuda::codegen::emit_ptx(&program, None, vyre_cuda::codegen::PtxTarget::sm90())
        .unwrap_err();
    let text = vyre_cuda::CudaError::from(error).to_string();
    assert!(text.contains("vyre_cuda_tests::no_such_op"), "{text}");
    assert!(text.contains("no IR body"), "{text}");
    assert_eq!(text.matches("Fix:").count(), 1, "{text}");
    // The reference cannot run it either.
    assert!(common::gpu::reference(&program, &[lut()]).is_err());
}
