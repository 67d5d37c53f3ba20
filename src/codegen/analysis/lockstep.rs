//! Lane timing for subgroup operations: which ballots, shuffles and reductions read
//! exactly the lane values `vyre-reference` reads, and whether lanes that `Return` must
//! stay in the warp for them.
//!
//! # What the reference computes (vyre-reference 0.7.2, `execution/hashmap`)
//!
//! A workgroup's invocations run in rounds. Each round first snapshots every invocation's
//! variables, then lets each invocation that has neither finished nor stopped at a barrier
//! take one *step*, in linear local-index order. A step is one statement (`Let`, `Assign`,
//! `Store`, an async statement, `Barrier`, `Return`, `If` choosing its branch, `Loop`
//! evaluating its bounds, `Block`/`Region` opening its scope), the end of a branch,
//! block, region or loop body (closing its scope), the start of a loop iteration (binding
//! the loop variable) or a loop's exit test. A barrier holds the invocations reaching it
//! until every invocation still running has.
//!
//! Invocation `i` evaluating a subgroup operation evaluates its operand once for each
//! invocation `j` of `i`'s subgroup (the 32-invocation chunk of the linear local index
//! holding `i`, short at the end of a workgroup that is not a multiple of 32), with `j`'s
//! ids, `j`'s variables as snapshotted at the start of the round, and memory as it is at
//! that moment. Hence:
//! * every invocation of the chunk counts, whichever branch it is in;
//! * one that returned counts with its variables as they were at its `Return` (which ends
//!   the invocation but closes none of its scopes);
//! * one that finished normally has closed its scopes, and one that has not reached a
//!   `Let` yet has not bound its variable: reading such a variable fails the dispatch;
//! * one `k` steps ahead of or behind `i` (a data-dependent branch or loop took it more or
//!   fewer steps) counts with its variables `k` steps later or earlier;
//! * an error evaluating any invocation's operand fails the dispatch.
//!
//! # When the hardware computes the same
//!
//! The emitter evaluates a subgroup operation with the whole warp converged: in uniform
//! control flow where it stands, or, inside the outermost data-dependent branch or loop,
//! once, early at that construct (`Uniformity::hoistable`). Lanes that returned stay in the warp (they skip
//! every side effect and data-dependent branch) and supply the variables they held at
//! their `Return`; an operand fault of any lane fails the dispatch when a lane reaches the
//! operation (see `lower::returned`). That is the reference's result when, with times in
//! steps counted as above (a static bound over every path):
//! * a *time-invariant* operand (ids, literals, never-written buffers, variables bound
//!   once and never assigned) is evaluated while every lane still running has bound each
//!   variable it reads and none has left that variable's scope: its value is then the same
//!   at any step. Returned lanes that never bound it fail the dispatch at run time, as in
//!   the reference;
//! * any other operand is evaluated in uniform control flow, with every running lane at
//!   the same step and every lane on its way to a `Return` returned already, in a
//!   statement that writes no buffer the operand loads (the reference's later lanes
//!   would see the earlier lanes' writes of the same round).
//!
//! Everything else is [`Unaligned`] (naming the case): such a segment runs as a step
//! machine, which takes the reference's rounds themselves (`lower::steps`). Barriers
//! release every lane at once, so timing starts again after one.

use super::uniform::{has_subgroup, is_subgroup_op, Uniformity};
use crate::codegen::visit::{any_expr, for_each_child, for_each_expr, for_each_node};
use rustc_hash::FxHashSet;
use std::collections::BTreeSet;
use vyre_foundation::ir::{BinOp, Expr, Node};

/// A number of steps; saturates at [`UNBOUNDED`] (and never falls far below zero).
type Steps = i64;
const UNBOUNDED: Steps = i64::MAX / 4;

fn plus(a: Steps, b: Steps) -> Steps {
    a.saturating_add(b).min(UNBOUNDED)
}

fn times(n: Steps, b: Steps) -> Steps {
    n.saturating_mul(b).min(UNBOUNDED)
}

