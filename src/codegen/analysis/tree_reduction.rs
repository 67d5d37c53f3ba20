//! Workgroup tree reductions, lowered as one construct.
//!
//! vyre-primitives' `workgroup_tree` (used by softmax, the norms, cross entropy, mean and
//! dot) reduces a workgroup buffer in levels `s = top, top/2 .. 1`, each
//! `if local < s { if local + s < tile { scratch[local] = scratch[local] op
//! scratch[local + s] } }` followed by a barrier. Lowered statement by statement, each
//! level is two nested branches around bounds-checked loads, and those levels were most of
//! cross entropy's compile time. The lowering runs the tree as one construct instead: the
//! levels `s > 16` as straight-line code (loads, the operator, a predicated store; the
//! barrier after each stays), and the levels `s <= 16`, which read and write only elements
//! below 32, in warp 0: lane `i` holds element `i` in a register and combines it with lane
//! `i + s`'s (a shuffle), with one barrier after them instead of five. (Running the wider
//! levels in warp 0 too, lane `i` holding elements `i + 32 k`, took ptxas longer: each
//! lane combines more values than a level's invocation does.)
//!
//! Exact: in the reference each level's lanes read only elements no lane of that level
//! writes (`local + s >= s`), so a level's result does not depend on lane order; each
//! register is updated exactly where the level stores, through the same conversions as a
//! load, the operator and a store, and every element the levels may change is written
//! back. Found here (pure IR facts); the lowering adds what depends on where it stands
//! (uniform control flow, each lane its own invocation).

use crate::codegen::visit::{children, for_each_node, has_return};
use rustc_hash::{FxHashMap, FxHashSet};
use vyre_foundation::ir::{BinOp, BufferAccess, DataType, Expr, Node, Program};

/// The levels `top .. 1` of one tree.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TreeReduction<'p> {
    pub(crate) scratch: &'p str,
    /// The variable bound to the local invocation id (x): the lane's element.
    pub(crate) local: &'p str,
    pub(crate) op: BinOp,
    /// The workgroup-uniform condition each level's lanes also test (the
    /// `FirstWorkgroup` scope: `workgroup_id.x == k`).
    pub(crate) guard: Option<&'p Expr>,
    /// The widest stride (the first level's).
    pub(crate) top: u32,
    /// Elements taking part: a lane combines only with a partner below `tile`.
    pub(crate) tile: u32,
    /// The statements replaced: each level's `If` and the barriers between levels (the
    /// last level's barrier stays).
    pub(crate) statements: usize,
}

impl TreeReduction<'_> {
    /// The lanes that combine at level `stride`: `local < stride && local + stride <
    /// tile` is `local` below this.
    pub(crate) fn combining_below(&self, stride: u32) -> u32 {
        stride.min(self.tile.saturating_sub(stride))
    }
}

/// One level, as the tree builds it.
#[derive(Clone, Copy, PartialEq)]
struct Level<'p> {
    scratch: &'p str,
    local: &'p str,
    op: BinOp,
    guard: Option<&'p Expr>,
    stride: u32,
    tile: u32,
}

/// Every tree the lowering may run as one construct, keyed by its first statement.
/// `workgroup_size` is the effective one; the shuffles need a one-dimensional
/// workgroup (lane `i` of warp 0 is invocation `i`) with every lane it shuffles from.
pub(crate) fn tree_reductions<'p>(
    program: &'p Program,
    workgroup_size: [u32; 3],
) -> FxHashMap<*const Node, TreeReduction<'p>> {
    let mut trees = FxHashMap::default();
    let entry = program.entry();
    // A returned lane has exited and cannot hand its element over.
    if workgroup_size[1] != 1 || workgroup_size[2] != 1 || has_return(entry) {
        return trees;
    }
    let finder = Finder {
        program,
        lanes: workgroup_size[0],
        local_ids: local_id_vars(entry),
    };
    finder.scan(entry, false, &mut trees);
    trees
}

struct Finder<'p> {
    program: &'p Program,
    lanes: u32,
    local_ids: FxHashSet<&'p str>,
}

impl<'p> Finder<'p> {
    /// Trees in `nodes` and the statement lists nested in them; `after_barrier` says
    /// whether a barrier runs just before `nodes` (scopes are transparent).
    fn scan(
        &self,
        nodes: &'p [Node],
        after_barrier: bool,
        trees: &mut FxHashMap<*const Node, TreeReduction<'p>>,
    ) {
        let mut i = 0;
        while i < nodes.len() {
            let after = match i {
                0 => after_barrier,
                _ => is_barrier(&nodes[i - 1]),
            };
            if let Some(tree) = after.then(|| self.tree_at(&nodes[i..])).flatten() {
                trees.insert(&nodes[i] as *const Node, tree);
                i += tree.statements;
                continue;
            }
            let node = &nodes[i];
            let scope = matches!(node, Node::Block(_) | Node::Region { .. });
            for body in children(node) {
                self.scan(body, scope && after, trees);
            }
            i += 1;
        }
    }

