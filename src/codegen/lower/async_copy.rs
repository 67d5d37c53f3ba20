//! Lowering of `AsyncLoad` / `AsyncStore` / `AsyncWait` (see `analysis::async_copy`).
//!
//! Each tag of a segment has registers: which of its start nodes started the pending
//! transfer (0: none), and that start's offset and size. A start faults if its tag is
//! pending, a wait faults if it is not, and `Return` or the segment's end faults while any
//! is, as the reference errors. The wait writes the destination: with the source's bytes
//! as they are then, or, for a start the analysis says must capture its payload, with the
//! bytes that start copied into a `.local` snapshot. A snapshot needs a static size: the
//! literal byte count, or the size of a workgroup source or destination, at most
//! [`MAX_SNAPSHOT_BYTES`].

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
    /// The `.local` array the payload is captured into, and its size.
    snapshot: Option<(String, u64)>,
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
            let snapshot = if start.snapshot {
                let bytes = self.snapshot_bound(source, destination, size, start.tag)?;
                let count: usize = self.async_tags.iter().map(|t| t.starts.len()).sum();
                Some((format!("vyre_async{count}"), bytes))
            } else {
                None
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

    /// The snapshot's static size: no payload byte past it reaches the destination
    /// non-zero (past a literal size there is none, past a workgroup source's end they
    /// are zeros, past a workgroup destination's end they are dropped).
    fn snapshot_bound(
        &mut self,
        source: &str,
        destination: &str,
        size: &Expr,
        tag: &str,
    ) -> Result<u64, CodegenError> {
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
        match bounds.into_iter().flatten().min() {
            Some(bytes) if bytes <= MAX_SNAPSHOT_BYTES => Ok(bytes),
            _ => Err(CodegenError::unsupported(
                "async copy whose source may change before its wait",
                format!(
                    "async transfer `{tag}` reads `{source}`, which the program writes, and its wait is not next in the same block with nothing in between that writes `{source}`, synchronises or returns; its payload would be captured at the start, but it has no static size of at most {MAX_SNAPSHOT_BYTES} bytes (a literal byte count or a workgroup source or destination)"
                ),
                "give the transfer a literal size of at most 4096 bytes, or put its AsyncWait right after it",
            )),
        }
    }

    /// `.local` declarations of the snapshots.
    pub(super) fn async_decls(&self) -> String {
        let mut decls = String::new();
        for start in self.async_tags.iter().flat_map(|t| &t.starts) {
            if let Some((symbol, bytes)) = &start.snapshot {
                decls.push_str(&format!("\t.local .align 4 .b8 {symbol}[{bytes}];\n"));
            }
        }
        decls
    }

    /// Record a fault if any transfer is pending where the invocation ends.
    pub(super) fn fault_pending_copies(&mut self) {
        let pending: Vec<Reg> = self.async_tags.iter().map(|t| t.pending).collect();
        for reg in pending {
            let p = self.pred();
            emit!(self.w, "setp.ne.u32 {p}, {reg}, 0");
            self.fault_if(p, DeviceFault::AsyncTransferPending);
        }
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
        if let Some((symbol, bytes)) = &start.snapshot {
            self.capture(&start, symbol, *bytes, [offset, size, held])?;
        }
        Ok(())
    }

    /// Copy the payload bytes that may reach the destination into the snapshot, and how
    /// many there are into `held`.
    fn capture(
        &mut self,
        start: &Start<'p>,
        symbol: &str,
        bytes: u64,
        [offset, size, held]: [Reg; 3],
    ) -> Result<(), CodegenError> {
        let (src_space, src_len) = self.byte_range_of(start.source)?;
        let (_, dst_len) = self.byte_range_of(start.destination)?;
        let (src_start, dst_start) = self.copy_starts(start.store, offset);
        let count = self.written_count(size, dst_start, dst_len);
        let src_room = self.room(src_start, src_len);
        emit!(self.w, "min.u64 {held}, {count}, {src_room}");
        emit!(self.w, "min.u64 {held}, {held}, {bytes}");
        let (always, byte) = (self.true_pred(), self.b32());
        let symbol = symbol.to_string();
        self.byte_loop(held, |this, i| {
            let at = this.w.reg(RegClass::B64);
            emit!(this.w, "add.u64 {at}, {src_start}, {i}");
            this.byte_access(always, src_space, at, byte, false);
            let addr = this.local_address(&symbol, i);
            emit!(this.w, "st.local.u8 [{addr}], {byte}");
        });
        Ok(())
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
        let source = match &start.snapshot {
            Some((symbol, _)) => (held, None, symbol.clone()),
            None => {
                let (space, len) = self.byte_range_of(start.source)?;
                (self.room(src_start, len), Some(space), String::new())
            }
        };
        let (available, src_space, symbol) = source;
        let (in_src, always, byte) = (self.pred(), self.true_pred(), self.b32());
        self.byte_loop(count, |this, i| {
            emit!(this.w, "setp.lt.u64 {in_src}, {i}, {available}");
            emit!(this.w, "mov.u32 {byte}, 0");
            match src_space {
                Some(space) => {
                    let at = this.w.reg(RegClass::B64);
                    emit!(this.w, "add.u64 {at}, {src_start}, {i}");
                    this.byte_access(in_src, space, at, byte, false);
                }
                None => {
                    let addr = this.local_address(&symbol, i);
                    emit!(this.w, "@{in_src} ld.local.u8 {byte}, [{addr}]");
                }
            }
            let at = this.w.reg(RegClass::B64);
            emit!(this.w, "add.u64 {at}, {dst_start}, {i}");
            this.byte_access(always, dst_space, at, byte, true);
        });
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
