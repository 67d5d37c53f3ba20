//! Deep programs never overflow the emitter's stack: `emit_ptx` rejects a program nested
//! deeper than `MAX_STATEMENT_DEPTH` / `MAX_EXPRESSION_DEPTH` with an error (checked by an
//! iterative walk before anything recursive runs), and emits one at the limits on a
//! 2 MiB thread stack (Rust's default for spawned threads), in debug builds too.
//!
//! The programs are built and dropped on a thread with a large stack: building a
//! 10,000-deep tree through vyre's constructors and dropping it (`Box<Expr>` and
//! `Vec<Node>` drop recursively) take stack in proportion to the depth, which has nothing
//! to do with the emitter. Only `emit_ptx` runs on the 2 MiB thread.
//!
//! `VYRE_CUDA_DEEP_STACK_KIB` overrides the 2 MiB, to measure how much stack emitting the
//! at-limit programs takes (a run that overflows aborts the process).

mod common;

use vyre_cuda::codegen::{
    emit_ptx, CodegenError, PtxTarget, MAX_EXPRESSION_DEPTH, MAX_STATEMENT_DEPTH,
};
use vyre_foundation::ir::{BufferDecl, DataType, Expr, Node, Program};

const DEEP: usize = 10_000;
const BIG_STACK: usize = 512 << 20;

fn small_stack() -> usize {
    std::env::var("VYRE_CUDA_DEEP_STACK_KIB")
        .ok()
        .and_then(|kib| kib.parse::<usize>().ok())
        .map_or(2 << 20, |kib| kib << 10)
}

fn program(body: Vec<Node>) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::U32).with_count(64),
            BufferDecl::output("out", 1, DataType::U32).with_count(64),
        ],
        [64, 1, 1],
        body,
    )
}

fn gid() -> Expr {
    Expr::InvocationId { axis: 0 }
}

/// `a[gid] + 1 + 1 + ...`: an expression `depth` levels deep.
fn add_chain(depth: usize) -> Expr {
    let mut expr = Expr::load("a", gid());
    for _ in 2..depth {
        expr = Expr::add(expr, Expr::u32(1));
    }
    expr
}

fn store(value: Expr) -> Node {
    Node::store("out", gid(), value)
}

/// `levels` statement lists nested by `wrap`, the innermost holding `inner`.
fn nested(levels: usize, inner: Node, wrap: impl Fn(Vec<Node>, usize) -> Node) -> Vec<Node> {
    let mut body = vec![inner];
    for level in 0..levels {
        body = vec![wrap(body, level)];
    }
    body
}

fn block(body: Vec<Node>, _: usize) -> Node {
    Node::block(body)
}

fn if_true(body: Vec<Node>, _: usize) -> Node {
    Node::if_then(Expr::bool(true), body)
}

fn loop_once(body: Vec<Node>, level: usize) -> Node {
    Node::loop_for(format!("i{level}"), Expr::u32(0), Expr::u32(1), body)
}

/// Build a program on a big stack, run `work` on it on a `small_stack()` thread, drop it
/// on the big stack again.
fn on_small_stack<T: Send>(
    build: impl FnOnce() -> Program + Send,
    work: impl FnOnce(&Program) -> T + Send,
) -> T {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(BIG_STACK)
            .spawn_scoped(scope, || {
                let program = build();
                let result = std::thread::scope(|inner| {
                    std::thread::Builder::new()
                        .stack_size(small_stack())
                        .spawn_scoped(inner, || work(&program))
                        .expect("spawn the small-stack thread")
                        .join()
                        .expect("the work on the small stack panicked")
                });
                drop(program);
                result
            })
            .expect("spawn the big-stack thread")
            .join()
            .expect("building or dropping the program panicked")
    })
}

/// Emit `build()`'s program for sm_90 on a `small_stack()` thread.
fn emit_on_small_stack(build: impl FnOnce() -> Program + Send) -> Result<(), CodegenError> {
    on_small_stack(build, |program| {
        emit_ptx(program, None, PtxTarget::sm90()).map(|_| ())
    })
}

