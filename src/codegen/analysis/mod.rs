//! Whole-program analyses, computed once per [`emit_ptx`](super::emit_ptx) into one
//! [`ProgramFacts`] that every lowerer of the kernel (each segment, the cooperative form,
//! the vector entry) reads. Analyses never import the lowering; the lowering imports them.

pub(crate) mod async_copy;
pub(crate) mod atomics;
pub(crate) mod bytes;
pub(crate) mod elementwise;
pub(crate) mod grid_sync;
pub(crate) mod lockstep;
pub(crate) mod loop_bounds;
pub(crate) mod nesting;
pub(crate) mod replicated;
pub(crate) mod shared;
pub(crate) mod steps;
pub(crate) mod tree_reduction;
pub(crate) mod uniform;
pub(crate) mod unroll;

use super::libm::Libm;
use super::visit::{any_expr_in, for_each_node};
use bytes::BytesFacts;
use elementwise::Elementwise;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeSet;
use uniform::Uniformity;
use vyre_foundation::ir::{DataType, Expr, Node, Program};

/// What the lowering needs to know about the whole (prepared) program.
pub(crate) struct ProgramFacts<'p> {
    /// Which values are the same across a workgroup.
    pub(crate) uniformity: Uniformity<'p>,
    /// The variables subgroup operands read (a lane that returns keeps their values for
    /// later subgroup operations, see [`lockstep`]).
    pub(crate) subgroup_operand_vars: BTreeSet<&'p str>,
    /// Variables some expression reads: a `Let` of an atomic outside this set discards
    /// the old value, so the atomic can be a (warp-aggregated) `red`. Empty for a program
    /// without atomics (nobody asks then).
    pub(crate) read_vars: FxHashSet<&'p str>,
    /// Buffers whose literal-index discarded atomics fold into per-workgroup partials.
    pub(crate) partial_buffers: FxHashSet<&'p str>,
    /// The program calls libm routines, so every branch and loop test is hidden from
    /// ptxas's constant folding (see `Lowerer::branch_pred`).
    pub(crate) calls_libm: bool,
    /// The body with every scope holding a top-level grid barrier dissolved, when there is
    /// such a barrier (see [`grid_sync`]); `None` runs the entry as one segment.
    flattened: Option<Vec<Node>>,
    entry: &'p [Node],
    /// The elementwise shape, when the program gets a vector entry.
    pub(crate) elementwise: Option<Elementwise<'p>>,
    /// In a program with F16/BF16 buffers, every assigned variable: one bound to an f32 is
    /// held as a half (`ValKind::Half`), since an assignment may give it a half load,
    /// out of bounds included. Empty otherwise.
    pub(crate) half_locals: FxHashSet<&'p str>,
    /// Which bytes buffers are written and which variables are read or assigned, for the
    /// bytes views bound to variables (see [`bytes`]).
    pub(crate) bytes: BytesFacts<'p>,
    /// Repeated pure sub-expressions of a statement, computed once (see [`shared`]).
    pub(crate) shared: shared::SharedExprs,
    /// Loops whose loads one test before the loop can check (see [`loop_bounds`]).
    pub(crate) hoisted_checks: FxHashMap<*const Node, Vec<loop_bounds::HoistedCheck<'p>>>,
    /// Variables a `Let` or `Assign` gives a literal unsigned zero: compared as one (see
    /// [`is_unsigned_zero`]), ptxas knows their value.
    pub(crate) zero_vars: FxHashSet<&'p str>,
    /// Workgroup tree reductions lowered as one construct (see [`tree_reduction`]),
    /// keyed by their first replaced statement.
    pub(crate) tree_reductions: FxHashMap<*const Node, tree_reduction::TreeReduction<'p>>,
}