/// Why no converged placement of a segment's subgroup operations reads what the
/// reference reads: the segment then runs as a step machine (`analysis::steps`,
/// `lower::steps`). It names the rule and the detail for debugging (`Debug`); nothing on
/// the run path reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unaligned {
    pub(crate) case: &'static str,
    pub(crate) detail: String,
}

impl Unaligned {
    fn new(case: &'static str, detail: impl Into<String>) -> Self {
        Self {
            case,
            detail: detail.into(),
        }
    }
}

/// Check every subgroup operation of `segment` (one launch's body, see `grid_sync`).
pub(crate) fn check(segment: &[Node], uniformity: &Uniformity<'_>) -> Result<(), Unaligned> {
    if !has_subgroup(segment) {
        return Ok(());
    }
    let mut walk = Walk {
        uniformity,
        keeps_returned: returns_in_divergent_flow(segment, uniformity, false),
        state: State::default(),
        serial: 0,
    };
    walk.block(segment)
}

/// Whether lanes that return in `segment` stay in the warp for later subgroup
/// operations: it has subgroup operations and a `Return` in data-dependent control flow
/// (a `Return` in uniform control flow ends every lane at once).
pub(crate) fn keeps_returned_lanes(segment: &[Node], uniformity: &Uniformity<'_>) -> bool {
    has_subgroup(segment) && returns_in_divergent_flow(segment, uniformity, false)
}

/// The variables subgroup operands read, at any depth: those a returned lane keeps for them.
pub(crate) fn subgroup_operand_vars(nodes: &[Node]) -> BTreeSet<&str> {
    let mut names = BTreeSet::new();
    for_each_node(nodes, &mut |node| {
        for_each_expr(node, &mut |expr| {
            for op in outermost_subgroup_ops(expr) {
                names.extend(vars_in(op));
            }
        })
    });
    names
}

/// The subgroup operations of `expr` not nested in another one.
pub(crate) fn outermost_subgroup_ops(expr: &Expr) -> Vec<&Expr> {
    fn visit<'e>(expr: &'e Expr, found: &mut Vec<&'e Expr>) {
        if is_subgroup_op(expr) {
            found.push(expr);
        } else {
            for_each_child(expr, &mut |child| visit(child, found));
        }
    }
    let mut found = Vec::new();
    visit(expr, &mut found);
    found
}

/// The subgroup operations a statement's own expressions hold (not nested statements').
pub(crate) fn own_subgroup_ops(node: &Node) -> Vec<&Expr> {
    let mut found = Vec::new();
    for_each_expr(node, &mut |expr| found.extend(outermost_subgroup_ops(expr)));
    found
}

fn returns_in_divergent_flow(nodes: &[Node], u: &Uniformity<'_>, divergent: bool) -> bool {
    nodes.iter().any(|node| match node {
        Node::Return => divergent,
        Node::If {
            cond,
            then,
            otherwise,
        } => {
            let inner = divergent || !u.is_uniform(cond);
            returns_in_divergent_flow(then, u, inner)
                || returns_in_divergent_flow(otherwise, u, inner)
        }
        Node::Loop { from, to, body, .. } => {
            let inner = divergent || !(u.is_uniform(from) && u.is_uniform(to));
            returns_in_divergent_flow(body, u, inner)
        }
        Node::Block(body) => returns_in_divergent_flow(body, u, divergent),
        Node::Region { body, .. } => returns_in_divergent_flow(body, u, divergent),
        _ => false,
    })
}

/// Variable names read anywhere in `expr`.
pub(crate) fn vars_in(expr: &Expr) -> Vec<&str> {
    fn visit<'e>(expr: &'e Expr, names: &mut Vec<&'e str>) {
        if let Expr::Var(name) = expr {
            names.push(name.as_str());
        }
        for_each_child(expr, &mut |child| visit(child, names));
    }
    let mut names = Vec::new();
    visit(expr, &mut names);
    names.sort_unstable();
    names.dedup();
    names
}

fn loaded_buffers(expr: &Expr) -> FxHashSet<&str> {
    fn visit<'e>(expr: &'e Expr, found: &mut FxHashSet<&'e str>) {
        if let Expr::Load { buffer, .. } = expr {
            found.insert(buffer.as_str());
        }
        for_each_child(expr, &mut |child| visit(child, found));
    }
    let mut found = FxHashSet::default();
    visit(expr, &mut found);
    found
}

