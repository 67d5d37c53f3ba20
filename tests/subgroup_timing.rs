//! The lane timing the emitter assumes for subgroup operations (`analysis::lockstep`),
//! checked against vyre-reference at its boundaries: one statement less and the
//! reference reads a lane at another step (failing, or reading a value a converged warp
//! cannot), so the emitter runs the segment as a step machine (the reference's own
//! rounds, `lower::steps`); one statement more and the reference reads what the
//! converged warp reads, so the emitter lowers it as converged code. No GPU needed (the
//! GPU semantic cases of `tests/common/step_programs.rs` run both kinds).

use vyre_cuda::codegen::{emit_ptx, PtxTarget};
use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, Node, Program, SubgroupReduceOp};
use vyre_reference::value::Value;

const LANES: u32 = 32;

fn bin(op: BinOp, l: Expr, r: Expr) -> Expr {
    Expr::BinOp {
        op,
        left: Box::new(l),
        right: Box::new(r),
    }
}

fn lin() -> Expr {
    Expr::var("lin")
}

fn lane_below(n: u32) -> Expr {
    bin(BinOp::Lt, lin(), Expr::u32(n))
}

fn reduce_add(value: Expr) -> Expr {
    Expr::SubgroupReduce {
        op: SubgroupReduceOp::Add,
        value: Box::new(value),
    }
}

fn pads(prefix: &str, count: usize) -> Vec<Node> {
    (0..count)
        .map(|i| Node::let_bind(format!("{prefix}{i}"), Expr::u32(0)))
        .collect()
}

/// One 32-lane workgroup: `lin` bound, then `body`; `out[lin]` is the output.
fn program(body: Vec<Node>) -> Program {
    let mut entry = vec![Node::let_bind("lin", Expr::LocalId { axis: 0 })];
    entry.extend(body);
    Program::wrapped(
        vec![BufferDecl::output("out", 0, DataType::U32).with_count(LANES)],
        [LANES, 1, 1],
        entry,
    )
}

fn store(value: Expr) -> Node {
    Node::store("out", lin(), value)
}

fn reference(program: &Program) -> Result<Vec<u32>, String> {
    let outputs = vyre_reference::reference_eval(program, &[]).map_err(|e| e.to_string())?;
    let bytes = outputs.first().map(Value::to_bytes).unwrap_or_default();
    Ok(bytes
        .chunks(4)
        .map(|word| u32::from_le_bytes(word.try_into().unwrap()))
        .collect())
}

/// How many segments of `program`'s kernel run as a step machine.
fn step_machine_segments(program: &Program) -> u32 {
    emit_ptx(program, None, PtxTarget::sm90())
        .unwrap_or_else(|e| panic!("the emitter must lower it: {e}"))
        .step_machine_segments
}

fn assert_step_machine(program: &Program) {
    assert_eq!(
        step_machine_segments(program),
        1,
        "must run as a step machine"
    );
}

fn assert_converged(program: &Program) {
    assert_eq!(
        step_machine_segments(program),
        0,
        "must lower as converged code"
    );
}

/// Lanes 0..4 take a branch two statements long; the others leave it first and run
/// ahead by two steps. A lane that finishes (closing the region's scope) before the
/// lagging lanes evaluate `reduce(v)` makes the reference fail.
#[test]
fn leading_lanes_must_not_leave_the_scope_before_the_others_evaluate() {
    let at_distance = |after: usize| {
        let mut body = vec![
            Node::let_bind("v", bin(BinOp::Add, lin(), Expr::u32(1))),
            Node::if_then(lane_below(4), pads("t", 2)),
            store(reduce_add(Expr::var("v"))),
        ];
        body.extend(pads("after", after));
        program(body)
    };
    let near = at_distance(0);
    assert!(reference(&near)
        .unwrap_err()
        .contains("undeclared variable `v`"));
    assert_step_machine(&near);
    // Two more steps before the region ends: every lane has evaluated it by then.
    let far = at_distance(1);
    let sum: u32 = (1..=LANES).sum();
    assert_eq!(reference(&far).unwrap(), vec![sum; LANES as usize]);
    assert_converged(&far);
}

