//! The static shape of a value, mirroring `vyre-reference`'s run-time `Value` model.
//!
//! The reference interpreter is dynamically typed; the emitter computes, for every
//! expression, which `Value` variant the reference would produce there, and lowers the
//! operation the reference would run for that variant.

use super::writer::RegClass;
use std::borrow::Cow;
use vyre_foundation::ir::DataType;

/// What a variable is bound to: a value of one kind, or a bytes view (a run-time-sized
/// `Value::Bytes`; `lower::bytes`). Lanes may hold one name with different typings
/// (`lower::typed_lanes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Typing {
    Value(ValKind),
    View,
}

/// Which reference `Value` variant an expression produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValKind {
    /// `Value::U32`, held in a `.b32` register.
    U32,
    /// `Value::I32`, held in a `.b32` register.
    I32,
    /// `Value::Bool`, held in a `.b32` register as 0 or 1.
    Bool,
    /// `Value::Float` holding a canonical f32 (NaN payloads are canonicalised lazily at
    /// the points where bits become observable), held in a `.f32` register.
    F32,
    /// `Value::Float` holding an f64 that need not be an f32 (loaded from an `F64`
    /// buffer), held in a `.f64` register. Float operators round it to f32 first.
    F64,
    /// `Value::U64`, held in a `.b64` register.
    U64,
    /// What an F16/BF16 load yields, held in a `.f32` register: in bounds a `Value::Float`
    /// (the element widened exactly to a canonical f32, never subnormal); out of bounds
    /// `Value::Bytes([0, 0])`, held as the subnormal [`OOB_HALF_BITS`]. Float operators
    /// fail on the latter, as the reference's do; elsewhere it reads as +0.0.
    Half,
    /// `Value::Bytes` of 1..=8 little-endian bytes, zero-extended in a `.b32` (<= 4
    /// bytes) or `.b64` register, or of 9..=255 bytes (`Vec4U32`, wide `Vec`s) in one
    /// `.b64` register per eight bytes (the first is the value's register, the lowerer
    /// tracks the others, the last zero-extended). Narrow, `I64` and vector loads produce
    /// these.
    Bytes(u8),
}

impl ValKind {
    pub(crate) fn reg_class(self) -> RegClass {
        match self {
            Self::U32 | Self::I32 | Self::Bool => RegClass::B32,
            Self::F32 | Self::Half => RegClass::F32,
            Self::F64 => RegClass::F64,
            Self::U64 => RegClass::B64,
            Self::Bytes(width) if width <= 4 => RegClass::B32,
            Self::Bytes(_) => RegClass::B64,
        }
    }

    /// Length of the reference's `to_bytes()` for this value (a Float is an f64; an
    /// out-of-bounds [`Self::Half`] has 2, which the byte stores check at run time).
    pub(crate) fn byte_len(self) -> u8 {
        match self {
            Self::U32 | Self::I32 | Self::Bool => 4,
            Self::F32 | Self::F64 | Self::U64 | Self::Half => 8,
            Self::Bytes(width) => width,
        }
    }

    /// Whether the value lives in several `.b64` registers (see [`Self::Bytes`]).
    pub(crate) fn is_wide(self) -> bool {
        matches!(self, Self::Bytes(9..))
    }

    /// The `.b64` registers a wide value has beside its own: one per eight bytes past
    /// the first eight.
    pub(crate) fn upper_words(self) -> usize {
        match self {
            Self::Bytes(width @ 9..) => usize::from(width).div_ceil(8) - 1,
            _ => 0,
        }
    }

    pub(crate) fn name(self) -> String {
        match self {
            Self::U32 => "u32".into(),
            Self::I32 => "i32".into(),
            Self::Bool => "bool".into(),
            Self::F32 => "f32".into(),
            Self::F64 => "f64".into(),
            Self::U64 => "u64".into(),
            Self::Half => "f16/bf16 value".into(),
            Self::Bytes(width) => format!("{width}-byte raw value"),
        }
    }