/// Buffers `node` itself writes (its store, its atomics).
fn written_by(node: &Node) -> FxHashSet<&str> {
    fn visit<'e>(expr: &'e Expr, found: &mut FxHashSet<&'e str>) {
        if let Expr::Atomic { buffer, .. } = expr {
            found.insert(buffer.as_str());
        }
        for_each_child(expr, &mut |child| visit(child, found));
    }
    let mut found = FxHashSet::default();
    if let Node::Store { buffer, .. } = node {
        found.insert(buffer.as_str());
    }
    for_each_expr(node, &mut |expr| visit(expr, &mut found));
    found
}

/// The trip count of a loop over literal bounds.
fn literal_trips(from: &Expr, to: &Expr) -> Option<Steps> {
    match (from, to) {
        (Expr::LitU32(from), Expr::LitU32(to)) => Some(Steps::from(to.saturating_sub(*from))),
        _ => None,
    }
}

/// Fewest and most trips of a loop: exact over literal bounds; otherwise from none up
/// to what a literal caps the upper bound at (`Min(_, literal)`), if anything does.
fn trips(from: &Expr, to: &Expr) -> (Steps, Steps) {
    if let Some(trips) = literal_trips(from, to) {
        return (trips, trips);
    }
    let first = match from {
        Expr::LitU32(first) => *first,
        _ => 0,
    };
    let most = upper_bound(to).map_or(UNBOUNDED, |end| Steps::from(end.saturating_sub(first)));
    (0, most)
}

/// A literal `expr` never exceeds (as a u32 loop bound).
fn upper_bound(expr: &Expr) -> Option<u32> {
    match expr {
        Expr::LitU32(value) => Some(*value),
        Expr::BinOp {
            op: BinOp::Min,
            left,
            right,
        } => match (upper_bound(left), upper_bound(right)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (one, other) => one.or(other),
        },
        _ => None,
    }
}

/// Steps from a point, over every path: the fewest and the most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    lo: Steps,
    hi: Steps,
}

impl Span {
    const ZERO: Span = Span { lo: 0, hi: 0 };

    fn after(self, steps: Steps) -> Span {
        Span {
            lo: plus(self.lo, steps),
            hi: plus(self.hi, steps),
        }
    }

    fn either(a: Option<Span>, b: Option<Span>) -> Option<Span> {
        match (a, b) {
            (Some(a), Some(b)) => Some(Span {
                lo: a.lo.min(b.lo),
                hi: a.hi.max(b.hi),
            }),
            (one, other) => one.or(other),
        }
    }
}

/// What a data-dependent construct holds, with when it runs, in steps from the
/// construct's own step.
#[derive(Default)]
struct Inside<'p> {
    operations: Vec<(&'p Expr, Span)>,
    returns: Vec<Span>,
    barrier: bool,
}

/// Where the next step of a lane that ran `nodes` from `at` is, or `None` when every
/// path through them returns.
fn span_block<'p>(nodes: &'p [Node], at: Span, inside: &mut Inside<'p>) -> Option<Span> {
    nodes
        .iter()
        .try_fold(at, |at, node| span_node(node, at, inside))
}

fn span_node<'p>(node: &'p Node, at: Span, inside: &mut Inside<'p>) -> Option<Span> {
    for op in own_subgroup_ops(node) {
        inside.operations.push((op, at));
    }
    span_construct(node, at, inside)
}

/// [`span_node`] without `node`'s own operations.
fn span_construct<'p>(node: &'p Node, at: Span, inside: &mut Inside<'p>) -> Option<Span> {
    let next = at.after(1);
    match node {
        Node::Return => {
            inside.returns.push(at);
            None
        }
        Node::If {
            then, otherwise, ..
        } => {
            let then = span_block(then, next, inside).map(|end| end.after(1));
            let otherwise = span_block(otherwise, next, inside).map(|end| end.after(1));
            Span::either(then, otherwise)
        }
        Node::Block(body) => span_block(body, next, inside).map(|end| end.after(1)),
        Node::Region { body, .. } => span_block(body, next, inside).map(|end| end.after(1)),
        Node::Loop { from, to, body, .. } => span_loop(trips(from, to), body, at, inside),
        Node::Barrier { .. } => {
            // Lanes wait there for each other: no upper bound.
            inside.barrier = true;
            Some(Span {
                lo: next.lo,
                hi: UNBOUNDED,
            })
        }
        _ => Some(next),
    }
}

