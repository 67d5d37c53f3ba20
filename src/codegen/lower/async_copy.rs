//! Lowering of `AsyncLoad` / `AsyncStore` / `AsyncWait` (see `analysis::async_copy`).
//!
//! Each tag of a segment has registers: which of its start nodes started the pending
//! transfer (0: none), and that start's offset and size. A start faults if its tag is
//! pending, a wait faults if it is not, and `Return` or the segment's end faults while any
//! is, as the reference errors. The wait writes the destination: with the source's bytes
//! as they are then, or, for a start the analysis says must capture its payload, with the
//! bytes that start copied into a snapshot: a `.local` array where the payload has a static
//! size of at most [`MAX_SNAPSHOT_BYTES`] (the literal byte count, or the size of a
//! workgroup source or destination), else a block of the device heap (`malloc`) of the
//! run-time payload's size (`heap`), freed at the wait or wherever the invocation leaves
//! with the transfer pending.

use super::memory::Space;
use super::{Lowerer, Val};
use crate::codegen::analysis::async_copy::starts;
use crate::codegen::fault::DeviceFault;
use crate::codegen::kind::ValKind;
use crate::codegen::writer::{emit, Reg, RegClass};
use crate::codegen::CodegenError;
use vyre_foundation::ir::{Expr, Node};

/// The largest payload snapshot, per start node and invocation (`.local` memory).
const MAX_SNAPSHOT_BYTES: u64 = 4096;

/// One tag's run-time state and the start nodes that may start it.
pub(super) struct AsyncTag<'p> {
    tag: &'p str,
    /// 0 while no transfer is pending, else `k + 1` for `starts[k]`.
    pending: Reg,
    offset: Reg,
    size: Reg,
    /// With a snapshot: how many leading payload bytes it holds (the rest are zeros).
    held: Reg,
    starts: Vec<Start<'p>>,
}

#[derive(Clone)]
struct Start<'p> {
    node: &'p Node,
    /// `AsyncStore` (source from byte 0 into `destination[offset..]`) rather than
    /// `AsyncLoad` (`source[offset..]` into `destination` from byte 0).
    store: bool,
    source: &'p str,
    destination: &'p str,
    /// Where the payload is captured at the start, if it must be.
    snapshot: Option<Snapshot>,
}

#[derive(Clone)]
enum Snapshot {
    /// A `.local` array of a static size.
    Local { symbol: String, bytes: u64 },
    /// A device-heap block's address (0 while the lane holds none).
    Heap { block: Reg },
}

impl<'p> Lowerer<'p> {
    /// Set up every tag of `segment` (nothing pending), before its body.
    pub(super) fn plan_async_copies(&mut self, segment: &'p [Node]) -> Result<(), CodegenError> {
        for start in starts(segment) {
            let (store, source, destination, size) = match start.node {
                Node::AsyncLoad {
                    source,
                    destination,
                    size,
                    ..
                } => (false, source, destination, size),
                Node::AsyncStore {
                    source,
                    destination,
                    size,
                    ..
                } => (true, source, destination, size),
                _ => continue,
            };
            let (source, destination) = (source.as_str(), destination.as_str());
            let snapshot = match start.snapshot {
                false => None,
                true => Some(match self.snapshot_bound(source, destination, size)? {
                    Some(bytes) => {
                        let count: usize = self.async_tags.iter().map(|t| t.starts.len()).sum();
                        let symbol = format!("vyre_async{count}");
                        Snapshot::Local { symbol, bytes }
                    }
                    None => Snapshot::Heap {
                        block: self.w.reg(RegClass::B64),
                    },
                }),
            };
            let tag = self.async_tag(start.tag);
            tag.starts.push(Start {
                node: start.node,
                store,
                source,
                destination,
                snapshot,
            });
        }
        // The transfer's registers too: a wait reads them on paths where no start ran
        // (it tests `pending` first), and ptxas may give a read that no write reaches any
        // value (`fuzz::check`'s `undefined_read`).
        for tag in &self.async_tags {
            for reg in [tag.pending, tag.offset, tag.size, tag.held] {
                self.w.put_zero(reg);
            }
            for start in &tag.starts {
                if let Some(Snapshot::Heap { block }) = start.snapshot {
                    self.w.put_zero(block);
                }
            }
        }
        Ok(())
    }

