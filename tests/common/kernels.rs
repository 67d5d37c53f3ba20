//! Small programs for the runtime tests: elementwise kernels whose bindings are declared
//! out of order (so binding order and declaration order differ), in-place updates for
//! resident sequences, and a kernel that faults at run time.

#![allow(dead_code)]

use vyre_foundation::ir::{BinOp, BufferAccess, BufferDecl, DataType, Expr, Node, Program};

pub fn bin(op: BinOp, l: Expr, r: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(l),
        right: Box::new(r),
    }
}

fn guarded(limit: Expr, body: Vec<Node>) -> Vec<Node> {
    vec![Node::if_then(bin(BinOp::Lt, Expr::gid_x(), limit), body)]
}

/// `out[i] = a[i] + b[i] + salt` for `i < n`. Declaration order `a, b, out`; binding
/// order `out (0), b (1), a (2)`, so resident handles go `[out, b, a]`.
pub fn vadd(n: u32, salt: u32) -> Program {
    let i = Expr::gid_x();
    Program::wrapped(
        vec![
            BufferDecl::read("a", 2, DataType::U32).with_count(n),
            BufferDecl::read("b", 1, DataType::U32).with_count(n),
            BufferDecl::output("out", 0, DataType::U32).with_count(n),
        ],
        [256, 1, 1],
        guarded(
            Expr::u32(n),
            vec![Node::store(
                "out",
                i.clone(),
                bin(
                    BinOp::Add,
                    Expr::load("a", i.clone()),
                    bin(BinOp::Add, Expr::load("b", i), Expr::u32(salt)),
                ),
            )],
        ),
    )
}

/// In place: `x[i] = x[i] * mul + add` for every element of the (runtime-sized) buffer.
pub fn affine(mul: u32, add: u32, workgroup: u32) -> Program {
    let i = Expr::gid_x();
    Program::wrapped(
        vec![BufferDecl::storage(
            "x",
            0,
            BufferAccess::ReadWrite,
            DataType::U32,
        )],
        [workgroup, 1, 1],
        guarded(
            Expr::buf_len("x"),
            vec![Node::store(
                "x",
                i.clone(),
                bin(
                    BinOp::Add,
                    bin(BinOp::Mul, Expr::load("x", i), Expr::u32(mul)),
                    Expr::u32(add),
                ),
            )],
        ),
    )
}

/// `acc[i] += src[i]` (runtime-sized, in place). Declaration `src, acc`; bindings
/// `acc (0), src (1)`: resident handles `[acc, src]`.
pub fn accumulate() -> Program {
    let i = Expr::gid_x();
    Program::wrapped(
        vec![
            BufferDecl::read("src", 1, DataType::U32),
            BufferDecl::storage("acc", 0, BufferAccess::ReadWrite, DataType::U32),
        ],
        [128, 1, 1],
        guarded(
            Expr::buf_len("acc"),
            vec![Node::store(
                "acc",
                i.clone(),
                bin(
                    BinOp::Add,
                    Expr::load("acc", i.clone()),
                    Expr::load("src", i),
                ),
            )],
        ),
    )
}

/// Signed division by a loaded value: the reference (and the kernel's fault word) fail
/// when a divisor is 0.
pub fn signed_div(n: u32) -> Program {
    let i = Expr::gid_x();
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::I32).with_count(n),
            BufferDecl::read("d", 1, DataType::I32).with_count(n),
            BufferDecl::output("out", 2, DataType::I32).with_count(n),
        ],
        [64, 1, 1],
        guarded(
            Expr::u32(n),
            vec![Node::store(
                "out",
                i.clone(),
                bin(BinOp::Div, Expr::load("a", i.clone()), Expr::load("d", i)),
            )],
        ),
    )
}

pub fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// `out[i] = a[i] + b[i]` with bindings in declaration order `a (0), b (1), out (2)`.
pub fn vadd_in_order(n: u32) -> Program {
    let i = Expr::gid_x();
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(n),
            BufferDecl::read("b", 1, DataType::U32).with_count(n),
            BufferDecl::output("out", 2, DataType::U32).with_count(n),
        ],
        [64, 1, 1],
        guarded(
            Expr::u32(n),
            vec![Node::store(
                "out",
                i.clone(),
                bin(BinOp::Add, Expr::load("a", i.clone()), Expr::load("b", i)),
            )],
        ),
    )
}

/// saxpy as users write it: `y[i] = alpha[k] * x[i] + y[i]` (f32, a `Mul` then an `Add`)
/// for `i < len(y)`, the scale read from a runtime-sized buffer at the literal index
/// `alpha_index` (0 normally; 1 reads past a one-element `alpha`: zero, as in the
/// reference) and `y` updated in place. Bindings `alpha (0), x (1), y (2)`.
pub fn saxpy_user(alpha_index: u32) -> Program {
    let i = Expr::gid_x();
    let scaled = bin(
        BinOp::Mul,
        Expr::load("alpha", Expr::u32(alpha_index)),
        Expr::load("x", i.clone()),
    );
    Program::wrapped(
        vec![
            BufferDecl::read("alpha", 0, DataType::F32),
            BufferDecl::read("x", 1, DataType::F32),
            BufferDecl::read_write("y", 2, DataType::F32),
        ],
        [256, 1, 1],
        guarded(
            Expr::buf_len("y"),
            vec![Node::store(
                "y",
                i.clone(),
                bin(BinOp::Add, scaled, Expr::load("y", i)),
            )],
        ),
    )
}

/// `out[i] = min(max(x[i] * scale + bias, lo), hi)` (f32) with the parameters in a small
/// read-only buffer `p`: `scale = p[0]` and `bias = p[1]` through `Let`s, `lo = p[2]`,
/// and `hi = p[len(p) - 1]` (an index computed from `BufLen`). Bindings `p (0), x (1),
/// out (2)`; `out` has `n` elements.
pub fn scale_bias_clamp(n: u32) -> Program {
    let i = Expr::gid_x();
    let p = |index: Expr| Expr::load("p", index);
    let affine = bin(
        BinOp::Add,
        bin(BinOp::Mul, Expr::load("x", i.clone()), Expr::var("scale")),
        Expr::var("bias"),
    );
    let last = bin(BinOp::Sub, Expr::buf_len("p"), Expr::u32(1));
    let clamped = bin(
        BinOp::Min,
        bin(BinOp::Max, affine, p(Expr::u32(2))),
        p(last),
    );
    Program::wrapped(
        vec![
            BufferDecl::read("p", 0, DataType::F32),
            BufferDecl::read("x", 1, DataType::F32).with_count(n),
            BufferDecl::output("out", 2, DataType::F32).with_count(n),
        ],
        [256, 1, 1],
        vec![
            Node::let_bind("scale", p(Expr::u32(0))),
            Node::let_bind("bias", p(Expr::u32(1))),
            Node::if_then(
                bin(BinOp::Lt, i.clone(), Expr::u32(n)),
                vec![Node::store("out", i, clamped)],
            ),
        ],
    )
}
