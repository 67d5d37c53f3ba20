//! The last levels of a workgroup tree reduction as shuffles in warp 0 (see
//! `analysis::warp_tree`): lane `i` holds element `i` of the scratch buffer as bits in a
//! register, each level combines it with lane `i + s`'s exactly where the tree would
//! store, and the lanes that may have changed write their element back once. The
//! barrier after the last level stays.

use super::memory::Space;
use super::Lowerer;
use crate::codegen::analysis::warp_tree::WarpTree;
use crate::codegen::kind::ValKind;
use crate::codegen::writer::{emit, Reg};
use crate::codegen::CodegenError;
use vyre_foundation::ir::{DataType, Node};

/// What a level needs besides its stride: the tree, the element's load kind and type,
/// and the lane's invocation index.
struct Levels<'t> {
    tree: &'t WarpTree<'t>,
    kind: ValKind,
    element: DataType,
    local: Reg,
}

impl<'p> Lowerer<'p> {
    /// The warp form starting at `node`, where every lane of the workgroup runs this code
    /// together: uniform control flow, each lane its own invocation (no lane schedule, step
    /// machine, speculated branch or vector lanes), its variable in scope.
    pub(super) fn warp_tree_at(&self, node: &Node) -> Option<WarpTree<'p>> {
        let together = self.divergence == 0
            && self.schedule.is_none()
            && self.steps.is_none()
            && self.speculation.is_none()
            && self.lanes.is_none()
            && self.returned.is_none();
        let tree = *self.facts.warp_trees.get(&(node as *const Node))?;
        let bound = self.locals.contains_key(tree.local);
        (together && bound).then_some(tree)
    }

    /// Every warp runs the levels (straight-line: ptxas compiles that faster than a
    /// branch around them), but only warp 0's lanes below `top` write, where the guard
    /// holds: the invocations the tree stores from. An element past the buffer reads as
    /// zero and is never written, as in the tree.
    pub(super) fn put_warp_tree(&mut self, tree: &WarpTree<'p>) -> Result<(), CodegenError> {
        self.shared_values.clear();
        let slot = self.slot(tree.scratch)?;
        let local = self.locals.get(tree.local).map(|local| local.val.reg);
        let kind = ValKind::of_load(&slot.element);
        let (Some(local), Some(kind), Space::Shared { .. }) = (local, kind, slot.space) else {
            return Err(CodegenError::invalid(
                "a workgroup tree's warp form without its variable or workgroup buffer",
                "report this vyre-cuda bug",
            ));
        };
        let (held, addr) = self.element_address(&slot, local);
        let mut bits = self.b32();
        emit!(self.w, "mov.b32 {bits}, 0");
        emit!(self.w, "@{held} ld.shared.b32 {bits}, [{addr}]");
        let levels = Levels {
            tree,
            kind,
            element: slot.element.clone(),
            local,
        };
        let mut stride = tree.top;
        while stride > 0 {
            bits = self.warp_level(&levels, bits, stride)?;
            stride /= 2;
        }
        let changed = self.pred();
        emit!(self.w, "setp.lt.u32 {changed}, {local}, {}", tree.top);
        emit!(self.w, "and.pred {changed}, {changed}, {held}");
        if let Some(guard) = tree.guard {
            let guard = self.put_expr(guard)?;
            let taken = self.truthy(guard);
            emit!(self.w, "and.pred {changed}, {changed}, {taken}");
        }
        emit!(self.w, "@{changed} st.shared.b32 [{addr}], {bits}");
        self.shared_values.clear();
        Ok(())
    }

    /// One level: `bits` combined with lane `local + stride`'s where `local < stride` and
    /// the partner is in the tile, converted as the tree's load, operator and store would.
    fn warp_level(
        &mut self,
        levels: &Levels<'_>,
        bits: Reg,
        stride: u32,
    ) -> Result<Reg, CodegenError> {
        let (partner, own) = (self.b32(), self.sync_operand(bits));
        let mask = self.subgroup_mask;
        emit!(
            self.w,
            "shfl.sync.down.b32 {partner}, {own}, {stride}, 31, {mask}"
        );
        // The next branch steers by it, so ptxas keeps the shuffle where every lane runs
        // (see `checks::anchor`).
        self.unanchored.push(partner);
        let left = self.word_value(levels.kind, bits);
        let right = self.word_value(levels.kind, partner);
        let value = self.put_binop(levels.tree.op, left, right)?;
        let value = self.store_payload(&levels.element, value);
        // `local < stride && local + stride < tile`.
        let bound = stride.min(levels.tree.tile.saturating_sub(stride));
        let stores = self.pred();
        emit!(self.w, "setp.lt.u32 {stores}, {}, {bound}", levels.local);
        let next = self.b32();
        emit!(self.w, "selp.b32 {next}, {value}, {bits}, {stores}");
        Ok(next)
    }
}