    /// What the reference's element load yields for a buffer of `element`, if this
    /// emitter supports that element type.
    pub(crate) fn of_load(element: &DataType) -> Option<Self> {
        if let Some(width) = unaddressed_width(element).or_else(|| odd_width(element)) {
            return Some(Self::Bytes(width));
        }
        Some(match raw_alias(element).as_ref() {
            DataType::U32 | DataType::Bool => Self::U32,
            DataType::I32 => Self::I32,
            DataType::F32 => Self::F32,
            DataType::F64 => Self::F64,
            DataType::U64 => Self::U64,
            DataType::U8 | DataType::I8 => Self::Bytes(1),
            DataType::F16 | DataType::BF16 => Self::Half,
            DataType::U16 | DataType::I16 => Self::Bytes(2),
            // A handle is its four raw bytes (`Value::Bytes`), not a u32.
            DataType::Handle(_) => Self::Bytes(4),
            DataType::I64 | DataType::Vec2U32 => Self::Bytes(8),
            DataType::Vec4U32 => Self::Bytes(16),
            _ => return None,
        })
    }
}

/// The element type whose loads, stores and stride vyre-reference treats exactly like
/// `element`'s. An 8-bit float is a `u8`: 8 bits wide, one byte apart, loaded as that raw
/// byte (`Value::Bytes`, zero out of bounds), stored as the value's low byte. The 4-bit
/// types (`I4`, `FP4`, `NF4`) load and store the same way (their `min_bytes` is 1 and their
/// storage width one byte), but count two elements a byte in `BufLen` and in the buffer's
/// declared size: see [`buf_len`] and [`declared_bytes`], which take the element itself.
/// A quantized element is its storage type when that is such a raw type (the reference
/// reads and writes the storage, ignoring scale and zero point).
pub(crate) fn raw_alias(element: &DataType) -> Cow<'_, DataType> {
    match element {
        DataType::F8E4M3 | DataType::F8E5M2 | DataType::I4 | DataType::FP4 | DataType::NF4 => {
            Cow::Owned(DataType::U8)
        }
        DataType::Quantized { storage, .. } => match raw_alias(storage) {
            raw if matches!(
                raw.as_ref(),
                DataType::U8 | DataType::I8 | DataType::U16 | DataType::I16
            ) =>
            {
                Cow::Owned(raw.into_owned())
            }
            _ => Cow::Borrowed(element),
        },
        DataType::Vec { .. } => vec_alias(element).map_or(Cow::Borrowed(element), Cow::Owned),
        _ => Cow::Borrowed(element),
    }
}

/// A `Vec` of elements with a fixed storage width (in the reference's
/// `fixed_scalar_storage_width`: 8/16-bit integers and floats, 4-bit types, handles, i64,
/// nested such vectors) is loaded as that many raw bytes (zero out of bounds) and stored as
/// the value's bytes: the raw type of the same width, when there is one. So is a `Vec` of
/// other lanes (see [`maybe_empty_width`]), but for its out-of-bounds loads' emptiness,
/// and one of several 4-bit lanes, but for its count (see [`nibble_vector`]). Not one whose
/// lanes have no width in loads (see [`unaddressed_width`]).
fn vec_alias(element: &DataType) -> Option<DataType> {
    let width = addressed_vec_width(element)?;
    Some(match width {
        1 => DataType::U8,
        2 => DataType::U16,
        4 => DataType::Handle(vyre_spec::TypeId(0)),
        8 => DataType::I64,
        16 => DataType::Vec4U32,
        _ => return None,
    })
}

/// The width of a `Vec` that is 3, 5 to 7 or 9 to 15 bytes wide (`Vec<u8; 3>`, an RGB
/// pixel; `Vec<u16; 3>`; `Vec<u8; 12>`), or 17 to [`MAX_VALUE_BYTES`] (`Vec<u8; 32>`, a
/// digest; `Vec<f32; 8>`): no raw type has that width, so its loads and stores move that
/// many single bytes (`Value::Bytes` of the width, zeros out of bounds; the empty bytes for
/// lanes without a storage width, see [`maybe_empty_width`]), one element every `width`
/// bytes.
pub(crate) fn odd_width(element: &DataType) -> Option<u8> {
    match addressed_vec_width(element)? {
        width @ (3 | 5..=7 | 9..=15 | 17..=MAX_VALUE_BYTES) => Some(width as u8),
        _ => None,
    }
}

