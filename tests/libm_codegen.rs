//! CPU gate for the bit-exact libm ports: a kernel applying each transcendental `UnOp`
//! elementwise (and one applying all of them) lowers and assembles with ptxas for sm_80 at
//! PTX 7.0, sm_90 at 7.8 and sm_90 at 9.0. No approximate intrinsic appears in the PTX.

mod common;

use common::ptxas_batch::{assemble_everywhere, Kernel};

use vyre_cuda::codegen::{emit_ptx, PtxIsa, PtxTarget};
use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, Node, Program, UnOp};

const N: u32 = 1024;

fn transcendentals() -> [(UnOp, &'static str); 13] {
    [
        (UnOp::Sin, "vyre_libm_sinf"),
        (UnOp::Cos, "vyre_libm_cosf"),
        (UnOp::Tan, "vyre_libm_tanf"),
        (UnOp::Asin, "vyre_libm_asinf"),
        (UnOp::Acos, "vyre_libm_acosf"),
        (UnOp::Atan, "vyre_libm_atanf"),
        (UnOp::Sinh, "vyre_libm_sinhf"),
        (UnOp::Cosh, "vyre_libm_coshf"),
        (UnOp::Tanh, "vyre_libm_tanhf"),
        (UnOp::Exp, "vyre_libm_expf"),
        (UnOp::Exp2, "vyre_libm_exp2f"),
        (UnOp::Log, "vyre_libm_logf"),
        (UnOp::Log2, "vyre_libm_log2f"),
    ]
}

/// `out_j[i] = ops[j](a[i])` for `i < N`.
fn program(ops: &[UnOp]) -> Program {
    let gid = Expr::InvocationId { axis: 0 };
    let mut buffers = vec![BufferDecl::read("a", 0, DataType::F32).with_count(N)];
    let mut stores = Vec::new();
    for (j, op) in ops.iter().enumerate() {
        let name = format!("out{j}");
        buffers.push(BufferDecl::output(&name, j as u32 + 1, DataType::F32).with_count(N));
        stores.push(Node::store(
            &name,
            gid.clone(),
            Expr::UnOp {
                op: op.clone(),
                operand: Box::new(Expr::load("a", gid.clone())),
            },
        ));
    }
    Program::wrapped(
        buffers,
        [64, 1, 1],
        vec![Node::if_then(
            Expr::BinOp {
                op: BinOp::Lt,
                left: Box::new(gid),
                right: Box::new(Expr::u32(N)),
            },
            stores,
        )],
    )
}

fn targets() -> [PtxTarget; 3] {
    [
        PtxTarget::sm80(),
        PtxTarget::sm90(),
        PtxTarget::new(90, PtxIsa::new(9, 0)).expect("sm_90 at PTX 9.0"),
    ]
}

/// Emits programs for every target and checks their text; [`Gate::finish`] assembles
/// them all (batched) and fails the test with every finding.
#[derive(Default)]
struct Gate {
    failures: Vec<String>,
    kernels: Vec<Kernel>,
}

impl Gate {
    fn check(&mut self, name: &str, program: &Program, symbols: &[&str]) {
        for target in targets() {
            let kernel = match emit_ptx(program, None, target) {
                Ok(kernel) => kernel,
                Err(error) => {
                    self.failures
                        .push(format!("{name} for {target}: rejected: {error}"));
                    continue;
                }
            };
            let ptx = &kernel.ptx;
            for symbol in symbols {
                if !ptx.contains(&format!("// {symbol} inlined")) {
                    self.failures.push(format!(
                        "{name} for {target}: {symbol} is not inlined into the kernel"
                    ));
                }
            }
            // ptxas may let a `.func` clobber the caller's uniform registers (see
            // `fuzz::check::function_call`): the routines are inlined, never called.
            if ptx.contains(".func") || ptx.lines().any(|l| l.trim_start().starts_with("call")) {
                self.failures
                    .push(format!("{name} for {target}: a .func or call in the PTX"));
            }
            // Every f32 division is the inlined exact one (`div.rn.f32` would bring ptxas's
            // slow-path subroutine into the kernel).
            if ptx.contains("div.rn.f32") {
                self.failures
                    .push(format!("{name} for {target}: div.rn.f32 in the PTX"));
            }
            if let Some(line) = approximate_instruction(ptx) {
                self.failures.push(format!(
                    "{name} for {target}: approximate instruction in the PTX: {line}"
                ));
            }
            let modules = [Some(kernel.ptx), kernel.checked_ptx, kernel.cooperative_ptx];
            self.kernels
                .extend(modules.into_iter().flatten().map(|ptx| Kernel {
                    id: format!("{name} for {target}"),
                    ptx,
                }));
        }
    }

    fn finish(mut self) {
        if let Some(ptxas) = common::ptxas::require_ptxas() {
            let refused = assemble_everywhere(&ptxas, &self.kernels);
            self.failures.extend(refused.iter().map(|r| r.to_string()));
        }
        assert!(self.failures.is_empty(), "{}", self.failures.join("\n\n"));
    }
}

/// A line of `ptx` with an approximate instruction, other than the reciprocal estimates the
/// exact divisions refine: the f32 one of a division in range (`div_in_range`), and the f64
/// one only in a kernel that has the exact division (`vyre_div_rn_f32`) inlined.
fn approximate_instruction(ptx: &str) -> Option<&str> {
    let divides = ptx.contains("// vyre_div_rn_f32 inlined");
    ptx.lines().map(str::trim).find(|line| {
        let approximate = line.contains(".approx") || line.contains(".ftz.f64");
        let refined = line.starts_with("rcp.approx.ftz.f32 ")
            || (divides && line.starts_with("rcp.approx.ftz.f64 "));
        approximate && !refined
    })
}

#[test]
fn each_transcendental_lowers_and_assembles() {
    let mut gate = Gate::default();
    for (op, symbol) in transcendentals() {
        gate.check(
            &format!("{op:?}"),
            &program(std::slice::from_ref(&op)),
            &[symbol],
        );
    }
    gate.finish();
}

#[test]
fn all_transcendentals_in_one_kernel_inline_their_helpers_and_share_their_tables() {
    let all = transcendentals();
    let ops: Vec<UnOp> = all.iter().map(|(op, _)| op.clone()).collect();
    let symbols: Vec<&str> = all.iter().map(|(_, s)| *s).collect();
    let mut gate = Gate::default();
    gate.check("all", &program(&ops), &symbols);
    gate.finish();
    let ptx = emit_ptx(&program(&ops), None, PtxTarget::sm90())
        .expect("lowers")
        .ptx;
    // Sin, Cos and Tan each inline rem_pio2f once; Sinh, Cosh and Tanh expm1f once.
    for (helper, copies) in [("vyre_libm_rem_pio2f", 3), ("vyre_libm_expm1f", 3)] {
        let inlined = ptx.matches(&format!("// {helper} inlined")).count();
        assert_eq!(inlined, copies, "{helper}");
    }
    assert_eq!(
        ptx.matches(".const .align 4 .b32 vyre_libm_ipio2[").count(),
        1
    );
}

/// `out[i] = a[i] / divisor`.
fn quotient_program(divisor: Expr) -> Program {
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, DataType::F32).with_count(N),
            BufferDecl::output("out", 1, DataType::F32).with_count(N),
        ],
        [64, 1, 1],
        vec![Node::store(
            "out",
            Expr::InvocationId { axis: 0 },
            Expr::BinOp {
                op: BinOp::Div,
                left: Box::new(Expr::load("a", Expr::InvocationId { axis: 0 })),
                right: Box::new(divisor),
            },
        )],
    )
}

