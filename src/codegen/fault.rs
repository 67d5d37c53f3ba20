//! Run-time errors a kernel reports through its fault word, mirroring the reference's
//! run-time `Error`s for the same operations.

/// A run-time error recorded by a kernel. The discriminant is the value written to the
/// fault word (the first fault of a dispatch wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum DeviceFault {
    /// Signed division by zero.
    SignedDivisionByZero = 1,
    /// `i32::MIN / -1`.
    SignedDivisionOverflow = 2,
    /// Signed remainder by zero.
    SignedRemainderByZero = 3,
    /// `i32::MIN % -1`.
    SignedRemainderOverflow = 4,
    /// A load/store/atomic index that is not representable as u32 (e.g. a negative i32).
    IndexNotU32 = 5,
    /// A loop bound that is not representable as u32.
    LoopBoundNotU32 = 6,
    /// A checked cast whose value does not fit (e.g. a u64 above `u32::MAX` cast to u32).
    CastOutOfRange = 7,
    /// An atomic operand that is not representable as u32.
    AtomicOperandNotU32 = 8,
    /// `Node::Trap` was reached.
    Trap = 9,
    /// A construct the reference interpreter rejects whenever it runs (`Resume`,
    /// `IndirectDispatch`, `SubgroupLocalId`, `SubgroupSize`, opaque extensions).
    RejectedByReference = 10,
    /// A barrier inside an `If` whose condition differed across the workgroup.
    DivergentBarrier = 11,
    /// A subgroup shuffle lane that is not representable as u32.
    SubgroupLaneNotU32 = 12,
    /// An async copy offset or size that is not representable as u64.
    AsyncByteCountNotU64 = 13,
    /// An operator, `Fma` or cast to F16/BF16 reached an out-of-bounds F16/BF16 load, which
    /// the reference holds as `Value::Bytes([0, 0])`, not a float.
    HalfOutOfBounds = 14,
    /// A subgroup operand read a variable that a lane of the subgroup never bound (it
    /// returned first); the reference evaluates the operand for every lane.
    UndeclaredVariable = 15,
    /// An `AsyncLoad`/`AsyncStore` started a tag whose earlier transfer was not waited for.
    AsyncTagStartedTwice = 16,
    /// An `AsyncWait` found no started transfer with its tag.
    AsyncWaitWithoutStart = 17,
    /// An invocation ended (`Return` or the end of its segment) with a transfer pending.
    AsyncTransferPending = 18,
    /// A subgroup shuffle or reduction over lanes the reference does not combine (it
    /// combines u32 and float lanes only).
    SubgroupLanesNotCombinable = 19,
    /// A binary operator received a bytes load (the rest of a bytes buffer, a
    /// `Value::Bytes`), which the reference's operators reject as mismatched operands.
    BytesOperand = 20,
    /// An operator received a fixed-size raw value (a load of a u8, i8, u16, i16, i64,
    /// vec, 8-bit float or handle element, or a value cast to bytes: a `Value::Bytes`),
    /// which the reference's operators reject.
    RawOperand = 21,
    /// The device heap could not give the block a snapshot of run-time size needs (an async
    /// copy's payload whose source the program may write before the wait, or the bytes a
    /// `Let`/`Assign` binds from a bytes buffer it writes).
    SnapshotHeap = 22,
}

impl DeviceFault {
    const ALL: [DeviceFault; 22] = [
        Self::SignedDivisionByZero,
        Self::SignedDivisionOverflow,
        Self::SignedRemainderByZero,
        Self::SignedRemainderOverflow,
        Self::IndexNotU32,
        Self::LoopBoundNotU32,
        Self::CastOutOfRange,
        Self::AtomicOperandNotU32,
        Self::Trap,
        Self::RejectedByReference,
        Self::DivergentBarrier,
        Self::SubgroupLaneNotU32,
        Self::AsyncByteCountNotU64,
        Self::HalfOutOfBounds,
        Self::UndeclaredVariable,
        Self::AsyncTagStartedTwice,
        Self::AsyncWaitWithoutStart,
        Self::AsyncTransferPending,
        Self::SubgroupLanesNotCombinable,
        Self::BytesOperand,
        Self::RawOperand,
        Self::SnapshotHeap,
    ];