/// The width of a `Vec` the reference addresses one element every `width` bytes and loads
/// as those bytes: its storage width equals its stride (`min_bytes`), and its bits are its
/// bytes' (whole-byte lanes) or half of them (4-bit lanes, a byte each: see
/// [`nibble_vector`]).
fn addressed_vec_width(element: &DataType) -> Option<usize> {
    let width = vec_storage_width(element)?;
    let bits = element.bit_width()?;
    (element.min_bytes() == width && (bits == 8 * width || bits == 4 * width)).then_some(width)
}

/// A `Vec` of 4-bit lanes (`Vec<i4; 2>`, `Vec<nf4; 8>`): each lane takes a byte of the
/// element, but the reference counts the buffer by its bits (`BufLen`, the grid, the
/// declared size): two elements for every one it addresses. Of more than one lane, the
/// kernel takes the reference's count and addresses half of it (`Lowerer::buffer_slots`):
/// a trailing partial element of half the stride or more counts one more element.
pub(crate) fn nibble_vector(element: &DataType) -> bool {
    matches!(element, DataType::Vec { .. })
        && addressed_vec_width(element).is_some_and(|width| element.bit_width() == Some(4 * width))
}

/// The widest raw value held in registers (32 `.b64`s), and so the widest element loaded.
pub(crate) const MAX_VALUE_BYTES: usize = 255;

/// The bytes a load of a `Vec` element yields in bounds: its fixed storage width (see
/// [`fixed_storage_width`]), or, for a vector of lanes without one (u32, i32, f32, bool,
/// u64, f64, vec2/vec4 lanes, vectors of them), every byte of the element: see
/// [`maybe_empty_width`].
fn vec_storage_width(element: &DataType) -> Option<usize> {
    let DataType::Vec { .. } = element else {
        return None;
    };
    fixed_storage_width(element).or_else(|| lanes_width(element))
}

/// The width of a `Vec` of lanes without a fixed storage width whose bits are all of its
/// bytes: see [`maybe_empty_width`].
fn lanes_width(element: &DataType) -> Option<usize> {
    let DataType::Vec { .. } = element else {
        return None;
    };
    if fixed_storage_width(element).is_some() {
        return None;
    }
    let width = element.size_bytes()?;
    let whole_bytes = element.min_bytes() == width && element.bit_width() == Some(8 * width);
    whole_bytes.then_some(width)
}

/// For a `Vec` of lanes without a fixed storage width (`Vec<f32; 4>`, `Vec<u32; 3>`,
/// `Vec<u64; 2>`), up to [`MAX_VALUE_BYTES`] wide: its width. The reference loads such an
/// element as all of its bytes (`Value::Bytes` of the width, which no operator takes and
/// which is truthy beyond four bytes), but out of bounds as the *empty* bytes (its type has
/// no zero value), which is falsy; stored into an element, both write the value's bytes
/// zero-padded. So its values are those of the raw type of the width, except that a value
/// wider than four bytes carries whether it is filled (see `Lowerer::filled`).
pub(crate) fn maybe_empty_width(element: &DataType) -> Option<u8> {
    let width = lanes_width(element)?;
    (1..=MAX_VALUE_BYTES)
        .contains(&width)
        .then_some(width as u8)
}

/// Whether loads of `element` yield values a filled flag must tell from zeros: a
/// [`maybe_empty_width`] over four bytes (up to four, the empty bytes read as zeros do).
pub(crate) fn loads_may_be_empty(element: &DataType) -> bool {
    maybe_empty_width(element).is_some_and(|width| width > 4)
}