/// A loop at `at` running `trips` (fewest, most) times: its body's events shifted to
/// their first and last iteration, and where the loop ends.
fn span_loop<'p>(
    (fewest, most): (Steps, Steps),
    body: &'p [Node],
    at: Span,
    inside: &mut Inside<'p>,
) -> Option<Span> {
    let mut events = Inside::default();
    let end = span_block(body, Span::ZERO, &mut events);
    // An iteration is its start, the body and the body's end.
    let iteration = end.map(|end| end.after(2));
    let iteration_hi = iteration.map_or(0, |i| i.hi);
    if most > 0 {
        // The body's first step comes two steps after the loop's: in iteration k (from 0),
        // k iterations later.
        let shift = |event: Span| Span {
            lo: plus(at.lo, plus(2, event.lo)),
            hi: plus(
                plus(at.hi, times(most - 1, iteration_hi)),
                plus(2, event.hi),
            ),
        };
        let ops = events.operations.into_iter();
        inside
            .operations
            .extend(ops.map(|(op, when)| (op, shift(when))));
        inside.returns.extend(events.returns.into_iter().map(shift));
        inside.barrier |= events.barrier;
    }
    match iteration {
        Some(iteration) => Some(Span {
            lo: plus(at.lo, plus(times(fewest, iteration.lo), 2)),
            hi: plus(at.hi, plus(times(most, iteration.hi), 2)),
        }),
        // Every iteration returns: only a loop that runs no iteration ends.
        None if fewest == 0 => Some(at.after(2)),
        None => None,
    }
}

/// How a statement list run in uniform control flow moves lanes apart: its fewest steps
/// and how much further apart (at most) it leaves them.
#[derive(Debug, Clone, Copy)]
struct Effect {
    fewest: Steps,
    growth: Steps,
    /// Every lane returns in it.
    ends: bool,
}

impl Effect {
    const STEP: Effect = Effect {
        fewest: 1,
        growth: 0,
        ends: false,
    };

    fn then(self, next: Effect) -> Effect {
        Effect {
            fewest: plus(self.fewest, next.fewest),
            growth: plus(self.growth, next.growth),
            ends: self.ends || next.ends,
        }
    }

    fn or(self, other: Effect) -> Effect {
        match (self.ends, other.ends) {
            (true, _) => other,
            (_, true) => self,
            _ => Effect {
                fewest: self.fewest.min(other.fewest),
                growth: self.growth.max(other.growth),
                ends: false,
            },
        }
    }
}

fn effect_block(nodes: &[Node], u: &Uniformity<'_>) -> Effect {
    nodes.iter().fold(
        Effect {
            fewest: 0,
            growth: 0,
            ends: false,
        },
        |effect, node| effect.then(effect_node(node, u)),
    )
}

/// The effect of a scoped body (its end is one more step).
fn effect_scoped(nodes: &[Node], u: &Uniformity<'_>) -> Effect {
    effect_block(nodes, u).then(Effect::STEP)
}

fn effect_node(node: &Node, u: &Uniformity<'_>) -> Effect {
    if is_divergent(node, u) {
        return match span_construct(node, Span::ZERO, &mut Inside::default()) {
            Some(end) => Effect {
                fewest: end.lo,
                growth: end.hi - end.lo,
                ends: false,
            },
            None => Effect {
                ends: true,
                ..Effect::STEP
            },
        };
    }
    match node {
        Node::Return => Effect {
            ends: true,
            ..Effect::STEP
        },
        Node::If {
            then, otherwise, ..
        } => Effect::STEP.then(effect_scoped(then, u).or(effect_scoped(otherwise, u))),
        Node::Block(body) => Effect::STEP.then(effect_scoped(body, u)),
        Node::Region { body, .. } => Effect::STEP.then(effect_scoped(body, u)),
        Node::Loop { from, to, body, .. } => {
            let (fewest, most) = trips(from, to);
            let iteration = Effect::STEP.then(effect_scoped(body, u));
            Effect::STEP.then(Effect {
                fewest: loop_fewest(fewest, iteration.fewest),
                growth: times(most, iteration.growth),
                ends: iteration.ends && fewest > 0,
            })
        }
        _ => Effect::STEP,
    }
}

