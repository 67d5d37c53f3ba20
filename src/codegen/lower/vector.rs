//! The vector entry of an elementwise program (see `analysis::elementwise`): each thread runs
//! [`VECTOR_LANES`] consecutive invocations from `vyre_inv_base + 4 * thread`, skipping those
//! at or past `vyre_inv_end`, each through the ordinary lowering. Only the memory traffic of
//! 4- and 8-byte buffers changes: a loaded buffer is read up front (16-byte loads where all
//! in bounds: `ld.global.nc` when never stored; a stored one is read by its own element's
//! lane only, so its words there are the originals until that lane stores); stores are
//! deferred (each lane keeps its last word, which its later loads read) and written after
//! the lanes, `st.global.v4`/`v2` where complete. A grid smaller than the range loops: each
//! thread then runs the next `4 * threads` invocations (its stores of one pass drain while
//! it loads the next). The host uses it only for 16-byte-aligned, disjoint bindings and a
//! 1-D grid.

use super::memory::int_width;
use super::{KernelAbi, LoweredBody, Lowerer, Space, Val};
use crate::codegen::abi::{KernelParam, VECTOR_LANES};
use crate::codegen::analysis::elementwise::Elementwise;
use crate::codegen::kind::ValKind;
use crate::codegen::writer::{emit, Label, Reg, RegClass};
use crate::codegen::CodegenError;
use rustc_hash::FxHashMap;
use vyre_foundation::ir::Node;

const LANES: usize = VECTOR_LANES as usize;

pub(crate) struct Lanes<'p> {
    /// The lane being lowered.
    lane: usize,
    /// Where `Return` sends the current lane.
    lane_end: Label,
    /// Raw words of never-stored buffers, loaded before the first lane.
    preloaded: FxHashMap<&'p str, [Reg; LANES]>,
    /// The stored buffers' deferred stores, in binding order.
    pending: Vec<(&'p str, DeferredStores)>,
}

impl Lanes<'_> {
    /// The current lane's last stored word of `buffer` and whether it stored, when the
    /// buffer's stores are deferred.
    fn deferred(&self, buffer: &str) -> Option<(Reg, Reg, Option<Reg>)> {
        let (_, stores) = self.pending.iter().find(|(name, _)| *name == buffer)?;
        let original = stores.originals.map(|words| words[self.lane]);
        Some((stores.words[self.lane], stores.stored[self.lane], original))
    }
}

/// One stored buffer's deferred stores, written after the last lane.
#[derive(Clone, Copy)]
struct DeferredStores {
    base: Reg,
    stride: u32,
    /// Each lane's last stored word, and whether it stored (in bounds).
    words: [Reg; LANES],
    stored: [Reg; LANES],
    /// The words before the kernel, read up front when the program also loads the buffer
    /// (an in-place update): lanes then read them, not memory, until they store.
    originals: Option<[Reg; LANES]>,
}

/// `{a, b, ...}`, the operand of a vector load or store.
fn reg_list(regs: &[Reg]) -> String {
    let names: Vec<String> = regs.iter().map(ToString::to_string).collect();
    format!("{{{}}}", names.join(", "))
}

impl<'p> Lowerer<'p> {
    pub(crate) fn lower_vector_entry(
        mut self,
        abi: &KernelAbi,
        entry: &'p [Node],
        shape: &Elementwise<'p>,
    ) -> Result<LoweredBody, CodegenError> {
        let (inv_base, inv_end) = (self.b32(), self.b32());
        let (base_param, end_param) = (
            KernelParam::InvocationBase.name(),
            KernelParam::InvocationEnd.name(),
        );
        emit!(self.w, "ld.param.u32 {inv_base}, [{base_param}]");
        emit!(self.w, "ld.param.u32 {inv_end}, [{end_param}]");
        let peer = abi.peer_sync.map(|sync| self.put_peer_meeting_in(sync));
        let thread = self.ids.global[0];
        let first = self.b32();
        emit!(self.w, "mad.lo.u32 {first}, {thread}, {LANES}, {inv_base}");
        let stride = self.grid_stride(abi);
        let top = self.w.label();
        self.w.put_label(top);
        let lane_end = self.w.label();
        self.lanes = Some(self.lane_buffers(abi, shape, first, lane_end));
        let flush = self.w.label();
        let result = self.put_lanes(entry, first, inv_end, flush);
        self.ids.global[0] = thread;
        let pending = self.lanes.take().map(|lanes| lanes.pending);
        result?;
        self.w.put_label(flush);
        for (_, stores) in pending.unwrap_or_default() {
            self.flush_stores(first, stores);
        }
        self.put_next_stride(first, inv_end, stride, top);
        if let Some(regs) = &peer {
            self.put_peer_meeting_out(regs);
        }
        self.finish_entry()
    }

    /// The invocations the whole grid covers in one pass (`nctaid.x * ntid.x * lanes`), as
    /// a 64-bit value: a grid smaller than the range (the host caps it, e.g. so that a
    /// thread's stores of one pass drain while it loads the next) loops over the rest.
    fn grid_stride(&mut self, abi: &KernelAbi) -> Reg {
        let (blocks, stride) = (self.b32(), self.w.reg(RegClass::B64));
        let per_block = abi.workgroup_size[0] * VECTOR_LANES;
        emit!(self.w, "mov.u32 {blocks}, %nctaid.x");
        emit!(self.w, "mul.wide.u32 {stride}, {blocks}, {per_block}");
        stride
    }