/// The reference's `fixed_scalar_storage_width`: the bytes a load of `element` yields
/// (`Value::Bytes`) when it has a fixed scalar storage width.
fn fixed_storage_width(element: &DataType) -> Option<usize> {
    match element {
        DataType::U8
        | DataType::I8
        | DataType::F8E4M3
        | DataType::F8E5M2
        | DataType::I4
        | DataType::FP4
        | DataType::NF4 => Some(1),
        DataType::U16 | DataType::I16 | DataType::F16 | DataType::BF16 => Some(2),
        DataType::Handle(_) | DataType::DeviceMesh { .. } => Some(4),
        DataType::I64 => Some(8),
        DataType::Array { element_size } => Some(*element_size),
        DataType::Vec { element, count } => {
            fixed_storage_width(element)?.checked_mul(usize::from(*count))
        }
        DataType::TensorShaped { element, shape } => shape
            .iter()
            .try_fold(fixed_storage_width(element)?, |width, &dim| {
                width.checked_mul(dim as usize)
            }),
        DataType::Quantized { storage, .. } => fixed_storage_width(storage),
        _ => None,
    }
}

/// For an element the reference addresses with a zero stride (`min_bytes` 0 but a size:
/// `Array`, `DeviceMesh`, vectors of them or of bytes) and counts by its size: the width of
/// the zero value every load yields (every store writes nothing), up to
/// [`MAX_VALUE_BYTES`]. A type without a fixed storage width (`Vec<bytes; 2>`) has no zero
/// value: its loads are the empty bytes, width 0 (as `Array { element_size: 0 }`'s zero
/// value is).
pub(crate) fn unaddressed_width(element: &DataType) -> Option<u8> {
    if !zero_stride(element) {
        return None;
    }
    match fixed_storage_width(element) {
        None => Some(0),
        Some(width @ 0..=MAX_VALUE_BYTES) => Some(width as u8),
        Some(_) => None,
    }
}

/// Whether the reference addresses `element` with a zero stride (`min_bytes` 0) but counts
/// it by its size. Not a bit width of zero (`Vec<f32; 0>`): the reference divides by it to
/// count the buffer's elements, so it never runs such a buffer.
fn zero_stride(element: &DataType) -> bool {
    let sized = element.size_bytes().is_some() && *element != DataType::Bytes;
    element.min_bytes() == 0 && sized && element.bit_width() != Some(0)
}

/// An element whose loads are wider than a value held in registers
/// ([`MAX_VALUE_BYTES`]): its loads are lowered as bytes views (`lower::bytes`), whose bytes
/// only a store into such an element, a copy (`Let`) or a `Select` moves; vyre's validator
/// lets nothing else take them (but operators and subgroup operations, which fail on them
/// at run time, and conditions, for which they are truthy where not empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WideElement {
    /// A `Vec` addressed `width` bytes apart and loaded as those bytes; out of bounds as
    /// `width` zero bytes where its lanes have a fixed storage width (`zeros`), else as the
    /// empty bytes (see [`maybe_empty_width`]).
    Addressed { width: u32, zeros: bool },
    /// A zero-stride element (see [`unaddressed_width`]): every load is its zero value of
    /// `width` bytes, every store writes nothing; `size` is its byte size (what counts it).
    Zeros { width: u32, size: u32 },
}

impl WideElement {
    /// The stride the kernel addresses (and counts) the buffer by.
    pub(crate) fn stride(self) -> u32 {
        match self {
            Self::Addressed { width, .. } => width,
            Self::Zeros { size, .. } => size.max(1),
        }
    }

    /// Whether some load yields zero bytes that are in no buffer.
    pub(crate) fn loads_zeros(self) -> bool {
        matches!(
            self,
            Self::Addressed { zeros: true, .. } | Self::Zeros { .. }
        )
    }
}