#[test]
fn f32_division_reciprocal_and_inverse_sqrt_inline_the_exact_division() {
    let mut gate = Gate::default();
    let cases = [
        ("Div", quotient_program(Expr::load("a", Expr::u32(0)))),
        ("Reciprocal", program(&[UnOp::Reciprocal])),
        ("InverseSqrt", program(&[UnOp::InverseSqrt])),
    ];
    for (name, program) in &cases {
        gate.check(name, program, &["vyre_div_rn_f32"]);
    }
    gate.finish();
}

#[test]
fn division_by_a_power_of_two_literal_is_a_multiply() {
    let divide_by = |divisor: f32| {
        emit_ptx(
            &quotient_program(Expr::f32(divisor)),
            None,
            PtxTarget::sm90(),
        )
        .expect("lowers")
        .ptx
    };
    for divisor in [2.0f32, -0.25, f32::from_bits(0x0080_0000), 2f32.powi(127)] {
        let ptx = divide_by(divisor);
        assert!(!ptx.contains("vyre_div_rn_f32"), "{divisor:e}");
        let inverse = format!("{}", (1.0 / divisor).to_bits());
        assert!(ptx.contains(&inverse), "{divisor:e}: 1/c is not in the PTX");
    }
    // 3 has no exact f32 reciprocal; a subnormal's reciprocal overflows
    for divisor in [3.0f32, f32::from_bits(0x0040_0000)] {
        assert!(
            divide_by(divisor).contains("// vyre_div_rn_f32 inlined"),
            "{divisor:e}"
        );
    }
}

