//! Atomics whose returned value is never read, lowered as `red` (no result round trip)
//! and, on sm_80+, aggregated across the warp when every active lane targets the same
//! element: one `redux.sync` combines the lanes' operands and one lane issues the `red`.
//!
//! Why this is exact: the reference runs invocations one at a time and ignores the
//! ordering field, so the final contents of the target are the fold of every lane's
//! operand in some order. The aggregated operators (wrapping u32 add, unsigned min/max,
//! and/or/xor) are associative and commutative on u32, so any grouping gives the same
//! bits. `Exchange` and `CompareExchange` are order-dependent and keep their `atom`. The
//! old value is never read (the `Let` binding it is never referenced), so what a lane
//! would have observed is unobservable; a program that reads the target again within the
//! same dispatch without a barrier races with the other lanes' atomics in the reference
//! too (its result depends on lane order), so `relaxed` suffices for every ordering.
//!
//! One step further, for a buffer that the program touches *only* through such atomics,
//! all with one operator, in a program without barriers or async copies: the atomics on a
//! literal index fold into a per-workgroup partial in shared memory (initialised to the
//! operator's identity), and one lane applies each partial to global memory when the
//! workgroup ends (`Return` jumps there too). With one commutative, associative operator
//! and no reader of the buffer, when each contribution lands cannot be observed; the
//! partial is applied only when the index is in bounds, as the reference drops an
//! out-of-bounds atomic. This turns 2^19 same-address global reductions (one per warp,
//! serialised at one L2 slice) into one per workgroup.

use super::lower::Lowerer;
use super::visit::{children, for_each_child, for_each_expr};
use super::writer::{emit, Reg};
use rustc_hash::{FxHashMap, FxHashSet};
use vyre_foundation::ir::{AtomicOp, Expr, Node};

/// Shared-memory array holding the per-workgroup partials.
pub(crate) const PARTIALS: &str = "vyre_partial";

/// One per-workgroup partial: the global element it is applied to, and how.
pub(crate) struct Partial<'p> {
    pub(crate) buffer: &'p str,
    pub(crate) index: u32,
    pub(crate) opcode: &'static str,
}

impl Partial<'_> {
    /// The operator's identity: the partial's starting value.
    pub(crate) fn identity(&self) -> u32 {
        match self.opcode {
            "and.b32" | "min.u32" => u32::MAX,
            _ => 0,
        }
    }
}

/// The `red`/`redux` operator an atomic whose result is discarded lowers to, where the
/// operator is order-independent.
pub(crate) fn commutative_opcode(op: AtomicOp) -> Option<&'static str> {
    Some(match op {
        AtomicOp::Add => "add.u32",
        AtomicOp::Or => "or.b32",
        AtomicOp::And => "and.b32",
        AtomicOp::Xor => "xor.b32",
        AtomicOp::Min => "min.u32",
        AtomicOp::Max | AtomicOp::LruUpdate => "max.u32",
        _ => return None,
    })
}

/// A `Let` of an atomic without `expected` whose name no expression reads: the atomic's
/// old value is discarded.
pub(crate) struct DiscardedLet<'p> {
    pub(crate) op: AtomicOp,
    pub(crate) buffer: &'p str,
    pub(crate) index: &'p Expr,
    pub(crate) value: &'p Expr,
}

/// `node` as a [`DiscardedLet`], given every name some expression reads.
pub(crate) fn discarded_let<'p>(
    node: &'p Node,
    read_vars: &FxHashSet<&str>,
) -> Option<DiscardedLet<'p>> {
    match node {
        Node::Let {
            name,
            value:
                Expr::Atomic {
                    op,
                    buffer,
                    index,
                    expected: None,
                    value,
                    ..
                },
        } if !read_vars.contains(name.as_str()) => Some(DiscardedLet {
            op: *op,
            buffer: buffer.as_str(),
            index,
            value,
        }),
        _ => None,
    }
}

/// An `atom` whose old value nobody reads, with its operands already lowered.
pub(crate) struct DiscardedAtomic {
    /// `<op>.<type>` shared by `red` and `redux.sync` (see [`commutative_opcode`]).
    pub(crate) opcode: &'static str,
    /// Element index (u32) and whether it is a literal (then trivially the same for all lanes).
    pub(crate) index: Reg,
    pub(crate) literal_index: bool,
    pub(crate) value: Reg,
    pub(crate) in_bounds: Reg,
    pub(crate) addr: Reg,
    /// Shared-memory partial this atomic folds into instead (see the module docs).
    pub(crate) partial: Option<u32>,
}