    fn async_tag(&mut self, tag: &'p str) -> &mut AsyncTag<'p> {
        let index = match self.async_tags.iter().position(|t| t.tag == tag) {
            Some(index) => index,
            None => {
                let entry = AsyncTag {
                    tag,
                    pending: self.w.reg(RegClass::B32),
                    offset: self.w.reg(RegClass::B64),
                    size: self.w.reg(RegClass::B64),
                    held: self.w.reg(RegClass::B64),
                    starts: Vec::new(),
                };
                self.async_tags.push(entry);
                self.async_tags.len() - 1
            }
        };
        &mut self.async_tags[index]
    }

    /// The snapshot's static size, if it has one of at most [`MAX_SNAPSHOT_BYTES`]: no
    /// payload byte past it reaches the destination non-zero (past a literal size there is
    /// none, past a workgroup source's end they are zeros, past a workgroup destination's
    /// end they are dropped).
    fn snapshot_bound(
        &mut self,
        source: &str,
        destination: &str,
        size: &Expr,
    ) -> Result<Option<u64>, CodegenError> {
        let literal = match size {
            Expr::LitU32(v) => Some(u64::from(*v)),
            Expr::LitI32(v) => u64::try_from(*v).ok(),
            _ => None,
        };
        let mut bounds = vec![literal];
        for buffer in [source, destination] {
            let slot = self.slot(buffer)?;
            if let Space::Shared { count, .. } = slot.space {
                bounds.push(Some(u64::from(count) * u64::from(slot.stride)));
            }
        }
        Ok(bounds
            .into_iter()
            .flatten()
            .min()
            .filter(|&bytes| bytes <= MAX_SNAPSHOT_BYTES))
    }

    /// `.local` declarations of the snapshots.
    pub(super) fn async_decls(&self) -> String {
        let mut decls = String::new();
        for start in self.async_tags.iter().flat_map(|t| &t.starts) {
            if let Some(Snapshot::Local { symbol, bytes }) = &start.snapshot {
                decls.push_str(&format!("\t.local .align 4 .b8 {symbol}[{bytes}];\n"));
            }
        }
        decls
    }

    /// Record a fault if any transfer is pending where the invocation ends, and give back
    /// the heap blocks of the pending ones.
    pub(super) fn fault_pending_copies(&mut self) {
        let pending: Vec<Reg> = self.async_tags.iter().map(|t| t.pending).collect();
        for reg in pending {
            let p = self.pred();
            emit!(self.w, "setp.ne.u32 {p}, {reg}, 0");
            self.fault_if(p, DeviceFault::AsyncTransferPending);
        }
        self.free_heap_snapshots();
    }

    /// Give back every heap block the lane holds (a pending transfer's snapshot), where it
    /// leaves the kernel.
    pub(super) fn free_heap_snapshots(&mut self) {
        let blocks: Vec<Reg> = (self.async_tags.iter().flat_map(|t| &t.starts))
            .filter_map(|start| match start.snapshot {
                Some(Snapshot::Heap { block }) => Some(block),
                _ => None,
            })
            .collect();
        for block in blocks {
            self.heap_free(block);
        }
    }

    /// `block = malloc(bytes)` where `bytes` > 0 (else 0); a block the heap cannot give
    /// fails the dispatch and holds nothing (`bytes` becomes 0). A block the start still
    /// holds (started twice, a run-time error) is given back first.
    fn alloc_block(&mut self, block: Reg, bytes: Reg) {
        self.heap_free(block);
        let (none, skip) = (self.pred(), self.w.label());
        emit!(self.w, "setp.eq.u64 {none}, {bytes}, 0");
        let none = self.branch_pred(none);
        emit!(self.w, "@{none} bra {skip}");
        let failed = self.heap_alloc(block, bytes);
        emit!(self.w, "selp.b64 {bytes}, 0, {bytes}, {failed}");
        self.w.put_label(skip);
    }

    /// Evaluate a start node's byte counts, mark its tag pending, take its snapshot.
    pub(super) fn start_copy(&mut self, node: &'p Node) -> Result<(), CodegenError> {
        let (Node::AsyncLoad {
            offset, size, tag, ..
        }
        | Node::AsyncStore {
            offset, size, tag, ..
        }) = node
        else {
            // `put_node` sends only the start nodes here.
            return Ok(());
        };
        let found = self.async_tags.iter().find_map(|t| {
            let k = t.starts.iter().position(|s| std::ptr::eq(s.node, node))?;
            Some((t.pending, t.offset, t.size, t.held, k, t.starts[k].clone()))
        });
        let Some((pending, offset_reg, size_reg, held, k, start)) = found else {
            return Err(CodegenError::invalid(
                format!("async transfer `{tag}` outside a planned segment"),
                "report this vyre-cuda bug",
            ));
        };
        self.byte_range_of(start.source)?;
        self.byte_range_of(start.destination)?;
        let offset = self.put_expr(offset)?;
        let offset = self.u64_checked(offset, DeviceFault::AsyncByteCountNotU64)?;
        let size = self.put_expr(size)?;
        let size = self.u64_checked(size, DeviceFault::AsyncByteCountNotU64)?;
        let twice = self.pred();
        emit!(self.w, "setp.ne.u32 {twice}, {pending}, 0");
        self.fault_if(twice, DeviceFault::AsyncTagStartedTwice);
        self.mov(offset_reg, offset);
        self.mov(size_reg, size);
        emit!(self.w, "mov.u32 {pending}, {}", k + 1);
        if let Some(snapshot) = &start.snapshot {
            self.capture(&start, snapshot, [offset, size, held])?;
        }
        Ok(())
    }

    /// Copy the payload bytes that may reach the destination into the snapshot, and how
    /// many there are into `held`.
    fn capture(
        &mut self,
        start: &Start<'p>,
        snapshot: &Snapshot,
        [offset, size, held]: [Reg; 3],
    ) -> Result<(), CodegenError> {
        let (src_space, src_len) = self.byte_range_of(start.source)?;
        let (_, dst_len) = self.byte_range_of(start.destination)?;
        let (src_start, dst_start) = self.copy_starts(start.store, offset);
        let count = self.written_count(size, dst_start, dst_len);
        let src_room = self.room(src_start, src_len);
        emit!(self.w, "min.u64 {held}, {count}, {src_room}");
        match snapshot {
            Snapshot::Local { bytes, .. } => emit!(self.w, "min.u64 {held}, {held}, {bytes}"),
            &Snapshot::Heap { block } => self.alloc_block(block, held),
        }
        let (always, byte) = (self.true_pred(), self.b32());
        self.byte_loop(held, |this, i| {
            let at = this.w.reg(RegClass::B64);
            emit!(this.w, "add.u64 {at}, {src_start}, {i}");
            this.byte_access(always, src_space, at, byte, false);
            let (space, addr) = this.snapshot_address(snapshot, i);
            emit!(this.w, "st{space}.u8 [{addr}], {byte}");
        });
        Ok(())
    }

    /// The state space suffix and address of byte `i` of `snapshot`.
    fn snapshot_address(&mut self, snapshot: &Snapshot, i: Reg) -> (&'static str, Reg) {
        match snapshot {
            Snapshot::Local { symbol, .. } => (".local", self.local_address(symbol, i)),
            &Snapshot::Heap { block } => {
                let addr = self.w.reg(RegClass::B64);
                emit!(self.w, "add.u64 {addr}, {block}, {i}");
                ("", addr)
            }
        }
    }

    /// Apply the transfer pending under `tag`: zero-fill past the source's end, truncate
    /// at the destination's end.
    pub(super) fn finish_copy(&mut self, tag: &str) -> Result<(), CodegenError> {
        let Some(state) = self.async_tags.iter().find(|t| t.tag == tag) else {
            // No start of this tag in the segment: the reference errors whenever it runs.
            self.fault_always(DeviceFault::AsyncWaitWithoutStart);
            return Ok(());
        };
        let (pending, regs) = (state.pending, [state.offset, state.size, state.held]);
        let starts = state.starts.clone();
        let none = self.pred();
        emit!(self.w, "setp.eq.u32 {none}, {pending}, 0");
        self.fault_if(none, DeviceFault::AsyncWaitWithoutStart);
        for (k, start) in starts.iter().enumerate() {
            let (other, skip) = (self.pred(), self.w.label());
            emit!(self.w, "setp.ne.u32 {other}, {pending}, {}", k + 1);
            let other = self.branch_pred(other);
            emit!(self.w, "@{other} bra {skip}");
            self.apply(start, regs)?;
            self.w.put_label(skip);
        }
        emit!(self.w, "mov.u32 {pending}, 0");
        Ok(())
    }

    /// Write `start`'s payload into its destination.
    fn apply(
        &mut self,
        start: &Start<'p>,
        [offset, size, held]: [Reg; 3],
    ) -> Result<(), CodegenError> {
        let (dst_space, dst_len) = self.byte_range_of(start.destination)?;
        let (src_start, dst_start) = self.copy_starts(start.store, offset);
        let count = self.written_count(size, dst_start, dst_len);
        // The payload's bytes: the source's as they are now, or the snapshot's.
        let (available, payload) = match &start.snapshot {
            Some(snapshot) => (held, Err(snapshot)),
            None => {
                let (space, len) = self.byte_range_of(start.source)?;
                (self.room(src_start, len), Ok(space))
            }
        };
        let (in_src, always, byte) = (self.pred(), self.true_pred(), self.b32());
        self.byte_loop(count, |this, i| {
            emit!(this.w, "setp.lt.u64 {in_src}, {i}, {available}");
            emit!(this.w, "mov.u32 {byte}, 0");
            match payload {
                Ok(space) => {
                    let at = this.w.reg(RegClass::B64);
                    emit!(this.w, "add.u64 {at}, {src_start}, {i}");
                    this.byte_access(in_src, space, at, byte, false);
                }
                Err(snapshot) => {
                    let (space, addr) = this.snapshot_address(snapshot, i);
                    emit!(this.w, "@{in_src} ld{space}.u8 {byte}, [{addr}]");
                }
            }
            let at = this.w.reg(RegClass::B64);
            emit!(this.w, "add.u64 {at}, {dst_start}, {i}");
            this.byte_access(always, dst_space, at, byte, true);
        });
        if let Some(Snapshot::Heap { block }) = start.snapshot {
            self.heap_free(block);
        }
        Ok(())
    }

    /// Where the payload starts in the source and in the destination.
    fn copy_starts(&mut self, store: bool, offset: Reg) -> (Reg, Reg) {
        let zero = self.w.reg(RegClass::B64);
        emit!(self.w, "mov.u64 {zero}, 0");
        if store {
            (zero, offset)
        } else {
            (offset, zero)
        }
    }

    /// How many payload bytes land in the destination: `size`, cut at its end.
    fn written_count(&mut self, size: Reg, dst_start: Reg, dst_len: Reg) -> Reg {
        let room = self.room(dst_start, dst_len);
        let count = self.w.reg(RegClass::B64);
        emit!(self.w, "min.u64 {count}, {size}, {room}");
        count
    }

    /// The bytes from `start` to `len`, 0 past the end (no `start + i` can wrap below it).
    fn room(&mut self, start: Reg, len: Reg) -> Reg {
        let (room, inside) = (self.w.reg(RegClass::B64), self.pred());
        emit!(self.w, "sub.u64 {room}, {len}, {start}");
        emit!(self.w, "setp.lt.u64 {inside}, {start}, {len}");
        emit!(self.w, "selp.b64 {room}, {room}, 0, {inside}");
        room
    }

    /// `for i in 0..count { body(i) }` over `.u64` byte indices.
    fn byte_loop(&mut self, count: Reg, body: impl FnOnce(&mut Self, Reg)) {
        let (i, done) = (self.w.reg(RegClass::B64), self.pred());
        let (top, end) = (self.w.label(), self.w.label());
        emit!(self.w, "mov.u64 {i}, 0");
        self.w.put_label(top);
        emit!(self.w, "setp.ge.u64 {done}, {i}, {count}");
        let done = self.branch_pred(done);
        emit!(self.w, "@{done} bra {end}");
        body(self, i);
        emit!(self.w, "add.u64 {i}, {i}, 1");
        emit!(self.w, "bra {top}");
        self.w.put_label(end);
    }

    /// The address of byte `i` of the `.local` array `symbol`.
    fn local_address(&mut self, symbol: &str, i: Reg) -> Reg {
        let addr = self.w.reg(RegClass::B64);
        emit!(self.w, "mov.u64 {addr}, {symbol}");
        emit!(self.w, "add.u64 {addr}, {addr}, {i}");
        addr
    }

    /// The reference's `try_as_u64`, raising `fault` where it yields `None`.
    fn u64_checked(&mut self, value: Val, fault: DeviceFault) -> Result<Reg, CodegenError> {
        let value = self.settle_half(value);
        let wide = self.w.reg(RegClass::B64);
        match value.kind {
            ValKind::U64 | ValKind::Bytes(5..=8) => self.mov(wide, value.reg),
            ValKind::Bytes(9..) => {
                self.fault_unless_empty(value, fault);
                emit!(self.w, "mov.u64 {wide}, 0");
            }
            ValKind::F32 | ValKind::F64 => {
                let as_f64 = self.w.reg(RegClass::F64);
                if value.kind == ValKind::F32 {
                    emit!(self.w, "cvt.f64.f32 {as_f64}, {}", value.reg);
                } else {
                    self.mov(as_f64, value.reg);
                }
                // Finite, >= 0 and < 2^64, then truncated.
                let bad = self.float_range_fault(as_f64, "lt", "0d43F0000000000000", fault);
                emit!(self.w, "cvt.rzi.u64.f64 {wide}, {as_f64}");
                return Ok(self.zero_if(bad, wide));
            }
            // u32, bool, short bytes and i32 (a negative one faults) widen from a u32.
            _ => {
                let low = self.u32_checked(value, fault)?;
                emit!(self.w, "cvt.u64.u32 {wide}, {low}");
            }
        }
        Ok(wide)
    }
}