/// Fewest steps of a loop after its own step: its iterations and the exit test.
fn loop_fewest(trips: Steps, iteration: Steps) -> Steps {
    plus(times(trips, iteration), 1)
}

fn is_divergent(node: &Node, u: &Uniformity<'_>) -> bool {
    match node {
        Node::If { cond, .. } => !u.is_uniform(cond),
        Node::Loop { from, to, .. } => !(u.is_uniform(from) && u.is_uniform(to)),
        _ => false,
    }
}

/// A variable in scope in uniform control flow.
#[derive(Debug, Clone)]
struct Binding<'p> {
    name: &'p str,
    /// Its scope's depth (0: the segment's own top level, never closed).
    level: usize,
    /// Fewest steps since its `Let` ran (for the earliest lane).
    age: Steps,
    /// How many steps the latest lane ran its `Let` after the earliest.
    lateness: Steps,
}

/// Something that must not happen for `remaining` more steps (of the earliest lane).
#[derive(Debug, Clone, Copy)]
struct Deadline {
    serial: u64,
    /// The scope whose end it is (obligations only).
    level: usize,
    remaining: Steps,
}

/// An enclosing uniform loop.
#[derive(Debug, Clone, Copy)]
struct LoopFrame {
    /// Fewest steps since the current iteration started.
    since_start: Steps,
    /// The fewest steps from an iteration's start to an operation that needs every lane at
    /// the same step ([`UNBOUNDED`]: none).
    first_aligned: Steps,
}

/// The timing facts at a point in uniform control flow.
#[derive(Debug, Clone, Default)]
struct State<'p> {
    /// How many steps the latest running lane is behind the earliest.
    spread: Steps,
    bindings: Vec<Binding<'p>>,
    /// Open scopes: `bindings.len()` when each began.
    scopes: Vec<usize>,
    /// Scope ends that must not come before a subgroup operation reading their variables
    /// has run in every lane.
    obligations: Vec<Deadline>,
    /// Returns that lanes may still be on their way to.
    returning: Vec<Deadline>,
    loops: Vec<LoopFrame>,
    /// Every lane has returned: what follows never runs.
    ended: bool,
}

impl<'p> State<'p> {
    fn elapse(&mut self, steps: Steps) {
        for binding in &mut self.bindings {
            binding.age = plus(binding.age, steps);
        }
        for deadline in self.obligations.iter_mut().chain(&mut self.returning) {
            deadline.remaining = deadline.remaining.saturating_sub(steps).max(-UNBOUNDED);
        }
        for frame in &mut self.loops {
            frame.since_start = plus(frame.since_start, steps);
        }
    }

    fn bind(&mut self, name: &'p str) {
        self.bindings.push(Binding {
            name,
            level: self.scopes.len(),
            age: 0,
            lateness: self.spread,
        });
    }

    fn binding(&self, name: &str) -> Option<&Binding<'p>> {
        self.bindings.iter().rev().find(|b| b.name == name)
    }

    /// Both paths of a uniform branch joined: the worse of each fact.
    fn join(self, other: State<'p>) -> State<'p> {
        match (self.ended, other.ended) {
            (true, _) => return other,
            (_, true) => return self,
            _ => {}
        }
        let mut joined = self;
        joined.spread = joined.spread.max(other.spread);
        for (mine, theirs) in joined.bindings.iter_mut().zip(&other.bindings) {
            mine.age = mine.age.min(theirs.age);
        }
        join_deadlines(&mut joined.obligations, other.obligations);
        join_deadlines(&mut joined.returning, other.returning);
        for (mine, theirs) in joined.loops.iter_mut().zip(&other.loops) {
            mine.since_start = mine.since_start.min(theirs.since_start);
            mine.first_aligned = mine.first_aligned.min(theirs.first_aligned);
        }
        joined
    }
}

