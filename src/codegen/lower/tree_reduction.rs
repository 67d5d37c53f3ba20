//! A workgroup tree reduction as one construct (see `analysis::tree_reduction`): the
//! levels of stride over 16 as straight-line code, each followed by its barrier; the
//! levels 16 .. 1 as shuffles in warp 0, where lane `i` holds element `i` of the scratch
//! buffer as bits in a register, combines it with lane `i + s`'s exactly where the tree
//! would store, and writes it back once if a level may have changed it. The barrier after
//! the last level stays.

use super::memory::{BufferSlot, Space};
use super::Lowerer;
use crate::codegen::analysis::tree_reduction::TreeReduction;
use crate::codegen::kind::ValKind;
use crate::codegen::writer::{emit, Reg};
use crate::codegen::CodegenError;
use vyre_foundation::ir::Node;

/// What every level reads: the tree, its scratch buffer and the element's load kind, the
/// lane's invocation index, and the tree's guard (`workgroup_id.x == k`), evaluated once.
struct Levels<'t> {
    tree: &'t TreeReduction<'t>,
    slot: BufferSlot,
    kind: ValKind,
    local: Reg,
    guard: Option<Reg>,
}

impl<'p> Lowerer<'p> {
    /// The tree starting at `node`, where every lane of the workgroup runs this code
    /// together: uniform control flow, each lane its own invocation (no lane schedule, step
    /// machine, speculated branch or vector lanes), its variable in scope.
    pub(super) fn tree_reduction_at(&self, node: &Node) -> Option<TreeReduction<'p>> {
        let together = self.divergence == 0
            && self.schedule.is_none()
            && self.steps.is_none()
            && self.speculation.is_none()
            && self.lanes.is_none()
            && self.returned.is_none();
        let tree = *self.facts.tree_reductions.get(&(node as *const Node))?;
        let bound = self.locals.contains_key(tree.local);
        (together && bound).then_some(tree)
    }

    /// Every lane runs every level as straight-line code (ptxas compiles that faster than
    /// branches), storing only where the tree's statement would. An element past the
    /// buffer reads as zero and is never written, as in the tree.
    pub(super) fn put_tree_reduction(
        &mut self,
        tree: &TreeReduction<'p>,
    ) -> Result<(), CodegenError> {
        self.shared_values.clear();
        let slot = self.slot(tree.scratch)?;
        let local = self.locals.get(tree.local).map(|local| local.val.reg);
        let kind = ValKind::of_load(&slot.element);
        let (Some(local), Some(kind), Space::Shared { .. }) = (local, kind, slot.space) else {
            return Err(CodegenError::invalid(
                "a workgroup tree reduction without its variable or workgroup buffer",
                "report this vyre-cuda bug",
            ));
        };
        let guard = match tree.guard {
            Some(guard) => {
                let guard = self.put_expr(guard)?;
                Some(self.truthy(guard))
            }
            None => None,
        };
        let levels = Levels {
            tree,
            slot,
            kind,
            local,
            guard,
        };
        let mut stride = tree.top;
        while stride > 16 {
            self.shared_level(&levels, stride)?;
            emit!(self.w, "{}.sync 0", self.cta_barrier());
            stride /= 2;
        }
        self.warp_levels(&levels, stride)?;
        self.shared_values.clear();
        Ok(())
    }

    /// A level `stride > 16`: where `local < stride` and the partner is in the tile (and
    /// the guard holds), `scratch[local] = scratch[local] op scratch[local + stride]`.
    fn shared_level(&mut self, levels: &Levels<'_>, stride: u32) -> Result<(), CodegenError> {
        let local = levels.local;
        let partner = self.b32();
        emit!(self.w, "add.u32 {partner}, {local}, {stride}");
        let [(held, addr, own), (_, _, other)] =
            [local, partner].map(|index| self.element_or_zero(levels, index));
        let value = self.combined_bits(levels, own, other)?;
        let stores = self.stores_below(levels, levels.tree.combining_below(stride));
        emit!(self.w, "and.pred {stores}, {stores}, {held}");
        emit!(self.w, "@{stores} st.shared.b32 [{addr}], {value}");
        Ok(())
    }

    /// The levels `top .. 1` (`top <= 16`) in warp 0: lane `i` holds element `i`, each
    /// level shuffles its partner's in, and the lanes below `top` write theirs back (only
    /// warp 0's lanes are below it). Every warp runs them: no branch around them.
    fn warp_levels(&mut self, levels: &Levels<'_>, top: u32) -> Result<(), CodegenError> {
        let (held, addr, mut bits) = self.element_or_zero(levels, levels.local);
        let mut stride = top;
        while stride > 0 {
            bits = self.shuffle_level(levels, bits, stride)?;
            stride /= 2;
        }
        let changed = self.stores_below(levels, top);
        emit!(self.w, "and.pred {changed}, {changed}, {held}");
        emit!(self.w, "@{changed} st.shared.b32 [{addr}], {bits}");
        Ok(())
    }

    /// One level `stride <= 16`: `bits` combined with lane `local + stride`'s where
    /// `local < stride` and the partner is in the tile.
    fn shuffle_level(
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
        let value = self.combined_bits(levels, bits, partner)?;
        let bound = levels.tree.combining_below(stride);
        let stores = self.pred();
        emit!(self.w, "setp.lt.u32 {stores}, {}, {bound}", levels.local);
        let next = self.b32();
        emit!(self.w, "selp.b32 {next}, {value}, {bits}, {stores}");
        Ok(next)
    }

    /// `scratch[index]`'s bits (zero past the buffer, as the tree's load reads), with
    /// whether it is in the buffer and its address.
    fn element_or_zero(&mut self, levels: &Levels<'_>, index: Reg) -> (Reg, Reg, Reg) {
        let (held, addr) = self.element_address(&levels.slot, index);
        let bits = self.b32();
        self.load_or_zero(levels.slot.space, Some(held), addr, "b32", &[bits]);
        (held, addr, bits)
    }

    /// The bits the tree's statement stores for elements holding `own` and `other`: both
    /// converted as loads, combined by the operator, converted as a store.
    fn combined_bits(
        &mut self,
        levels: &Levels<'_>,
        own: Reg,
        other: Reg,
    ) -> Result<Reg, CodegenError> {
        let left = self.word_value(levels.kind, own);
        let right = self.word_value(levels.kind, other);
        let value = self.put_binop(levels.tree.op, left, right)?;
        Ok(self.store_payload(&levels.slot.element, value))
    }

    /// `local < bound`, and the guard where the tree has one.
    fn stores_below(&mut self, levels: &Levels<'_>, bound: u32) -> Reg {
        let p = self.pred();
        emit!(self.w, "setp.lt.u32 {p}, {}, {bound}", levels.local);
        if let Some(guard) = levels.guard {
            emit!(self.w, "and.pred {p}, {p}, {guard}");
        }
        p
    }
}