impl<'p> ProgramFacts<'p> {
    pub(crate) fn analyse(program: &'p Program, workgroup_size: [u32; 3]) -> Self {
        let entry = program.entry();
        // Only atomics consult which variables are read (a discarded atomic result may
        // become a `red`): skip the two whole-program walks for programs without any.
        let mut read_vars = FxHashSet::default();
        let mut partial_buffers = FxHashSet::default();
        if any_expr_in(entry, &|e| matches!(e, Expr::Atomic { .. })) {
            atomics::read_variables(entry, &mut read_vars);
            partial_buffers = atomics::partial_buffers(entry, &read_vars);
        }
        let flattened = grid_sync::contains_grid_sync(entry).then(|| {
            let mut nodes = Vec::new();
            grid_sync::flatten(entry, &mut nodes);
            nodes
        });
        // Over the nodes the segments are lowered from (the flattened copy's live in its
        // vector, whose buffer moves with it into the facts).
        let shared = shared::shared_subexpressions(flattened.as_deref().unwrap_or(entry));
        // Over the entry only: a program split at grid barriers lowers a flattened copy
        // (whose loops then keep their per-load checks).
        let hoisted_checks = match flattened {
            None => loop_bounds::hoistable_checks(entry),
            Some(_) => FxHashMap::default(),
        };
        // A program split at grid barriers has barriers, so never a vector entry.
        let elementwise = match flattened {
            None => elementwise::classify(program, workgroup_size, &read_vars),
            Some(_) => None,
        };
        let subgroup_operand_vars = lockstep::subgroup_operand_vars(entry);
        // Over the entry only, as the hoisted checks.
        let tree_reductions = match flattened {
            None => tree_reduction::tree_reductions(program, workgroup_size),
            Some(_) => FxHashMap::default(),
        };
        Self {
            uniformity: Uniformity::analyse(program),
            bytes: BytesFacts::analyse(program, &subgroup_operand_vars),
            subgroup_operand_vars,
            read_vars,
            partial_buffers,
            calls_libm: any_expr_in(
                entry,
                &|e| matches!(e, Expr::UnOp { op, .. } if Libm::for_unop(op).is_some()),
            ),
            flattened,
            entry,
            elementwise,
            half_locals: half_locals(program),
            shared,
            hoisted_checks,
            zero_vars: zero_vars(entry),
            tree_reductions,
        }
    }

    /// Whether `expr` is an unsigned zero ptxas sees as a constant: a literal `0u` (or
    /// one cast to u64), or a variable bound to one.
    pub(crate) fn is_unsigned_zero(&self, expr: &Expr) -> bool {
        match expr {
            Expr::Var(name) => self.zero_vars.contains(name.as_str()),
            other => is_unsigned_zero_literal(other),
        }
    }

    /// The bodies launched one after another: the entry, or its grid-barrier segments.
    pub(crate) fn segments(&self) -> Vec<&[Node]> {
        match &self.flattened {
            Some(nodes) => grid_sync::split(nodes),
            None => vec![self.entry],
        }
    }
}

/// A literal `0u`, or one cast to u64.
fn is_unsigned_zero_literal(expr: &Expr) -> bool {
    match expr {
        Expr::LitU32(0) => true,
        Expr::Cast { target, value } => {
            *target == DataType::U64 && matches!(**value, Expr::LitU32(0))
        }
        _ => false,
    }
}

/// See [`ProgramFacts::zero_vars`].
fn zero_vars(entry: &[Node]) -> FxHashSet<&str> {
    let mut zero = FxHashSet::default();
    for_each_node(entry, &mut |node| match node {
        Node::Let { name, value } | Node::Assign { name, value }
            if is_unsigned_zero_literal(value) =>
        {
            zero.insert(name.as_str());
        }
        _ => {}
    });
    zero
}

/// See [`ProgramFacts::half_locals`].
fn half_locals(program: &Program) -> FxHashSet<&str> {
    let mut assigned = FxHashSet::default();
    let has_half = program
        .buffers()
        .iter()
        .any(|buffer| matches!(buffer.element(), DataType::F16 | DataType::BF16));
    if has_half {
        for_each_node(program.entry(), &mut |node| {
            if let Node::Assign { name, .. } = node {
                assigned.insert(name.as_str());
            }
        });
    }
    assigned
}