fn join_deadlines(mine: &mut Vec<Deadline>, theirs: Vec<Deadline>) {
    for deadline in theirs {
        match mine.iter_mut().find(|d| d.serial == deadline.serial) {
            Some(known) => known.remaining = known.remaining.max(deadline.remaining),
            None => mine.push(deadline),
        }
    }
}

struct Walk<'a, 'p> {
    uniformity: &'a Uniformity<'p>,
    /// Lanes that return stay in the warp (see [`keeps_returned_lanes`]).
    keeps_returned: bool,
    state: State<'p>,
    /// The last [`Deadline::serial`] handed out.
    serial: u64,
}

impl<'p> Walk<'_, 'p> {
    fn block(&mut self, nodes: &'p [Node]) -> Result<(), Unaligned> {
        for node in nodes {
            if self.state.ended {
                break;
            }
            self.node(node)?;
        }
        Ok(())
    }

    fn node(&mut self, node: &'p Node) -> Result<(), Unaligned> {
        for op in own_subgroup_ops(node) {
            self.uniform_operation(op, node)?;
        }
        if is_divergent(node, self.uniformity) {
            return self.divergent(node);
        }
        match node {
            Node::If {
                cond,
                then,
                otherwise,
            } => self.uniform_if(cond, then, otherwise),
            Node::Loop {
                var,
                from,
                to,
                body,
            } => self.uniform_loop(var.as_str(), trips(from, to), body),
            Node::Block(body) => self.scope(body),
            Node::Region { body, .. } => self.scope(body),
            Node::Let { name, .. } => {
                self.state.bind(name.as_str());
                self.state.elapse(1);
                Ok(())
            }
            Node::Return => {
                // Uniform control flow: every lane returns here.
                self.state.ended = true;
                Ok(())
            }
            Node::Barrier { .. } => {
                self.state.elapse(1);
                self.barrier_released();
                Ok(())
            }
            _ => {
                self.state.elapse(1);
                Ok(())
            }
        }
    }

    /// Every running lane has reached the barrier and leaves it in the same round: all
    /// returns are done, every earlier `Let` ran in every lane, and no scope can end
    /// before a lane has evaluated what precedes the barrier.
    fn barrier_released(&mut self) {
        let state = &mut self.state;
        state.spread = 0;
        state.returning.clear();
        state.obligations.clear();
        for binding in &mut state.bindings {
            binding.age = UNBOUNDED;
        }
    }

    /// A `Block` or `Region`: its own step, then its body as a scope.
    fn scope(&mut self, body: &'p [Node]) -> Result<(), Unaligned> {
        self.state.elapse(1);
        self.scoped(body, None)
    }

    /// `body` as a scope (binding `var` first, as a loop iteration does): its end
    /// step must come after every operation that reads its variables.
    fn scoped(&mut self, body: &'p [Node], var: Option<&'p str>) -> Result<(), Unaligned> {
        let level = self.state.scopes.len() + 1;
        self.state.scopes.push(self.state.bindings.len());
        if let Some(var) = var {
            self.state.bind(var);
            self.state.elapse(1);
        }
        self.block(body)?;
        if !self.state.ended {
            let early = self
                .state
                .obligations
                .iter()
                .any(|d| d.level == level && d.remaining > 0);
            if early {
                return Err(lanes_apart(
                    "a lane that took a shorter path may leave the scope of a variable the operation reads (closing it) before every lane has evaluated the operation, and the reference then fails to read it",
                ));
            }
            self.state.elapse(1);
        }
        let state = &mut self.state;
        state.obligations.retain(|d| d.level < level);
        let start = state.scopes.pop().unwrap_or(0);
        state.bindings.truncate(start);
        Ok(())
    }

    fn uniform_if(
        &mut self,
        cond: &Expr,
        then: &'p [Node],
        otherwise: &'p [Node],
    ) -> Result<(), Unaligned> {
        self.state.elapse(1);
        // A literal condition: the other branch never runs.
        if let Expr::LitBool(taken) = cond {
            return self.scoped(if *taken { then } else { otherwise }, None);
        }
        let before = self.state.clone();
        self.scoped(then, None)?;
        let after_then = std::mem::replace(&mut self.state, before);
        self.scoped(otherwise, None)?;
        let after_else = std::mem::take(&mut self.state);
        self.state = after_then.join(after_else);
        Ok(())
    }

    /// A loop every lane runs the same number of times. Its body is walked once, as the
    /// first iteration but with the lanes as far apart as in the last.
    fn uniform_loop(
        &mut self,
        var: &'p str,
        (fewest, most): (Steps, Steps),
        body: &'p [Node],
    ) -> Result<(), Unaligned> {
        self.state.elapse(1);
        if most == 0 {
            // The body never runs: the exit test follows.
            self.state.elapse(1);
            return Ok(());
        }
        let iteration = Effect::STEP.then(effect_scoped(body, self.uniformity));
        let before = self.state.clone();
        let serial_before = self.serial;
        let further = times(most.saturating_sub(1).max(0), iteration.growth);
        self.state.spread = plus(self.state.spread, further);
        self.state.loops.push(LoopFrame {
            since_start: 0,
            first_aligned: UNBOUNDED,
        });
        self.scoped(body, Some(var))?;
        let frame = self.state.loops.pop();
        let after_body = std::mem::replace(&mut self.state, before);
        if let (false, Some(frame)) = (after_body.ended, frame) {
            check_back_edge(&after_body, frame, serial_before)?;
        }
        let state = &mut self.state;
        state.elapse(loop_fewest(fewest, iteration.fewest));
        state.spread = plus(state.spread, times(most, iteration.growth));
        for (mine, theirs) in state.loops.iter_mut().zip(&after_body.loops) {
            mine.first_aligned = mine.first_aligned.min(theirs.first_aligned);
        }
        // What the body's last iteration left pending carries on past the exit test.
        let born_inside = |d: &&Deadline| d.serial > serial_before;
        for (mine, theirs) in [
            (&mut state.obligations, &after_body.obligations),
            (&mut state.returning, &after_body.returning),
        ] {
            mine.extend(theirs.iter().filter(born_inside).map(|d| Deadline {
                remaining: d.remaining.saturating_sub(1),
                ..*d
            }));
        }
        state.ended = after_body.ended && fewest > 0;
        Ok(())
    }

    /// A data-dependent `If` or `Loop`: its subgroup operations run early, at its step,
    /// with every lane; lanes come out of it up to its longest path apart.
    fn divergent(&mut self, node: &'p Node) -> Result<(), Unaligned> {
        let mut inside = Inside::default();
        let end = span_construct(node, Span::ZERO, &mut inside);
        if !inside.operations.is_empty() && !self.hoistable(node) {
            return Err(divergent_operation());
        }
        for (op, when) in inside.operations {
            self.time_invariant_operation(op, when)?;
        }
        if self.keeps_returned && inside.barrier {
            return Err(Unaligned::new(
                "Barrier in divergent control flow of a program whose returned lanes stay for subgroup operations",
                "lanes that returned stay in the warp for later subgroup operations but skip data-dependent branches, so they would never reach this barrier"));
        }
        let spread = self.state.spread;
        for when in inside.returns {
            let deadline = self.deadline(0, plus(spread, when.hi));
            self.state.returning.push(deadline);
        }
        match end {
            Some(end) => {
                self.state.elapse(end.lo);
                self.state.spread = plus(spread, end.hi - end.lo);
            }
            None => self.state.ended = true,
        }
        Ok(())
    }

    fn hoistable(&self, node: &'p Node) -> bool {
        let u = self.uniformity;
        match node {
            Node::If {
                then, otherwise, ..
            } => u.hoistable(then).is_some() && u.hoistable(otherwise).is_some(),
            Node::Loop { var, body, .. } => u.hoistable_in_loop(var.as_str(), body).is_some(),
            _ => false,
        }
    }

    fn deadline(&mut self, level: usize, remaining: Steps) -> Deadline {
        self.serial += 1;
        Deadline {
            serial: self.serial,
            level,
            remaining,
        }
    }

    /// A subgroup operation of `node` (in uniform control flow), run at this step.
    fn uniform_operation(&mut self, op: &'p Expr, node: &'p Node) -> Result<(), Unaligned> {
        let invariant = {
            let none = FxHashSet::default();
            let u = self.uniformity;
            let mut all = true;
            for_each_child(op, &mut |operand| {
                all = all && u.is_time_invariant(operand, &none)
            });
            all
        };
        if invariant {
            return self.time_invariant_operation(op, Span::ZERO);
        }
        self.aligned_operation(op, node)
    }

    /// An operation over time-invariant operands, run `when` steps after this point:
    /// every running lane must have bound each variable it reads, and none may leave
    /// that variable's scope, before every lane has run it.
    fn time_invariant_operation(&mut self, op: &'p Expr, when: Span) -> Result<(), Unaligned> {
        reject_atomic_operand(op)?;
        for name in vars_in(op) {
            let Some(binding) = self.state.binding(name) else {
                continue;
            };
            if plus(binding.age, when.lo) - binding.lateness < 1 {
                return Err(lanes_apart(format!(
                    "a lane that took a longer path before it may not have run the Let of `{name}` yet when another lane evaluates the operation, and the reference then fails to read it"
                )));
            }
            if binding.level > 0 {
                let deadline = self.deadline(binding.level, plus(self.state.spread, when.hi));
                self.state.obligations.push(deadline);
            }
        }
        Ok(())
    }

    /// An operation over values that may change: every lane at the same step, every lane
    /// on its way to a `Return` returned, no write of its operand's buffers in `node`.
    fn aligned_operation(&mut self, op: &'p Expr, node: &'p Node) -> Result<(), Unaligned> {
        reject_atomic_operand(op)?;
        if self.state.spread > 0 {
            return Err(lanes_apart(
                "its operand reads values that may change, and a data-dependent branch or loop before it takes lanes different numbers of steps, so the reference reads some lanes' values from an earlier or later step",
            ));
        }
        if self.state.returning.iter().any(|d| d.remaining > 0) {
            return Err(before_returns());
        }
        let written = written_by(node);
        if loaded_buffers(op).iter().any(|b| written.contains(b)) {
            return Err(Unaligned::new(
                "subgroup operation in a statement that writes a buffer its operand loads",
                "the reference runs the statement lane after lane, so later lanes' operands see the writes of the lanes before them"));
        }
        for frame in &mut self.state.loops {
            frame.first_aligned = frame.first_aligned.min(frame.since_start);
        }
        Ok(())
    }
}

