//! Lowering of `AsyncLoad` / `AsyncStore` / `AsyncWait`: the copy is performed at the
//! wait (see `analysis::async_copy` for the pairing that makes this exact).

use super::{Lowerer, Val};
use crate::codegen::analysis::async_copy::rejected;
use crate::codegen::fault::DeviceFault;
use crate::codegen::kind::ValKind;
use crate::codegen::writer::{emit, Reg, RegClass};
use crate::codegen::CodegenError;
use vyre_foundation::ir::Node;

/// A started copy, waiting for its `AsyncWait`.
#[derive(Clone, Copy)]
pub(super) struct PendingCopy<'p> {
    /// `AsyncStore` (source from byte 0 into `destination[offset..]`) rather than
    /// `AsyncLoad` (`source[offset..]` into `destination` from byte 0).
    store: bool,
    source: &'p str,
    destination: &'p str,
    offset: Reg,
    size: Reg,
}

impl<'p> Lowerer<'p> {
    /// Evaluate a start node's byte counts and remember the copy for its wait.
    pub(super) fn start_copy(&mut self, node: &'p Node) -> Result<(), CodegenError> {
        let (Node::AsyncLoad {
            source,
            destination,
            offset,
            size,
            tag,
        }
        | Node::AsyncStore {
            source,
            destination,
            offset,
            size,
            tag,
        }) = node
        else {
            // `put_node` sends only the start nodes here.
            return Ok(());
        };
        let (source, destination) = (source.as_str(), destination.as_str());
        self.byte_range_of(source)?;
        self.byte_range_of(destination)?;
        let offset = self.put_expr(offset)?;
        let offset = self.u64_checked(offset, DeviceFault::AsyncByteCountNotU64)?;
        let size = self.put_expr(size)?;
        let size = self.u64_checked(size, DeviceFault::AsyncByteCountNotU64)?;
        self.pending_copies.insert(
            tag.as_str(),
            PendingCopy {
                store: matches!(node, Node::AsyncStore { .. }),
                source,
                destination,
                offset,
                size,
            },
        );
        Ok(())
    }

    /// Apply the copy started under `tag`: zero-fill past the source's end, truncate at
    /// the destination's end.
    pub(super) fn finish_copy(&mut self, tag: &str) -> Result<(), CodegenError> {
        let Some(copy) = self.pending_copies.remove(tag) else {
            return Err(rejected(format!(
                "AsyncWait `{tag}` has no pending transfer"
            )));
        };
        let (src_base, src_len) = self.byte_range_of(copy.source)?;
        let (dst_base, dst_len) = self.byte_range_of(copy.destination)?;
        let zero = self.w.reg(RegClass::B64);
        emit!(self.w, "mov.u64 {zero}, 0");
        let (src_start, dst_start) = if copy.store {
            (zero, copy.offset)
        } else {
            (copy.offset, zero)
        };
        let i = self.w.reg(RegClass::B64);
        emit!(self.w, "mov.u64 {i}, 0");
        let (top, end) = (self.w.label(), self.w.label());
        let (done, in_src, in_dst) = (self.pred(), self.pred(), self.pred());
        let (src_at, dst_at, byte) = (
            self.w.reg(RegClass::B64),
            self.w.reg(RegClass::B64),
            self.b32(),
        );
        self.w.put_label(top);
        emit!(self.w, "setp.ge.u64 {done}, {i}, {}", copy.size);
        emit!(self.w, "@{done} bra {end}");
        emit!(self.w, "add.u64 {src_at}, {src_start}, {i}");
        emit!(self.w, "add.u64 {dst_at}, {dst_start}, {i}");
        // Once past the destination's end nothing more is written.
        emit!(self.w, "setp.ge.u64 {done}, {dst_at}, {dst_len}");
        emit!(self.w, "@{done} bra {end}");
        emit!(self.w, "setp.lt.u64 {in_src}, {src_at}, {src_len}");
        emit!(self.w, "mov.u32 {byte}, 0");
        self.byte_access(in_src, src_base, src_at, byte, false);
        emit!(self.w, "setp.lt.u64 {in_dst}, {dst_at}, {dst_len}");
        self.byte_access(in_dst, dst_base, dst_at, byte, true);
        emit!(self.w, "add.u64 {i}, {i}, 1");
        emit!(self.w, "bra {top}");
        self.w.put_label(end);
        Ok(())
    }

    /// The reference's `try_as_u64`, raising `fault` where it yields `None`.
    fn u64_checked(&mut self, value: Val, fault: DeviceFault) -> Result<Reg, CodegenError> {
        let value = self.settle_half(value);
        let wide = self.w.reg(RegClass::B64);
        match value.kind {
            ValKind::U64 | ValKind::Bytes(5..=8) => self.mov(wide, value.reg),
            ValKind::Bytes(9..) => {
                self.fault_always(fault);
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