#[test]
fn a_kernel_without_transcendentals_carries_no_libm_code() {
    let ptx = emit_ptx(&program(&[UnOp::Sqrt]), None, PtxTarget::sm90())
        .expect("lowers")
        .ptx;
    assert!(!ptx.contains("vyre_libm_"));
}

/// `out[0] = i32(op(0.0))` inside `for i in 0..trips`.
fn call_loop(op: &UnOp, trips: u32) -> Node {
    Node::loop_for(
        "i",
        Expr::u32(0),
        Expr::u32(trips),
        vec![Node::store(
            "out",
            Expr::u32(0),
            Expr::Cast {
                target: DataType::I32,
                value: Box::new(Expr::UnOp {
                    op: op.clone(),
                    operand: Box::new(Expr::f32(0.0)),
                }),
            },
        )],
    )
}

/// Ways for a branch to skip a loop of libm calls that ptxas can prove is never taken.
/// The first is the shape of `../shared/regressions/ptxas-crash-1` reduced: before the
/// emitter hid such conditions from ptxas (`Lowerer::unprovable`), ptxas 13.0 crashed
/// with SIGSEGV on it for Sin, Cos and Tan (whose ports call `vyre_libm_rem_pio2f`).
fn dead_loop_shapes(op: &UnOp) -> Vec<(&'static str, Vec<Node>)> {
    let v_plus_one_is_zero = Expr::UnOp {
        op: UnOp::LogicalNot,
        operand: Box::new(Expr::add(Expr::var("v"), Expr::u32(1))),
    };
    vec![
        (
            "let-folded condition",
            vec![
                Node::let_bind("v", Expr::u32(0)),
                Node::store("flag", Expr::u32(0), Expr::u32(0)),
                Node::if_then(
                    v_plus_one_is_zero,
                    vec![Node::assign("v", Expr::u32(1)), call_loop(op, 1)],
                ),
                Node::store("flag", Expr::u32(0), Expr::var("v")),
            ],
        ),
        (
            "literal false",
            vec![Node::if_then(Expr::bool(false), vec![call_loop(op, 3)])],
        ),
        (
            "dead else",
            vec![Node::if_then_else(
                Expr::bool(true),
                vec![Node::store("flag", Expr::u32(0), Expr::u32(1))],
                vec![call_loop(op, 2)],
            )],
        ),
        (
            "after a constant fault",
            vec![
                Node::store(
                    "flag",
                    Expr::u32(0),
                    Expr::Cast {
                        target: DataType::U32,
                        value: Box::new(Expr::Cast {
                            target: DataType::I64,
                            value: Box::new(Expr::i32(-18)),
                        }),
                    },
                ),
                call_loop(op, 0),
            ],
        ),
        (
            "after a constant return",
            vec![
                Node::if_then(Expr::bool(true), vec![Node::Return]),
                call_loop(op, 2),
            ],
        ),
        (
            "nested dead loops",
            vec![Node::if_then(
                Expr::eq(Expr::u32(1), Expr::u32(2)),
                vec![Node::loop_for(
                    "j",
                    Expr::u32(0),
                    Expr::u32(2),
                    vec![call_loop(op, 2)],
                )],
            )],
        ),
    ]
}

#[test]
fn transcendentals_in_statically_dead_loops_assemble() {
    let mut gate = Gate::default();
    for (op, symbol) in transcendentals() {
        for (shape, nodes) in dead_loop_shapes(&op) {
            let program = Program::wrapped(
                vec![
                    BufferDecl::output("out", 0, DataType::I32).with_count(1),
                    BufferDecl::output("flag", 1, DataType::U32).with_count(1),
                ],
                [1, 1, 1],
                nodes,
            );
            gate.check(&format!("{op:?} ({shape})"), &program, &[symbol]);
        }
    }
    gate.finish();
}