    /// The tree starting at `nodes[0]`: levels `s, s/2, .., 1`, each followed by a
    /// barrier, over one scratch buffer, variable, operator and tile.
    fn tree_at(&self, nodes: &'p [Node]) -> Option<TreeReduction<'p>> {
        let first = self.level(nodes.first()?)?;
        if !first.stride.is_power_of_two() {
            return None;
        }
        let mut stride = first.stride;
        let mut at = 0;
        loop {
            let level = self.level(&nodes[at])?;
            if level != (Level { stride, ..first }) || !is_barrier(nodes.get(at + 1)?) {
                return None;
            }
            if stride == 1 {
                break;
            }
            stride /= 2;
            at += 2;
        }
        // Every lane a shuffle reads from must be in the warp (the wider levels' lanes
        // are the tree's own).
        let shuffled = (2 * first.stride.min(16)).min(first.tile);
        (self.lanes >= shuffled).then_some(TreeReduction {
            scratch: first.scratch,
            local: first.local,
            op: first.op,
            guard: first.guard,
            top: first.stride,
            tile: first.tile,
            statements: at + 1,
        })
    }

    /// `if [guard &&] local < s { if local + s < tile { scratch[local] =
    /// scratch[local] op scratch[local + s] } }`.
    fn level(&self, node: &'p Node) -> Option<Level<'p>> {
        let (cond, then) = sole_branch(node)?;
        let (guard, lane_test) = match binop(cond) {
            Some((BinOp::And, guard, lane_test)) if is_guard(guard) => (Some(guard), lane_test),
            _ => (None, cond),
        };
        let (BinOp::Lt, Expr::Var(local), Expr::LitU32(stride)) = binop(lane_test)? else {
            return None;
        };
        let [inner] = then else { return None };
        let (partner_test, [store]) = sole_branch(inner)? else {
            return None;
        };
        let (BinOp::Lt, partner, Expr::LitU32(tile)) = binop(partner_test)? else {
            return None;
        };
        let Node::Store {
            buffer,
            index,
            value,
        } = store
        else {
            return None;
        };
        let (op, left, right) = binop(value)?;
        let local = local.as_str();
        let lane = Expr::var(local);
        let plus_stride = Expr::add(lane.clone(), Expr::u32(*stride));
        let scratch = buffer.as_str();
        let fits = *index == lane
            && *partner == plus_stride
            && is_load(left, scratch, &lane)
            && is_load(right, scratch, &plus_stride)
            && matches!(op, BinOp::Add | BinOp::Min | BinOp::Max)
            && self.local_ids.contains(local)
            && self.reducible(scratch);
        fits.then_some(Level {
            scratch,
            local,
            op,
            guard,
            stride: *stride,
            tile: *tile,
        })
    }

    /// A workgroup buffer of u32 or f32 elements.
    fn reducible(&self, scratch: &str) -> bool {
        self.program.buffers().iter().any(|decl| {
            decl.name() == scratch
                && decl.access() == BufferAccess::Workgroup
                && matches!(decl.element(), DataType::U32 | DataType::F32)
        })
    }
}

/// Variables bound once, by a `Let` of `LocalId { axis: 0 }`, and never assigned.
fn local_id_vars(entry: &[Node]) -> FxHashSet<&str> {
    let mut bindings: FxHashMap<&str, (u32, bool)> = FxHashMap::default();
    for_each_node(entry, &mut |node| {
        let (name, local_id) = match node {
            Node::Let { name, value } => (name, *value == Expr::LocalId { axis: 0 }),
            Node::Assign { name, .. } | Node::Loop { var: name, .. } => (name, false),
            _ => return,
        };
        let entry = bindings.entry(name.as_str()).or_insert((0, true));
        entry.0 += 1;
        entry.1 &= local_id;
    });
    (bindings.into_iter())
        .filter(|&(_, (count, local_id))| count == 1 && local_id)
        .map(|(name, _)| name)
        .collect()
}

/// `workgroup_id.x == k`: the same in every lane of a workgroup, and free of faults.
fn is_guard(expr: &Expr) -> bool {
    matches!(
        binop(expr),
        Some((BinOp::Eq, Expr::WorkgroupId { axis: 0 }, Expr::LitU32(_)))
    )
}

fn is_barrier(node: &Node) -> bool {
    matches!(node, Node::Barrier { .. })
}

/// `if cond { then }` without an else branch.
fn sole_branch(node: &Node) -> Option<(&Expr, &[Node])> {
    match node {
        Node::If {
            cond,
            then,
            otherwise,
        } if otherwise.is_empty() => Some((cond, then)),
        _ => None,
    }
}

fn binop(expr: &Expr) -> Option<(BinOp, &Expr, &Expr)> {
    match expr {
        Expr::BinOp { op, left, right } => Some((*op, left, right)),
        _ => None,
    }
}

fn is_load(expr: &Expr, scratch: &str, index: &Expr) -> bool {
    matches!(expr, Expr::Load { buffer, index: at } if buffer.as_str() == scratch && **at == *index)
}