fn assert_too_deep(what: &str, build: impl FnOnce() -> Program + Send) {
    match emit_on_small_stack(build) {
        Err(error) => {
            let text = vyre_cuda::CudaError::from(error).to_string();
            assert!(text.contains("deeply nested"), "{what}: {text}");
            assert_eq!(text.matches("Fix:").count(), 1, "{what}: {text}");
        }
        Ok(()) => panic!("{what}: a {DEEP}-deep program emitted"),
    }
}

#[test]
fn ten_thousand_nested_blocks_are_rejected() {
    assert_too_deep("blocks", || {
        program(nested(DEEP, store(Expr::u32(1)), block))
    });
}

#[test]
fn ten_thousand_nested_ifs_are_rejected() {
    assert_too_deep("ifs", || {
        program(nested(DEEP, store(Expr::u32(1)), if_true))
    });
}

#[test]
fn ten_thousand_nested_loops_are_rejected() {
    assert_too_deep("loops", || {
        program(nested(DEEP, store(Expr::u32(1)), loop_once))
    });
}

#[test]
fn a_ten_thousand_deep_add_chain_is_rejected() {
    assert_too_deep("add chain", || program(vec![store(add_chain(DEEP))]));
}

#[test]
fn a_ten_thousand_deep_select_chain_is_rejected() {
    assert_too_deep("select chain", || {
        let mut expr = Expr::u32(0);
        for _ in 0..DEEP {
            expr = Expr::select(Expr::bool(true), expr, Expr::u32(1));
        }
        program(vec![store(expr)])
    });
}

/// `Program::wrapped` puts the body in a `Region`: the entry is level 1, the body level 2.
const BODY_LEVELS: usize = MAX_STATEMENT_DEPTH - 2;

#[test]
fn programs_at_the_limits_emit_on_a_two_mib_stack() {
    // The deepest statement nesting with the deepest expression at its innermost level.
    let deepest = || {
        store(Expr::select(
            Expr::bool(true),
            add_chain(MAX_EXPRESSION_DEPTH - 1),
            Expr::u32(0),
        ))
    };
    for (what, wrap) in [
        ("blocks", block as fn(Vec<Node>, usize) -> Node),
        ("ifs", if_true),
        ("loops", loop_once),
    ] {
        emit_on_small_stack(|| program(nested(BODY_LEVELS, deepest(), wrap)))
            .unwrap_or_else(|error| panic!("{what} at the limits: {error}"));
    }
}

#[test]
fn one_level_past_the_limits_is_rejected() {
    let too_deep_statements =
        emit_on_small_stack(|| program(nested(BODY_LEVELS + 1, store(Expr::u32(1)), block)));
    assert!(too_deep_statements.is_err());
    let too_deep_expression =
        emit_on_small_stack(|| program(vec![store(add_chain(MAX_EXPRESSION_DEPTH + 1))]));
    assert!(too_deep_expression.is_err());
}

/// Through the runtime (`CudaBackend::dispatch`, which hashes and validates the program
/// before emitting it), a 10,000-deep program is the same error, on a 2 MiB stack.
#[test]
fn the_backend_rejects_a_ten_thousand_deep_program_without_overflowing() {
    let Some(backend) = common::gpu::backend() else {
        println!("skipped: no CUDA device");
        return;
    };
    type Build = fn() -> Program;
    let cases: [(&str, Build); 3] = [
        ("ifs", || {
            program(nested(DEEP, store(Expr::u32(1)), if_true))
        }),
        ("loops", || {
            program(nested(DEEP, store(Expr::u32(1)), loop_once))
        }),
        ("add chain", || program(vec![store(add_chain(DEEP))])),
    ];
    for (what, build) in cases {
        let text = on_small_stack(build, |program| {
            let inputs = vec![vec![0u8; 256]];
            let config = vyre_driver::DispatchConfig::default();
            match backend.dispatch(program, &inputs, &config) {
                Ok(_) => None,
                Err(error) => Some(error.to_string()),
            }
        })
        .unwrap_or_else(|| panic!("{what}: a {DEEP}-deep program dispatched"));
        assert!(text.contains("deeply nested"), "{what}: {text}");
        assert_eq!(text.matches("Fix:").count(), 1, "{what}: {text}");
    }
}
