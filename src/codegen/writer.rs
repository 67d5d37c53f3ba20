//! Text sink for one PTX kernel body: virtual registers, labels and instruction lines.
//!
//! Registers are allocated per class and declared in bulk when the kernel is finished,
//! so the walker can mint a fresh register for every value it defines.

use std::fmt::{self, Write as _};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum RegClass {
    Pred,
    B32,
    B64,
    F32,
    F64,
}

impl RegClass {
    pub(crate) const ALL: [RegClass; 5] = [Self::Pred, Self::B32, Self::B64, Self::F32, Self::F64];

    pub(crate) fn prefix(self) -> &'static str {
        match self {
            Self::Pred => "%p",
            Self::B32 => "%r",
            Self::B64 => "%rd",
            Self::F32 => "%f",
            Self::F64 => "%fd",
        }
    }

    pub(crate) fn slot(self) -> usize {
        self as usize
    }

    /// The type suffix of `mov`, `ld`, `st`, `selp` and `.param` for this class.
    pub(crate) fn ty(self) -> &'static str {
        match self {
            Self::Pred => "pred",
            Self::B32 => "b32",
            Self::B64 => "b64",
            Self::F32 => "f32",
            Self::F64 => "f64",
        }
    }

    /// Register width in bytes (a predicate counts as 4).
    pub(crate) fn bytes(self) -> u32 {
        match self {
            Self::Pred | Self::B32 | Self::F32 => 4,
            Self::B64 | Self::F64 => 8,
        }
    }

    /// The zero immediate of this class's registers.
    pub(crate) fn zero(self) -> &'static str {
        match self {
            Self::F32 => "0f00000000",
            Self::F64 => "0d0000000000000000",
            _ => "0",
        }
    }

    pub(crate) fn is_float(self) -> bool {
        matches!(self, Self::F32 | Self::F64)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Reg {
    pub(crate) class: RegClass,
    pub(crate) index: u32,
}

impl Reg {
    pub(crate) fn class(self) -> RegClass {
        self.class
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.class.prefix(), self.index)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Label(u32);

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "$L__{}", self.0)
    }
}

#[derive(Default)]
pub(crate) struct PtxWriter {
    body: String,
    counts: [u32; 5],
    labels: u32,
    /// Labels placed so far (see [`PtxWriter::block_mark`]).
    placed: u32,
}

impl PtxWriter {
    pub(crate) fn reg(&mut self, class: RegClass) -> Reg {
        fresh_reg(&mut self.counts, class)
    }

    /// How many registers of each class exist so far: a mark for [`PtxWriter::regs_since`].
    pub(crate) fn reg_mark(&self) -> [u32; 5] {
        self.counts
    }

    /// Every register allocated after `mark` was taken.
    pub(crate) fn regs_since(&self, mark: [u32; 5]) -> Vec<Reg> {
        RegClass::ALL
            .into_iter()
            .flat_map(|class| {
                (mark[class.slot()]..self.counts[class.slot()])
                    .map(move |index| Reg { class, index })
            })
            .collect()
    }

    /// Write zero (a predicate: false) into `reg`.
    pub(crate) fn put_zero(&mut self, reg: Reg) {
        match reg.class() {
            RegClass::Pred => self.inst(format_args!("setp.ne.u32 {reg}, 0, 0")),
            class => self.inst(format_args!("mov.{} {reg}, {}", class.ty(), class.zero())),
        }
    }