/// Lanes that return in an iteration must have returned when the next iteration's
/// operations over changing values run.
fn check_back_edge(
    after_body: &State<'_>,
    frame: LoopFrame,
    serial_before: u64,
) -> Result<(), Unaligned> {
    let late = after_body
        .returning
        .iter()
        .any(|d| d.serial > serial_before && d.remaining > frame.first_aligned);
    if late {
        return Err(before_returns());
    }
    Ok(())
}

fn reject_atomic_operand(op: &Expr) -> Result<(), Unaligned> {
    let atomic = |e: &Expr| matches!(e, Expr::Atomic { .. });
    let mut found = false;
    for_each_child(op, &mut |operand| {
        found = found || any_expr(operand, &atomic)
    });
    if found {
        return Err(Unaligned::new(
            "atomic in a subgroup operand",
            "the reference runs the atomic once for every lane of every evaluation, in lane order, which converged code does not"));
    }
    Ok(())
}

fn lanes_apart(detail: impl Into<String>) -> Unaligned {
    Unaligned::new("subgroup operation over lanes at different steps", detail)
}

fn before_returns() -> Unaligned {
    Unaligned::new(
        "subgroup operation before returning lanes have returned",
        "its operand reads values that may change, and lanes on a longer path to a Return may still be running it when the others reach the operation, so the reference reads their values from mid-path")
}

fn divergent_operation() -> Unaligned {
    Unaligned::new(
        "subgroup operation in divergent control flow",
        "inside a data-dependent branch or loop, its operand reads values that may change (a variable assigned or bound there, a loop variable, a buffer the program writes), so the subgroup cannot evaluate it for every lane")
}