    /// The fault word value.
    #[must_use]
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// Decode a fault word; `None` for 0 or an unknown value.
    #[must_use]
    pub fn from_code(code: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|fault| fault.code() == code)
    }

    /// What went wrong, in the reference's words.
    #[must_use]
    pub const fn message(self) -> &'static str {
        match self {
            Self::SignedDivisionByZero => "i32 division by zero has undefined backend semantics",
            Self::SignedDivisionOverflow => {
                "i32 division overflow (i32::MIN / -1) has undefined backend semantics"
            }
            Self::SignedRemainderByZero => "i32 remainder by zero has undefined backend semantics",
            Self::SignedRemainderOverflow => {
                "i32 remainder overflow (i32::MIN % -1) has undefined backend semantics"
            }
            Self::IndexNotU32 => "a load, store or atomic index cannot be represented as u32",
            Self::LoopBoundNotU32 => "a loop bound cannot be represented as u32",
            Self::CastOutOfRange => "a cast cannot represent its value losslessly",
            Self::AtomicOperandNotU32 => "an atomic operand cannot be represented as u32",
            Self::Trap => "the program reached Node::Trap (the reference dispatch traps)",
            Self::RejectedByReference => "the program reached a construct the reference interpreter cannot execute (Resume, IndirectDispatch, SubgroupLocalId, SubgroupSize or an opaque IR extension)",
            Self::DivergentBarrier => "program violates uniform-control-flow rule: a Barrier appears inside an If whose condition differs across the workgroup",
            Self::SubgroupLaneNotU32 => "subgroup_shuffle lane index is not a u32",
            Self::AsyncByteCountNotU64 => "an async copy offset or size cannot be represented as u64",
            Self::HalfOutOfBounds => "an operator received an out-of-bounds f16/bf16 load, which the reference holds as raw bytes [0, 0], not a float (mismatched operands)",
            Self::SubgroupLanesNotCombinable => "subgroup lanes have mixed or unsupported value types (the reference combines u32 and f32 lanes only)",
            Self::UndeclaredVariable => "reference to undeclared variable: a subgroup operation read a variable that a lane of its subgroup had not bound (the reference evaluates the operand for every lane, including lanes that returned)",
            Self::AsyncTagStartedTwice => "an async transfer tag was started more than once before a matching wait",
            Self::AsyncWaitWithoutStart => "an async wait has no matching async transfer",
            Self::AsyncTransferPending => "an invocation completed with an async transfer still pending",
            Self::BytesOperand => "a binary operator received mismatched operands: a load of a bytes buffer is raw bytes (the rest of the buffer), not a number",
            Self::RawOperand => "an operator received raw bytes, not a number: the reference loads u8, i8, u16, i16, i64, vec, 8-bit float and handle elements (and holds values cast to bytes) as raw bytes, which no operator takes",
            Self::SnapshotHeap => "the device heap could not hold a snapshot the reference takes: an async copy's payload (read at the copy's start; the program may write its source before the wait) or the bytes a Let/Assign of a bytes load binds (the program may write the buffer before reading the variable); each invocation keeps such a copy, of run-time size, on the device heap (CUDA's default: 8 MiB for the context)",
        }
    }

    /// How to avoid it.
    #[must_use]
    pub const fn fix(self) -> &'static str {
        match self {
            Self::SignedDivisionByZero
            | Self::SignedDivisionOverflow
            | Self::SignedRemainderByZero
            | Self::SignedRemainderOverflow => {
                "guard the signed divisor/overflow case before dividing, or use unsigned operands"
            }
            Self::IndexNotU32 => "use a non-negative index within u32",
            Self::LoopBoundNotU32 => "use in-range unsigned loop bounds",
            Self::CastOutOfRange => "cast from an in-range value",
            Self::AtomicOperandNotU32 => "pass u32-compatible atomic operands",
            Self::Trap => "handle the trap condition before dispatch",
            Self::RejectedByReference => "lower these constructs (and IR extensions) to core IR before dispatch",
            Self::DivergentBarrier => {
                "make the condition uniform or move the Barrier outside the branch"
            }
            Self::SubgroupLaneNotU32 => "use a scalar u32 lane argument",
            Self::AsyncByteCountNotU64 => "use an in-range non-negative byte count",
            Self::HalfOutOfBounds => {
                "keep f16/bf16 load indices in bounds, or Cast the load to f32 first (out of bounds it then reads 0.0)"
            }
            Self::SubgroupLanesNotCombinable => {
                "cast every lane value to u32 or f32 before the subgroup operation"
            }
            Self::UndeclaredVariable => {
                "bind the variable before any Return that comes before the subgroup operation"
            }
            Self::AsyncTagStartedTwice => "reuse the tag only after AsyncWait completes",
            Self::AsyncWaitWithoutStart => "emit AsyncLoad or AsyncStore before AsyncWait",
            Self::AsyncTransferPending => {
                "add AsyncWait for every AsyncLoad/AsyncStore tag before Return or end-of-program"
            }
            Self::BytesOperand => {
                "read single bytes from a u8 buffer, or words from a u32 buffer, to compute with them"
            }
            Self::RawOperand => {
                "Cast the load to u32 or i32 (or a wide one to u64) before computing with it"
            }
            Self::SnapshotHeap => {
                "give an async transfer a literal size of at most 4096 bytes or wait for it before writing its source, read a bytes variable before writing its buffer, or raise CU_LIMIT_MALLOC_HEAP_SIZE before the first dispatch"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_zero_means_no_fault() {
        for fault in DeviceFault::ALL {
            assert_eq!(DeviceFault::from_code(fault.code()), Some(fault));
        }
        assert_eq!(DeviceFault::from_code(0), None);
        assert_eq!(DeviceFault::from_code(999), None);
    }
}
