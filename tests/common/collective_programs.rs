//! Programs with vyre's four collectives (AllReduce, AllGather, ReduceScatter, Broadcast)
//! for one device: `CommGroup::WORLD` (root 0) runs as vyre-reference runs it (identity or
//! a per-invocation bounded copy); any other group or root is an error there and here.
//!
//! Every world case computes before and after its collective, so the kernel is not empty
//! and the collective's place in the order matters; the buffers are covered by the grid,
//! so the copies reach every element.

#![allow(dead_code)]

use super::gpu::{f32_bytes, Rng};
use super::programs::Case;
use vyre_foundation::ir::{BufferDecl, CollectiveOp, CommGroup, DataType, Expr, Node, Program};

const N: u32 = 100;

fn gid() -> Expr {
    Expr::gid_x()
}

/// `buf[gid] = buf[gid] + 1; AllReduce(buf); buf[gid] = buf[gid] * 3` over u32.
fn all_reduce(op: CollectiveOp, group: CommGroup) -> Program {
    Program::wrapped(
        vec![BufferDecl::read_write("buf", 0, DataType::U32).with_count(N)],
        [64, 1, 1],
        vec![
            guarded_update("buf", Expr::add(Expr::load("buf", gid()), Expr::u32(1))),
            Node::AllReduce {
                buffer: "buf".into(),
                op,
                group,
            },
            guarded_update("buf", Expr::mul(Expr::load("buf", gid()), Expr::u32(3))),
        ],
    )
}

/// A program that is nothing but the collective: empty once lowered for one device.
fn bare_all_reduce() -> Program {
    Program::wrapped(
        vec![BufferDecl::read_write("buf", 0, DataType::U32).with_count(N)],
        [64, 1, 1],
        vec![Node::AllReduce {
            buffer: "buf".into(),
            op: CollectiveOp::Sum,
            group: CommGroup::WORLD,
        }],
    )
}

/// `buf[gid] = buf[gid] * 2.0; Broadcast(buf, root); buf[gid] = buf[gid] + 0.5` over f32.
fn broadcast(root: u32, group: CommGroup) -> Program {
    Program::wrapped(
        vec![BufferDecl::read_write("buf", 0, DataType::F32).with_count(N)],
        [64, 1, 1],
        vec![
            guarded_update("buf", Expr::mul(Expr::load("buf", gid()), Expr::f32(2.0))),
            Node::Broadcast {
                buffer: "buf".into(),
                root,
                group,
            },
            guarded_update("buf", Expr::add(Expr::load("buf", gid()), Expr::f32(0.5))),
        ],
    )
}

/// `src[gid] ^= 0x5a5a; <copy collective>(src -> out); out[gid] += 7` over u32, with `out`
/// longer than `src`: the copy's inner bound leaves out's tail as the kernel left it.
fn copy_collective(node: Node) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read_write("src", 0, DataType::U32).with_count(N),
            BufferDecl::output("out", 1, DataType::U32).with_count(N + 28),
        ],
        [64, 1, 1],
        vec![
            guarded_update(
                "src",
                Expr::bitxor(Expr::load("src", gid()), Expr::u32(0x5a5a)),
            ),
            node,
            Node::if_then(
                Expr::lt(gid(), Expr::buf_len("out")),
                vec![Node::store(
                    "out",
                    gid(),
                    Expr::add(Expr::load("out", gid()), Expr::u32(7)),
                )],
            ),
        ],
    )
}

fn all_gather(group: CommGroup) -> Program {
    copy_collective(Node::AllGather {
        input: "src".into(),
        output: "out".into(),
        group,
    })
}

fn reduce_scatter(op: CollectiveOp, group: CommGroup) -> Program {
    copy_collective(Node::ReduceScatter {
        input: "src".into(),
        output: "out".into(),
        op,
        group,
    })
}

/// `if gid < len(buf) { buf[gid] = value }`.
fn guarded_update(buffer: &str, value: Expr) -> Node {
    Node::if_then(
        Expr::lt(gid(), Expr::buf_len(buffer)),
        vec![Node::store(buffer, gid(), value)],
    )
}

/// The WORLD collectives, each of the four at least once, with inputs.
pub fn world_cases() -> Vec<Case> {
    let mut rng = Rng::new(19);
    let floats: Vec<f32> = (0..N).map(|i| i as f32 * 0.75 - 20.0).collect();
    vec![
        Case::new(
            "all_reduce_sum_world",
            all_reduce(CollectiveOp::Sum, CommGroup::WORLD),
            vec![rng.bytes_u32(N as usize)],
        ),
        Case::new(
            "all_reduce_bitxor_world",
            all_reduce(CollectiveOp::BitXor, CommGroup::WORLD),
            vec![rng.bytes_u32(N as usize)],
        ),
        Case::new(
            "all_reduce_alone_world",
            bare_all_reduce(),
            vec![rng.bytes_u32(N as usize)],
        ),
        Case::new(
            "broadcast_root0_world",
            broadcast(0, CommGroup::WORLD),
            vec![f32_bytes(&floats)],
        ),
        Case::new(
            "all_gather_world",
            all_gather(CommGroup::WORLD),
            vec![rng.bytes_u32(N as usize)],
        ),
        Case::new(
            "reduce_scatter_sum_world",
            reduce_scatter(CollectiveOp::Sum, CommGroup::WORLD),
            vec![rng.bytes_u32(N as usize)],
        ),
        Case::new(
            "reduce_scatter_max_world",
            reduce_scatter(CollectiveOp::Max, CommGroup::WORLD),
            vec![rng.bytes_u32(N as usize)],
        ),
    ]
}

/// Collectives that need a transport (a group other than WORLD, a nonzero Broadcast
/// root): the reference rejects them, and so must the backend.
pub fn transport_cases() -> Vec<Case> {
    let mut rng = Rng::new(20);
    let group = CommGroup(1);
    let floats = f32_bytes(&vec![1.5; N as usize]);
    [
        ("all_reduce_group1", all_reduce(CollectiveOp::Sum, group)),
        ("broadcast_group1", broadcast(0, group)),
        ("broadcast_root1_world", broadcast(1, CommGroup::WORLD)),
        ("all_gather_group1", all_gather(group)),
        (
            "reduce_scatter_group1",
            reduce_scatter(CollectiveOp::Sum, group),
        ),
    ]
    .into_iter()
    .map(|(name, program)| {
        let input = if name.starts_with("broadcast") {
            floats.clone()
        } else {
            rng.bytes_u32(N as usize)
        };
        let mut case = Case::new(name, program, vec![input]);
        case.expect_error = true;
        case
    })
    .collect()
}