/// A `Let` right after an uneven branch: the lagging lanes have not run it when the
/// leading ones evaluate the operation.
#[test]
fn lagging_lanes_must_have_bound_the_operands_variables() {
    let at_distance = |between: usize| {
        let mut body = vec![
            Node::if_then(lane_below(4), pads("t", 2)),
            Node::let_bind("y", bin(BinOp::Mul, lin(), Expr::u32(3))),
        ];
        body.extend(pads("between", between));
        body.push(store(reduce_add(Expr::var("y"))));
        body.extend(pads("after", 2));
        program(body)
    };
    let near = at_distance(1);
    assert!(reference(&near)
        .unwrap_err()
        .contains("undeclared variable `y`"));
    assert_step_machine(&near);
    let far = at_distance(2);
    let sum: u32 = (0..LANES).map(|lane| lane * 3).sum();
    assert_eq!(reference(&far).unwrap(), vec![sum; LANES as usize]);
    assert_converged(&far);
}

/// Lanes 0..4 assign `x = 100` one statement into their branch, then return. The others
/// reach the reduction right after the branch: one statement too early to see the
/// assignment, which the hardware (reading what the returned lanes held at `Return`)
/// would see; one statement later the reference sees it too.
#[test]
fn returning_lanes_must_have_returned_before_a_changing_operand_is_read() {
    let at_distance = |between: usize| {
        let mut returning = pads("t", 1);
        returning.extend([Node::assign("x", Expr::u32(100)), Node::Return]);
        let mut body = vec![
            Node::let_bind("x", lin()),
            Node::assign("x", bin(BinOp::Add, Expr::var("x"), Expr::u32(1))),
            Node::if_then(lane_below(4), returning),
        ];
        body.extend(pads("between", between));
        body.push(store(reduce_add(Expr::var("x"))));
        program(body)
    };
    let running: u32 = (5..=LANES).sum();
    let near = at_distance(0);
    // Lanes 0..4 still hold x = lane + 1 in the round the others reduce.
    let early = running + (1..=4).sum::<u32>();
    let expected: Vec<u32> = (0..LANES).map(|l| if l < 4 { 0 } else { early }).collect();
    assert_eq!(reference(&near).unwrap(), expected);
    assert_step_machine(&near);
    let far = at_distance(1);
    let frozen = running + 4 * 100;
    let expected: Vec<u32> = (0..LANES).map(|l| if l < 4 { 0 } else { frozen }).collect();
    assert_eq!(reference(&far).unwrap(), expected);
    assert_converged(&far);
}

/// A value that changes, after a branch that takes lanes 0..4 one step longer: the
/// reference reads their value from before the assignment; after branches of equal
/// length it reads every lane at the same step, as the converged warp does.
#[test]
fn changing_operands_need_every_lane_at_the_same_step() {
    let after_branches = |otherwise: Vec<Node>| {
        program(vec![
            Node::let_bind("x", Expr::u32(1)),
            Node::if_then_else(
                lane_below(4),
                vec![
                    Node::let_bind("t", Expr::u32(0)),
                    Node::assign("x", Expr::u32(7)),
                ],
                otherwise,
            ),
            store(reduce_add(Expr::var("x"))),
            Node::let_bind("after", Expr::u32(0)),
        ])
    };
    let uneven = after_branches(vec![]);
    // The leading lanes read x = 1 for lanes 0..4 (not yet assigned).
    let leading = LANES;
    let lagging = 4 * 7 + (LANES - 4);
    let expected: Vec<u32> = (0..LANES)
        .map(|l| if l < 4 { lagging } else { leading })
        .collect();
    assert_eq!(reference(&uneven).unwrap(), expected);
    assert_step_machine(&uneven);
    let even = after_branches(pads("e", 2));
    assert_eq!(reference(&even).unwrap(), vec![lagging; LANES as usize]);
    assert_converged(&even);
}

/// A reduction in a data-dependent loop of at most two trips: computed once before the
/// loop, its last evaluation comes five steps after the loop's own step, while a lane
/// running no trip leaves the loop after two. Three statements after the loop keep that
/// lane in the scope of `v` long enough; two do not.
#[test]
fn operations_in_data_dependent_loops_count_their_last_iteration() {
    let with_after = |after: usize| {
        let mut body = vec![
            Node::let_bind("v", bin(BinOp::Add, lin(), Expr::u32(1))),
            Node::loop_for(
                "i",
                Expr::u32(0),
                bin(BinOp::Min, lin(), Expr::u32(2)),
                vec![store(reduce_add(Expr::var("v")))],
            ),
        ];
        body.extend(pads("after", after));
        program(body)
    };
    let near = with_after(2);
    assert!(reference(&near)
        .unwrap_err()
        .contains("undeclared variable `v`"));
    assert_step_machine(&near);
    let far = with_after(3);
    let sum: u32 = (1..=LANES).sum();
    let expected: Vec<u32> = (0..LANES).map(|l| if l == 0 { 0 } else { sum }).collect();
    assert_eq!(reference(&far).unwrap(), expected);
    assert_converged(&far);
}