impl Lowerer<'_> {
    /// Emit `discarded` as per-lane `red`, or warp-aggregated where that is exact.
    pub(crate) fn put_reduction(&mut self, discarded: DiscardedAtomic) {
        let DiscardedAtomic {
            opcode,
            index,
            literal_index,
            value,
            in_bounds,
            addr,
            partial,
        } = discarded;
        if let Some(slot) = partial {
            let target = format!("[{PARTIALS}+{}]", slot * 4);
            if self.sm < 80 {
                emit!(self.writer(), "red.shared.{opcode} {target}, {value}");
                return;
            }
            let active = self.b32();
            emit!(self.writer(), "activemask.b32 {active}");
            let combined = self.b32();
            emit!(
                self.writer(),
                "redux.sync.{opcode} {combined}, {value}, {active}"
            );
            let leader = self.lowest_active_lane(active);
            emit!(
                self.writer(),
                "@{leader} red.shared.{opcode} {target}, {combined}"
            );
            return;
        }
        if self.sm < 80 {
            // An out-of-bounds atomic writes nothing.
            emit!(
                self.writer(),
                "@{in_bounds} red.relaxed.gpu.global.{opcode} [{addr}], {value}"
            );
            return;
        }
        // The lanes converged here; they all execute the straight-line code below.
        let active = self.b32();
        emit!(self.writer(), "activemask.b32 {active}");
        let same = self.pred();
        if literal_index {
            emit!(self.writer(), "setp.eq.u32 {same}, 0, 0");
        } else {
            let matched = self.b32();
            emit!(
                self.writer(),
                "match.all.sync.b32 {matched}|{same}, {index}, {active}"
            );
        }
        let combined = self.b32();
        emit!(
            self.writer(),
            "redux.sync.{opcode} {combined}, {value}, {active}"
        );
        let leader = self.lowest_active_lane(active);
        emit!(self.writer(), "and.pred {leader}, {leader}, {same}");
        // Same index and buffer, so `in_bounds` agrees across the aggregated lanes.
        emit!(self.writer(), "and.pred {leader}, {leader}, {in_bounds}");
        emit!(
            self.writer(),
            "@{leader} red.relaxed.gpu.global.{opcode} [{addr}], {combined}"
        );
        let alone = self.pred();
        emit!(self.writer(), "not.pred {alone}, {same}");
        emit!(self.writer(), "and.pred {alone}, {alone}, {in_bounds}");
        emit!(
            self.writer(),
            "@{alone} red.relaxed.gpu.global.{opcode} [{addr}], {value}"
        );
    }
}

impl Lowerer<'_> {
    /// A predicate that holds on the lowest lane of `active`: no active lane below it.
    fn lowest_active_lane(&mut self, active: Reg) -> Reg {
        let below = self.b32();
        emit!(self.writer(), "mov.u32 {below}, %lanemask_lt");
        emit!(self.writer(), "and.b32 {below}, {below}, {active}");
        let leader = self.pred();
        emit!(self.writer(), "setp.eq.u32 {leader}, {below}, 0");
        leader
    }
}

/// Buffers whose discarded atomics may fold into per-workgroup partials: the program has
/// no barrier and no async copy, and touches the buffer only through `Let`s of atomics
/// that nobody reads, all with the same commutative operator and no `expected`.
pub(crate) fn partial_buffers<'p>(
    nodes: &'p [Node],
    read_vars: &FxHashSet<&'p str>,
) -> FxHashSet<&'p str> {
    let mut census = Census {
        read_vars,
        opcodes: FxHashMap::default(),
        other_use: FxHashSet::default(),
        blocked: false,
    };
    census.nodes(nodes);
    if census.blocked {
        return FxHashSet::default();
    }
    census
        .opcodes
        .into_iter()
        .filter(|(buffer, opcode)| opcode.is_some() && !census.other_use.contains(buffer))
        .map(|(buffer, _)| buffer)
        .collect()
}

struct Census<'p, 'r> {
    read_vars: &'r FxHashSet<&'p str>,
    /// The single operator of each buffer's discarded literal-index atomics (`None` once
    /// two operators or a computed index were seen).
    opcodes: FxHashMap<&'p str, Option<&'static str>>,
    /// Buffers used any other way.
    other_use: FxHashSet<&'p str>,
    /// The program has a construct that rules the transformation out everywhere.
    blocked: bool,
}

impl<'p> Census<'p, '_> {
    fn nodes(&mut self, nodes: &'p [Node]) {
        for node in nodes {
            if let Some(atomic) = discarded_let(node, self.read_vars) {
                let opcode = commutative_opcode(atomic.op)
                    .filter(|_| matches!(atomic.index, Expr::LitU32(_)));
                let entry = self.opcodes.entry(atomic.buffer).or_insert(opcode);
                if *entry != opcode {
                    *entry = None;
                }
                self.expr(atomic.index);
                self.expr(atomic.value);
                continue;
            }
            match node {
                Node::Store { buffer, .. } => {
                    self.other_use.insert(buffer.as_str());
                    for_each_expr(node, &mut |expr| self.expr(expr));
                }
                Node::Let { .. }
                | Node::Assign { .. }
                | Node::If { .. }
                | Node::Loop { .. }
                | Node::Block(_)
                | Node::Region { .. }
                | Node::Return => {
                    for_each_expr(node, &mut |expr| self.expr(expr));
                    for body in children(node) {
                        self.nodes(body);
                    }
                }
                _ => self.blocked = true,
            }
        }
    }

    fn expr(&mut self, expr: &'p Expr) {
        match expr {
            Expr::Load { buffer, .. } | Expr::Atomic { buffer, .. } => {
                self.other_use.insert(buffer.as_str());
            }
            _ => {}
        }
        for_each_child(expr, &mut |child| self.expr(child));
    }
}

/// Every variable name some expression of `nodes` reads (`Expr::Var`), at any depth.
pub(crate) fn read_variables<'p>(nodes: &'p [Node], out: &mut FxHashSet<&'p str>) {
    fn walk<'p>(expr: &'p Expr, out: &mut FxHashSet<&'p str>) {
        if let Expr::Var(name) = expr {
            out.insert(name.as_str());
        }
        for_each_child(expr, &mut |child| walk(child, out));
    }
    for node in nodes {
        for_each_expr(node, &mut |expr| walk(expr, out));
        for body in children(node) {
            read_variables(body, out);
        }
    }
}