/// `element`'s [`WideElement`], when it is one.
pub(crate) fn wide_element(element: &DataType) -> Option<WideElement> {
    let narrow = |width: usize| width <= MAX_VALUE_BYTES;
    if zero_stride(element) {
        let width = fixed_storage_width(element)?;
        let size = element.size_bytes()?;
        return match narrow(width) {
            true => None,
            false => Some(WideElement::Zeros {
                width: u32::try_from(width).ok()?,
                size: u32::try_from(size).ok()?,
            }),
        };
    }
    let width = addressed_vec_width(element).filter(|&width| !narrow(width))?;
    Some(WideElement::Addressed {
        width: u32::try_from(width).ok()?,
        zeros: fixed_storage_width(element).is_some(),
    })
}

/// Whether loads of `element` are bytes views (`lower::bytes`): a `Bytes` buffer's (the
/// rest of the buffer) or a [`WideElement`]'s. A `Cast` of a view to such a type is the
/// view: the reference's cast to `Bytes`, or to a type without a conversion of its own (a
/// wide element's, the only target vyre's validator lets its values take), is `to_bytes()`.
pub(crate) fn view_element(element: &DataType) -> bool {
    *element == DataType::Bytes || wide_element(element).is_some()
}

/// The reference's `Buffer::len` (what `BufLen` reads, and what its dispatch sizes the grid
/// from) of a buffer of `element` holding `byte_len` bytes: by the element's bit width where
/// it has one (two 4-bit elements a byte), else by its byte size; saturated to `u32::MAX`.
pub(crate) fn buf_len(element: &DataType, byte_len: u64) -> u32 {
    let count = match (element.bit_width(), element.size_bytes()) {
        (Some(bits), _) => byte_len.saturating_mul(8) / bits as u64,
        (None, Some(stride)) if stride > 0 => byte_len / stride as u64,
        _ => byte_len,
    };
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// The count parameter a kernel takes for a buffer of `element`s holding `byte_len`
/// bytes `stride` apart: the elements it addresses, or, for a vector of several 4-bit
/// lanes, the reference's count, of which it addresses half (see [`nibble_vector`]).
pub(crate) fn count_param(element: &DataType, stride: u32, byte_len: u64) -> u64 {
    let per_stride = u64::from(stride.max(1));
    match param_is_reference_count(element, stride) {
        true => byte_len * 2 / per_stride,
        false => byte_len / per_stride,
    }
}

/// Whether a storage buffer's count parameter is the reference's count, of which the
/// kernel addresses half (a vector of several 4-bit lanes), rather than the addressed
/// count: the host ([`count_param`]) and the kernel's prologue must agree.
pub(crate) fn param_is_reference_count(element: &DataType, stride: u32) -> bool {
    nibble_vector(element) && stride > 1
}

/// The bytes the reference allocates for `count` elements of `element` (an output, a
/// workgroup buffer) and requires of an input: vyre's packed size (two 4-bit elements a
/// byte, rounded up), else `count` strides.
pub(crate) fn declared_bytes(element: &DataType, count: u32, stride: u32) -> u64 {
    match element.packed_size_bytes(count as usize) {
        Ok(Some(bytes)) => bytes as u64,
        _ => u64::from(count) * u64::from(stride),
    }
}

/// The f32 bits standing for an out-of-bounds F16/BF16 load (`Value::Bytes([0, 0])`) in a
/// [`ValKind::Half`] register: the smallest positive subnormal, a value no in-bounds load
/// (and no f32 value, all of which are flushed) ever holds.
pub(crate) const OOB_HALF_BITS: u32 = 1;

/// The byte stride of one element of a buffer this emitter can address, if supported.
pub(crate) fn element_stride(element: &DataType) -> Option<u32> {
    if let Some(wide) = wide_element(element) {
        return Some(wide.stride());
    }
    if unaddressed_width(element).is_some() {
        // Never addressed: the host counts (and sizes) it by its size, as `BufLen` does
        // (by its bytes where the size is zero).
        return element.size_bytes().map(|size| size.max(1) as u32);
    }
    if let Some(width) = odd_width(element) {
        return Some(u32::from(width));
    }
    match raw_alias(element).as_ref() {
        // A `Bytes` buffer is addressed per byte: its element count is its byte length.
        DataType::U8 | DataType::I8 | DataType::Bytes => Some(1),
        DataType::U16 | DataType::I16 | DataType::F16 | DataType::BF16 => Some(2),
        DataType::U32 | DataType::I32 | DataType::F32 | DataType::Bool | DataType::Handle(_) => {
            Some(4)
        }
        DataType::U64 | DataType::I64 | DataType::F64 | DataType::Vec2U32 => Some(8),
        DataType::Vec4U32 => Some(16),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vyre_spec::{QuantizationScale, QuantizationZeroPoint};

    fn vec_of(element: DataType, count: u8) -> DataType {
        DataType::Vec {
            element: Box::new(element),
            count,
        }
    }

    fn quantized(storage: DataType) -> DataType {
        DataType::Quantized {
            storage: Box::new(storage),
            scale: QuantizationScale::PerTensor,
            zero_point: QuantizationZeroPoint::Absent,
        }
    }

    #[test]
    fn eight_bit_floats_and_raw_quantized_storage_are_their_raw_integers() {
        assert_eq!(raw_alias(&DataType::F8E4M3).as_ref(), &DataType::U8);
        assert_eq!(
            raw_alias(&quantized(DataType::F8E5M2)).as_ref(),
            &DataType::U8
        );
        assert_eq!(
            raw_alias(&quantized(DataType::I16)).as_ref(),
            &DataType::I16
        );
        assert_eq!(ValKind::of_load(&DataType::F8E5M2), Some(ValKind::Bytes(1)));
        assert_eq!(element_stride(&quantized(DataType::U16)), Some(2));
    }

    #[test]
    fn a_handle_is_four_raw_bytes() {
        let handle = DataType::Handle(vyre_spec::TypeId(3));
        assert_eq!(ValKind::of_load(&handle), Some(ValKind::Bytes(4)));
        assert_eq!(element_stride(&handle), Some(4));
    }

    #[test]
    fn four_bit_elements_load_like_bytes_but_count_two_a_byte() {
        for element in [
            DataType::I4,
            quantized(DataType::NF4),
            quantized(DataType::FP4),
        ] {
            assert_eq!(raw_alias(&element).as_ref(), &DataType::U8);
            assert_eq!(element_stride(&element), Some(1));
            assert_eq!(ValKind::of_load(&element), Some(ValKind::Bytes(1)));
            assert_eq!(buf_len(&element, 5), 10);
            assert_eq!(buf_len(&element, 1 << 31), u32::MAX);
            assert_eq!(declared_bytes(&element, 3, 1), 2);
            assert_eq!(declared_bytes(&element, 4, 1), 2);
        }
    }

    #[test]
    fn other_elements_count_whole_strides() {
        assert_eq!(buf_len(&DataType::U32, 10), 2);
        assert_eq!(buf_len(&DataType::Vec4U32, 48), 3);
        assert_eq!(buf_len(&DataType::Bytes, 7), 7);
        assert_eq!(buf_len(&DataType::F8E4M3, 7), 7);
        assert_eq!(declared_bytes(&DataType::U16, 3, 2), 6);
        assert_eq!(declared_bytes(&DataType::Vec4U32, 3, 16), 48);
    }

    #[test]
    fn vectors_of_fixed_width_lanes_are_raw_types_of_their_width() {
        assert_eq!(raw_alias(&vec_of(DataType::U8, 2)).as_ref(), &DataType::U16);
        assert_eq!(element_stride(&vec_of(DataType::F16, 2)), Some(4));
        assert_eq!(
            ValKind::of_load(&vec_of(DataType::F16, 2)),
            Some(ValKind::Bytes(4))
        );
        assert_eq!(element_stride(&vec_of(DataType::I16, 4)), Some(8));
        assert_eq!(element_stride(&vec_of(DataType::U8, 16)), Some(16));
        // Several 4-bit lanes: a byte each, counted by their bits (two per addressed one).
        assert_eq!(element_stride(&vec_of(DataType::I4, 2)), Some(2));
        assert_eq!(element_stride(&vec_of(DataType::I4, 3)), Some(3));
        assert!(nibble_vector(&vec_of(DataType::NF4, 3)));
        assert!(!nibble_vector(&vec_of(DataType::U8, 3)));
        assert_eq!(count_param(&vec_of(DataType::I4, 3), 3, 8), 5);
        assert_eq!(count_param(&vec_of(DataType::U8, 3), 3, 8), 2);
        assert_eq!(buf_len(&vec_of(DataType::I4, 3), 8), 5);
        assert_eq!(element_stride(&vec_of(DataType::U8, 255)), Some(255));
        // Over 255 bytes: a wide element, loaded as a view.
        let wide = vec_of(DataType::U16, 128);
        assert_eq!(odd_width(&wide), None);
        assert_eq!(ValKind::of_load(&wide), None);
        assert_eq!(
            wide_element(&wide),
            Some(WideElement::Addressed {
                width: 256,
                zeros: true
            })
        );
        assert_eq!(element_stride(&wide), Some(256));
        let lanes = vec_of(DataType::U32, 100);
        assert_eq!(maybe_empty_width(&lanes), None);
        assert_eq!(
            wide_element(&lanes),
            Some(WideElement::Addressed {
                width: 400,
                zeros: false
            })
        );
        assert!(view_element(&lanes) && view_element(&DataType::Bytes));
        assert!(!view_element(&vec_of(DataType::U32, 63)));
    }

    #[test]
    fn vectors_of_widths_without_a_raw_type_are_raw_values_of_that_width() {
        for (element, width) in [
            (vec_of(DataType::U8, 3), 3),
            (vec_of(DataType::I8, 5), 5),
            (vec_of(DataType::F16, 3), 6),
            (vec_of(vec_of(DataType::U8, 1), 7), 7),
            (vec_of(DataType::U8, 12), 12),
            (vec_of(DataType::BF16, 7), 14),
        ] {
            assert_eq!(raw_alias(&element).as_ref(), &element);
            assert_eq!(odd_width(&element), Some(width));
            assert_eq!(element_stride(&element), Some(u32::from(width)));
            assert_eq!(ValKind::of_load(&element), Some(ValKind::Bytes(width)));
            assert_eq!(buf_len(&element, 7 * u64::from(width) + 1), 7);
            assert_eq!(
                declared_bytes(&element, 5, u32::from(width)),
                5 * u64::from(width)
            );
        }
        assert_eq!(odd_width(&vec_of(DataType::U8, 4)), None);
    }

    #[test]
    fn zero_stride_elements_load_a_zero_of_their_size() {
        let mesh = DataType::DeviceMesh {
            axes: [4u32].into_iter().collect(),
        };
        assert_eq!(unaddressed_width(&mesh), Some(4));
        assert_eq!(ValKind::of_load(&mesh), Some(ValKind::Bytes(4)));
        assert_eq!(element_stride(&mesh), Some(4));
        assert_eq!(buf_len(&mesh, 40), 10);
        let pair = DataType::Array { element_size: 2 };
        assert_eq!(unaddressed_width(&pair), Some(2));
        assert_eq!(buf_len(&pair, 40), 20);
        // Zero values of 0 and 12 bytes; a vector of bytes lanes loads the empty bytes.
        let empty = DataType::Array { element_size: 0 };
        assert_eq!(unaddressed_width(&empty), Some(0));
        assert_eq!(element_stride(&empty), Some(1));
        assert_eq!(buf_len(&empty, 40), 40);
        let twelve = DataType::Array { element_size: 12 };
        assert_eq!(ValKind::of_load(&twelve), Some(ValKind::Bytes(12)));
        assert_eq!(element_stride(&twelve), Some(12));
        let bytes_pair = vec_of(DataType::Bytes, 2);
        assert_eq!(ValKind::of_load(&bytes_pair), Some(ValKind::Bytes(0)));
        assert_eq!(element_stride(&bytes_pair), Some(2));
        assert_eq!(buf_len(&bytes_pair, 41), 20);
        // Over 255 bytes: a wide element (a view); refused: no lanes at all (a bit width of zero).
        let no_lanes = vec_of(DataType::F32, 0);
        assert_eq!(unaddressed_width(&no_lanes), None);
        assert_eq!(element_stride(&no_lanes), None);
        assert_eq!(
            unaddressed_width(&DataType::Array { element_size: 255 }),
            Some(255)
        );
        let wide = DataType::Array { element_size: 256 };
        assert_eq!(unaddressed_width(&wide), None);
        assert_eq!(
            wide_element(&wide),
            Some(WideElement::Zeros {
                width: 256,
                size: 256
            })
        );
        assert_eq!(element_stride(&wide), Some(256));
        assert_eq!(wide_element(&no_lanes), None);
        assert_eq!(unaddressed_width(&DataType::U32), None);
        assert_eq!(unaddressed_width(&DataType::Bytes), None);
    }

    #[test]
    fn vectors_of_lanes_without_a_storage_width_are_their_raw_bytes_or_empty() {
        for (element, width, stride) in [
            (vec_of(DataType::F32, 4), 16, 16),
            (vec_of(DataType::U64, 2), 16, 16),
            (vec_of(vec_of(DataType::F32, 2), 2), 16, 16),
            (vec_of(DataType::U32, 2), 8, 8),
            (vec_of(DataType::F32, 3), 12, 12),
            (vec_of(DataType::I32, 1), 4, 4),
        ] {
            assert_eq!(maybe_empty_width(&element), Some(width), "{element}");
            assert_eq!(ValKind::of_load(&element), Some(ValKind::Bytes(width)));
            assert_eq!(element_stride(&element), Some(stride));
            assert_eq!(buf_len(&element, 5 * u64::from(stride) + 3), 5);
        }
        assert_eq!(odd_width(&vec_of(DataType::F32, 3)), Some(12));
        // Fixed-width lanes, no lanes, and more than 255 bytes are not such vectors.
        assert_eq!(maybe_empty_width(&vec_of(DataType::U8, 4)), None);
        assert_eq!(maybe_empty_width(&vec_of(DataType::F32, 0)), None);
        assert_eq!(maybe_empty_width(&vec_of(DataType::F32, 8)), Some(32));
        assert_eq!(odd_width(&vec_of(DataType::F32, 8)), Some(32));
        assert_eq!(maybe_empty_width(&vec_of(DataType::F32, 64)), None);
        assert_eq!(maybe_empty_width(&vec_of(DataType::Bytes, 2)), None);
        assert_eq!(maybe_empty_width(&DataType::Vec4U32), None);
    }

    /// `put_load` relies on it: every element the ABI addresses, but bytes, has a load kind.
    #[test]
    fn every_addressed_element_but_bytes_has_a_load_kind() {
        let mut elements = vec![
            DataType::U8,
            DataType::I8,
            DataType::U16,
            DataType::I16,
            DataType::F16,
            DataType::BF16,
            DataType::U32,
            DataType::I32,
            DataType::F32,
            DataType::Bool,
            DataType::U64,
            DataType::I64,
            DataType::F64,
            DataType::Vec2U32,
            DataType::Vec4U32,
            DataType::F8E4M3,
            DataType::F8E5M2,
            DataType::I4,
            DataType::FP4,
            DataType::NF4,
            DataType::Handle(vyre_spec::TypeId(1)),
            DataType::DeviceMesh {
                axes: [2u32].into_iter().collect(),
            },
            DataType::Tensor,
        ];
        for size in 0..20 {
            elements.push(DataType::Array { element_size: size });
        }
        for count in 0..20 {
            for lane in [
                DataType::U8,
                DataType::F16,
                DataType::U32,
                DataType::I4,
                DataType::Handle(vyre_spec::TypeId(1)),
                DataType::Array { element_size: 2 },
            ] {
                elements.push(vec_of(lane, count));
            }
        }
        elements.extend(elements.clone().into_iter().map(quantized));
        for element in elements {
            if element_stride(&element).is_some() {
                assert!(ValKind::of_load(&element).is_some(), "{element}");
            }
        }
    }
}
