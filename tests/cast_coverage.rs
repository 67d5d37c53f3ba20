//! Every cast vyre's validator accepts and vyre-reference runs is lowered: for each pair
//! of a broad list of element types, `out[gid] = cast(to, a[gid])` (in-bounds data), the
//! emitter refuses only where the element type itself is still refused (issue 17's
//! `buffer element type` site). Two gaps of this class were found by reading the emitter
//! (a u64 cast of a u8 load failed at run time; a cast to an 8-bit float was refused);
//! what each cast computes is checked on the GPU by the semantic cases.

mod common;

use vyre_cuda::codegen::{emit_ptx, CodegenError, PtxTarget};
use vyre_foundation::ir::{BufferDecl, DataType, Expr, Node, Program};
use vyre_spec::{QuantizationScale, QuantizationZeroPoint, TypeId};

fn types() -> Vec<DataType> {
    let vec = |element: DataType, count: u8| DataType::Vec {
        element: Box::new(element),
        count,
    };
    vec![
        DataType::U8,
        DataType::I8,
        DataType::U16,
        DataType::I16,
        DataType::U32,
        DataType::I32,
        DataType::U64,
        DataType::I64,
        DataType::F32,
        DataType::F64,
        DataType::Bool,
        DataType::F16,
        DataType::BF16,
        DataType::F8E4M3,
        DataType::F8E5M2,
        DataType::I4,
        DataType::NF4,
        DataType::FP4,
        DataType::Vec2U32,
        DataType::Vec4U32,
        DataType::Bytes,
        DataType::Handle(TypeId(3)),
        DataType::DeviceMesh {
            axes: [2u32].into_iter().collect(),
        },
        vec(DataType::U8, 3),
        vec(DataType::U8, 4),
        vec(DataType::U16, 6),
        vec(DataType::F32, 4),
        vec(DataType::U32, 3),
        vec(DataType::U8, 32),
        vec(DataType::I4, 2),
        DataType::Quantized {
            storage: Box::new(DataType::I4),
            scale: QuantizationScale::PerTensor,
            zero_point: QuantizationZeroPoint::Absent,
        },
    ]
}

fn cast_program(from: &DataType, to: &DataType) -> Program {
    let gid = || Expr::InvocationId { axis: 0 };
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, from.clone()).with_count(8),
            BufferDecl::output("out", 1, to.clone()).with_count(8),
        ],
        [8, 1, 1],
        vec![Node::store(
            "out",
            gid(),
            Expr::cast(to.clone(), Expr::load("a", gid())),
        )],
    )
}

#[test]
fn every_cast_the_reference_runs_is_lowered() {
    let types = types();
    let (mut run, mut lowered) = (0, 0);
    let mut refused = Vec::new();
    for from in types.iter().filter(|t| **t != DataType::Bytes) {
        for to in &types {
            let program = cast_program(from, to);
            if !vyre_foundation::validate::validate(&program).is_empty() {
                continue;
            }
            if common::gpu::reference(&program, &[vec![0x41; 256]]).is_err() {
                continue;
            }
            run += 1;
            match emit_ptx(&program, None, PtxTarget::sm90()) {
                Ok(_) => lowered += 1,
                Err(CodegenError::Unsupported { construct, .. })
                    if construct.starts_with("buffer element type") => {}
                Err(error) => refused.push(format!("{from} -> {to}: {error}")),
            }
        }
    }
    assert!(refused.is_empty(), "{}", refused.join("\n"));
    // The list reaches the raw types: a cast coverage that shrinks is a broken list.
    assert!(run >= 110 && lowered >= 110, "{run} run, {lowered} lowered");
    println!("casts: {run} the reference runs, {lowered} lowered");
}