    /// Advances `first` by `stride` and loops back to `top` while invocations of this
    /// thread remain before `inv_end`; compared in 64 bits so that no sum wraps.
    fn put_next_stride(&mut self, first: Reg, inv_end: Reg, stride: Reg, top: Label) {
        let (left32, left, more, inside) = (
            self.b32(),
            self.w.reg(RegClass::B64),
            self.pred(),
            self.pred(),
        );
        emit!(self.w, "setp.lt.u32 {inside}, {first}, {inv_end}");
        emit!(self.w, "sub.u32 {left32}, {inv_end}, {first}");
        emit!(self.w, "cvt.u64.u32 {left}, {left32}");
        emit!(self.w, "setp.gt.u64 {more}, {left}, {stride}");
        emit!(self.w, "and.pred {more}, {more}, {inside}");
        let step = self.b32();
        emit!(self.w, "cvt.u32.u64 {step}, {stride}");
        emit!(self.w, "@{more} add.u32 {first}, {first}, {step}");
        let more = self.anchored_pred(more);
        emit!(self.w, "@{more} bra {top}");
    }

    /// Preload the never-stored buffers and set up the deferred stores of the stored ones.
    fn lane_buffers(
        &mut self,
        abi: &KernelAbi,
        shape: &Elementwise<'p>,
        first: Reg,
        lane_end: Label,
    ) -> Lanes<'p> {
        let mut lanes = Lanes {
            lane: 0,
            lane_end,
            preloaded: FxHashMap::default(),
            pending: Vec::new(),
        };
        for binding in &abi.bindings {
            // Only 4- and 8-byte elements travel as raw words.
            let class = match binding.element_size {
                4 => RegClass::B32,
                8 => RegClass::B64,
                _ => continue,
            };
            if ValKind::of_load(&binding.element).is_none() {
                continue;
            }
            let Some((name, slot)) = self
                .buffers
                .get_key_value(&*binding.name)
                .map(|(name, slot)| (*name, slot.clone()))
            else {
                continue;
            };
            let Space::Global { base, len } = slot.space else {
                continue;
            };
            if shape.stored.contains(name) {
                let words = [(); LANES].map(|()| self.w.reg(class));
                let stored = [(); LANES].map(|()| self.pred());
                for (&word, &flag) in words.iter().zip(&stored) {
                    emit!(self.w, "mov.{} {word}, 0", class.ty());
                    self.w.put_zero(flag);
                }
                let originals = shape
                    .loaded
                    .contains(name)
                    .then(|| self.preload(base, len, first, slot.stride, class, ""));
                let stores = DeferredStores {
                    base,
                    stride: slot.stride,
                    words,
                    stored,
                    originals,
                };
                lanes.pending.push((name, stores));
            } else if shape.loaded.contains(name) {
                let words = self.preload(base, len, first, slot.stride, class, ".nc");
                lanes.preloaded.insert(name, words);
            }
        }
        lanes
    }

    /// The program body once per lane, each with its own `gid`; lanes at or past
    /// `inv_end` branch to `flush`.
    fn put_lanes(
        &mut self,
        entry: &'p [Node],
        first: Reg,
        inv_end: Reg,
        flush: Label,
    ) -> Result<(), CodegenError> {
        for lane in 0..LANES {
            let gid = self.b32();
            emit!(self.w, "add.u32 {gid}, {first}, {lane}");
            let past = self.pred();
            emit!(self.w, "setp.ge.u32 {past}, {gid}, {inv_end}");
            let past = self.anchored_pred(past);
            emit!(self.w, "@{past} bra {flush}");
            let lane_end = self.w.label();
            if let Some(lanes) = self.lanes.as_mut() {
                lanes.lane = lane;
                lanes.lane_end = lane_end;
            }
            self.ids.global[0] = gid;
            self.put_scoped_block(entry)?;
            self.w.put_label(lane_end);
        }
        Ok(())
    }

    /// The raw words of elements `first .. first + 4`, zero where out of bounds; `cache`:
    /// `.nc` for a buffer the kernel never writes.
    fn preload(
        &mut self,
        base: Reg,
        len: Reg,
        first: Reg,
        stride: u32,
        class: RegClass,
        cache: &str,
    ) -> [Reg; LANES] {
        let words = [(); LANES].map(|()| self.w.reg(class));
        for &word in &words {
            emit!(self.w, "mov.{} {word}, 0", class.ty());
        }
        let (addr, ty) = (self.scaled_address(base, first, stride), int_width(stride));
        let per_vector = (16 / stride) as usize;
        for (group, chunk) in words.chunks(per_vector).enumerate() {
            let start = (group * per_vector) as u32;
            let last = self.b32();
            let end = start + per_vector as u32 - 1;
            emit!(self.w, "add.u32 {last}, {first}, {end}");
            let (whole, partial) = (self.pred(), self.pred());
            emit!(self.w, "setp.lt.u32 {whole}, {last}, {len}");
            emit!(self.w, "not.pred {partial}, {whole}");
            let (list, offset) = (reg_list(chunk), start * stride);
            emit!(
                self.w,
                "@{whole} ld.global{cache}.v{per_vector}.{ty} {list}, [{addr}+{offset}]"
            );
            for (k, &word) in chunk.iter().enumerate() {
                let element = start + k as u32;
                let (gid, inside) = (self.b32(), self.pred());
                emit!(self.w, "add.u32 {gid}, {first}, {element}");
                emit!(self.w, "setp.lt.u32 {inside}, {gid}, {len}");
                emit!(self.w, "and.pred {inside}, {inside}, {partial}");
                let offset = element * stride;
                emit!(
                    self.w,
                    "@{inside} ld.global{cache}.{ty} {word}, [{addr}+{offset}]"
                );
            }
        }
        words
    }

    /// Write the deferred stores of one buffer: whole 16-byte groups as one vector store.
    fn flush_stores(&mut self, first: Reg, stores: DeferredStores) {
        let DeferredStores {
            base,
            stride,
            words,
            stored,
            originals: _,
        } = stores;
        let (addr, ty) = (self.scaled_address(base, first, stride), int_width(stride));
        let per_vector = (16 / stride) as usize;
        for group in 0..LANES / per_vector {
            let start = group * per_vector;
            let lanes = start..start + per_vector;
            let (whole, partial) = (self.pred(), self.pred());
            emit!(self.w, "mov.pred {whole}, {}", stored[start]);
            for k in lanes.clone().skip(1) {
                emit!(self.w, "and.pred {whole}, {whole}, {}", stored[k]);
            }
            emit!(self.w, "not.pred {partial}, {whole}");
            let (list, offset) = (reg_list(&words[lanes.clone()]), start as u32 * stride);
            emit!(
                self.w,
                "@{whole} st.global.v{per_vector}.{ty} [{addr}+{offset}], {list}"
            );
            for k in lanes {
                let one = self.pred();
                emit!(self.w, "and.pred {one}, {}, {partial}", stored[k]);
                let (offset, word) = (k as u32 * stride, words[k]);
                emit!(self.w, "@{one} st.global.{ty} [{addr}+{offset}], {word}");
            }
        }
    }

    /// In the vector entry: the current lane's element of a preloaded or deferred buffer
    /// (`index` is the lane's `gid`, which the elementwise analysis guarantees).
    pub(super) fn lane_load(&mut self, buffer: &str, index: Reg) -> Option<Reg> {
        let lanes = self.lanes.as_ref()?;
        let lane = lanes.lane;
        if let Some(words) = lanes.preloaded.get(buffer) {
            return Some(words[lane]);
        }
        let (word, stored, original) = lanes.deferred(buffer)?;
        if let Some(original) = original {
            let raw = self.w.reg(word.class());
            emit!(
                self.w,
                "selp.{} {raw}, {word}, {original}, {stored}",
                word.class().ty()
            );
            return Some(raw);
        }
        let slot = self.buffers.get(buffer)?.clone();
        let (in_bounds, addr) = self.element_address(&slot, index);
        let (class, width) = (word.class(), int_width(word.class().bytes()));
        let raw = self.w.reg(class);
        emit!(self.w, "mov.{} {raw}, 0", class.ty());
        emit!(self.w, "@{in_bounds} ld.global.{width} {raw}, [{addr}]");
        emit!(self.w, "selp.{} {raw}, {word}, {raw}, {stored}", class.ty());
        Some(raw)
    }

    /// In the vector entry: defer a store of `payload` to the current lane's element when
    /// the buffer's stores are deferred; `false` when the store must be emitted as usual.
    pub(super) fn lane_store(&mut self, buffer: &str, in_bounds: Reg, payload: Reg) -> bool {
        let Some((word, stored, _)) = self.lanes.as_ref().and_then(|lanes| lanes.deferred(buffer))
        else {
            return false;
        };
        let ty = word.class().ty();
        emit!(self.w, "@{in_bounds} mov.{ty} {word}, {payload}");
        emit!(self.w, "or.pred {stored}, {stored}, {in_bounds}");
        true
    }

    /// `Return` in the vector entry ends the current lane only.
    pub(super) fn lane_return(&mut self) -> bool {
        let Some(lanes) = &self.lanes else {
            return false;
        };
        emit!(self.w, "bra {}", lanes.lane_end);
        true
    }

    /// A raw element word as the value a load of `kind` yields (as `put_load` would).
    pub(super) fn word_value(&mut self, kind: ValKind, word: Reg) -> Val {
        let reg = match kind {
            ValKind::F32 => self.bits_as_f32(word),
            ValKind::F64 => {
                let f = self.w.reg(RegClass::F64);
                emit!(self.w, "mov.b64 {f}, {word}");
                f
            }
            _ => {
                let copy = self.w.reg(word.class());
                self.mov(copy, word);
                copy
            }
        };
        Val { kind, reg }
    }
}