    pub(crate) fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels)
    }

    /// One instruction line; the `;` is added here.
    pub(crate) fn inst(&mut self, args: fmt::Arguments<'_>) {
        self.body.push('\t');
        // Writing into a String cannot fail.
        let _ = self.body.write_fmt(args);
        self.body.push_str(";\n");
    }

    /// `{` opening a nested PTX scope (for call parameters).
    pub(crate) fn open_scope(&mut self) {
        self.body.push_str("\t{\n");
    }

    pub(crate) fn close_scope(&mut self) {
        self.body.push_str("\t}\n");
    }

    /// Lines written elsewhere (each ending in a newline), such as an inlined libm routine.
    pub(crate) fn raw(&mut self, text: &str) {
        self.body.push_str(text);
    }

    pub(crate) fn put_label(&mut self, label: Label) {
        self.placed += 1;
        let _ = writeln!(self.body, "{label}:");
    }

    /// A label of a fixed name (one per entry, such as the clock's end block).
    pub(crate) fn put_named_label(&mut self, name: &str) {
        self.placed += 1;
        let _ = writeln!(self.body, "{name}:");
    }

    /// Changes whenever a label is placed: a register written while the mark had one
    /// value is defined at every later instruction written under the same value (the code
    /// between is entered only from above: branches may leave it, none can land in it).
    pub(crate) fn block_mark(&self) -> u32 {
        self.placed
    }

    /// Where the text ends now: a mark for [`PtxWriter::truncate`].
    pub(crate) fn text_mark(&self) -> usize {
        self.body.len()
    }

    /// Drop the text written after `mark`, for a lowering abandoned halfway. Registers and
    /// labels stay allocated; the block mark moves on as though a label were placed.
    pub(crate) fn truncate(&mut self, mark: usize) {
        self.body.truncate(mark);
        self.placed += 1;
    }

    pub(crate) fn register_decls(&self) -> String {
        register_decls(&self.counts)
    }

    pub(crate) fn into_body(self) -> String {
        self.body
    }
}

/// A fresh register of `class`, numbered per class by `counts`.
pub(crate) fn fresh_reg(counts: &mut [u32; 5], class: RegClass) -> Reg {
    let index = counts[class.slot()];
    counts[class.slot()] += 1;
    Reg { class, index }
}

/// The `.reg` declarations of `counts[class.slot()]` registers of each class.
pub(crate) fn register_decls(counts: &[u32; 5]) -> String {
    let mut out = String::new();
    for class in RegClass::ALL {
        let n = counts[class.slot()];
        if n > 0 {
            let _ = writeln!(out, "\t.reg .{} {}<{n}>;", class.ty(), class.prefix());
        }
    }
    out
}

/// `emit!(w, "add.u32 {}, {}, {}", d, a, b)` writes one instruction line.
macro_rules! emit {
    ($w:expr, $($arg:tt)*) => {
        $w.inst(format_args!($($arg)*))
    };
}
pub(crate) use emit;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_are_numbered_per_class_and_declared_once() {
        let mut w = PtxWriter::default();
        let a = w.reg(RegClass::B32);
        let b = w.reg(RegClass::B32);
        let p = w.reg(RegClass::Pred);
        emit!(w, "add.u32 {a}, {a}, {b}");
        assert_eq!(
            (a.to_string(), b.to_string(), p.to_string()),
            ("%r0".into(), "%r1".into(), "%p0".into())
        );
        let decls = w.register_decls();
        assert!(decls.contains(".reg .b32 %r<2>;"));
        assert!(decls.contains(".reg .pred %p<1>;"));
        assert!(!decls.contains("%rd"));
        assert_eq!(w.into_body(), "\tadd.u32 %r0, %r0, %r1;\n");
    }

    #[test]
    fn registers_allocated_after_a_mark_are_listed_and_zeroed_by_class() {
        let mut w = PtxWriter::default();
        w.reg(RegClass::B32);
        let mark = w.reg_mark();
        let (p, f, d) = (
            w.reg(RegClass::Pred),
            w.reg(RegClass::F32),
            w.reg(RegClass::B64),
        );
        assert_eq!(w.regs_since(mark), vec![p, d, f]);
        for reg in w.regs_since(mark) {
            w.put_zero(reg);
        }
        assert_eq!(
            w.into_body(),
            "\tsetp.ne.u32 %p0, 0, 0;\n\tmov.b64 %rd0, 0;\n\tmov.f32 %f0, 0f00000000;\n"
        );
    }
}
