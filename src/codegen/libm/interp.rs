//! Test-only executor for the [`super::ptx`] instruction lists, with PTX semantics
//! (`.rn` IEEE arithmetic with subnormals, saturating `cvt.rzi`, clamped shift counts).
//! It checks a port's logic against `libm` on the CPU; the GPU sweep checks the PTX.

use super::ptx::{Class, Cmp, CmpTy, Cvt, FOp, Func, IOp, Inst, Mem, Op, UOp, R};
use std::collections::HashMap;
use std::ops::{Add, Div, Mul, Sub};

pub(crate) struct Machine {
    funcs: HashMap<&'static str, (Func, HashMap<u32, usize>)>,
    /// Relative error given to `rcp.approx` results of f32 and of f64 (the hardware's is
    /// unspecified).
    rcp_error: [f64; 2],
}

impl Machine {
    pub(crate) fn new(funcs: Vec<Func>) -> Self {
        let funcs = funcs
            .into_iter()
            .map(|f| {
                let labels = f
                    .body
                    .iter()
                    .enumerate()
                    .filter_map(|(pc, inst)| match inst {
                        Inst::Label(l) => Some((*l, pc)),
                        _ => None,
                    })
                    .collect();
                (f.name, (f, labels))
            })
            .collect();
        Machine {
            funcs,
            rcp_error: [0.0; 2],
        }
    }

    /// The machine with every `rcp.approx` result off by `f32_error` or `f64_error`
    /// (relative).
    pub(crate) fn with_rcp_error(mut self, f32_error: f64, f64_error: f64) -> Self {
        self.rcp_error = [f32_error, f64_error];
        self
    }

    /// Run the public routine `name` on one f32.
    pub(crate) fn call_f32(&self, name: &str, x: f32) -> f32 {
        let out = self.run(name, &[u64::from(x.to_bits())]);
        f32::from_bits(out[0] as u32)
    }

    /// Run `name`; arguments and results are raw register bits. The control flow (branches,
    /// calls, returns) is run here, every other instruction by [`Frame::exec`].
    pub(crate) fn run(&self, name: &str, args: &[u64]) -> Vec<u64> {
        let (f, labels) = self
            .funcs
            .get(name)
            .unwrap_or_else(|| panic!("no function {name}"));
        let mut frame = Frame::new(f, args, self.rcp_error);
        let mut pc = 0usize;
        for _ in 0..1_000_000 {
            let inst = f
                .body
                .get(pc)
                .unwrap_or_else(|| panic!("{name}: fell off the end"));
            pc += 1;
            match inst {
                Inst::Bra(to, when) => {
                    if when.is_none_or(|(p, value)| (frame.get(p) != 0) == value) {
                        pc = labels[to];
                    }
                }
                Inst::Ret(vals) => return vals.iter().map(|r| frame.get(*r)).collect(),
                Inst::Call(callee, args, rets) => {
                    let args: Vec<u64> = args.iter().map(|r| frame.get(*r)).collect();
                    for (r, v) in rets.iter().zip(self.run(callee, &args)) {
                        frame.put(*r, v);
                    }
                }
                _ => frame.exec(inst),
            }
        }
        panic!("{name}: runaway loop")
    }
}

struct Frame {
    regs: [Vec<u64>; 5],
    locals: Vec<Vec<u64>>,
    rcp_error: [f64; 2],
}

impl Frame {
    fn new(f: &Func, args: &[u64], rcp_error: [f64; 2]) -> Self {
        let mut frame = Frame {
            regs: Class::ALL.map(|class| vec![0; f.counts[class.slot()] as usize]),
            locals: f.locals.iter().map(|l| vec![0; l.len as usize]).collect(),
            rcp_error,
        };
        for (p, &v) in f.params.iter().zip(args) {
            frame.put(*p, v);
        }
        frame
    }

    fn get(&self, r: R) -> u64 {
        self.regs[r.class.slot()][r.index as usize]
    }

    fn put(&mut self, r: R, v: u64) {
        let v = match r.class {
            Class::B32 | Class::F32 => v & 0xFFFF_FFFF,
            _ => v,
        };
        self.regs[r.class.slot()][r.index as usize] = v;
    }

    /// An operand's bits in an instruction of width `class`.
    fn val(&self, op: Op, class: Class) -> u64 {
        match op {
            Op::Reg(r) => self.get(r),
            Op::F32(bits) => u64::from(bits),
            Op::F64(bits) => bits,
            Op::Int(v) if class.bytes() == 8 => v as u64,
            Op::Int(v) => u64::from(v as u32),
        }
    }

    /// One instruction that is not control flow.
    fn exec(&mut self, inst: &Inst) {
        let (d, v) = match *inst {
            Inst::F(op, d, a, b) => {
                let (a, b) = (self.val(a, d.class), self.val(b, d.class));
                (d, float_op(op, d.class, a, b))
            }
            Inst::Unary(UOp::RcpApprox, d, a) => {
                let error = self.rcp_error[usize::from(d.class == Class::F64)];
                (d, rcp_approx(d.class, self.val(a, d.class), error))
            }
            Inst::Unary(op, d, a) => (d, unary(op, d.class, self.val(a, d.class))),
            Inst::Fma(d, a, b, c) => {
                let [a, b, c] = [a, b, c].map(|v| self.val(v, d.class));
                (d, fma(d.class, a, b, c))
            }
            Inst::I(op, d, a, b) => {
                let (a, b) = (self.val(a, d.class), self.val(b, d.class));
                (d, int_op(op, d.class, a, b))
            }
            Inst::Cvt(op, d, a) => (d, convert(op, self.get(a))),
            Inst::Mov(d, a) => (d, self.val(a, d.class)),
            Inst::Setp(cmp, ty, d, a, b) => {
                let class = a.class().or(b.class()).unwrap_or(Class::B32);
                let (a, b) = (self.val(a, class), self.val(b, class));
                (d, u64::from(setp(cmp, ty, class, a, b)))
            }
            Inst::AndPred(d, p, q) => (d, self.get(p) & self.get(q)),
            Inst::Selp(d, a, b, p) => {
                let chosen = if self.get(p) != 0 { a } else { b };
                (d, self.val(chosen, d.class))
            }
            Inst::Ld(d, at) => {
                let i = self.val(at.idx, Class::B32) as usize;
                let v = match at.mem {
                    Mem::Table(table) => table.data[i],
                    Mem::Local(arr) => self.locals[arr][i],
                };
                (d, v)
            }
            Inst::St(at, v) => {
                let i = self.val(at.idx, Class::B32) as usize;
                let Mem::Local(arr) = at.mem else {
                    unreachable!("only locals are stored to")
                };
                self.locals[arr][i] = self.get(v);
                return;
            }
            Inst::Label(_) => return,
            Inst::Bra(..) | Inst::Ret(_) | Inst::Call(..) => {
                unreachable!("control flow is run by Machine::run")
            }
        };
        self.put(d, v);
    }
}

fn arith<T: Add<Output = T> + Sub<Output = T> + Mul<Output = T> + Div<Output = T>>(
    op: FOp,
    a: T,
    b: T,
) -> T {
    match op {
        FOp::Add => a + b,
        FOp::Sub => a - b,
        FOp::Mul => a * b,
        FOp::Div => a / b,
    }
}

fn float_op(op: FOp, class: Class, a: u64, b: u64) -> u64 {
    if class == Class::F32 {
        let (a, b) = (f32::from_bits(a as u32), f32::from_bits(b as u32));
        u64::from(arith(op, a, b).to_bits())
    } else {
        arith(op, f64::from_bits(a), f64::from_bits(b)).to_bits()
    }
}

fn unary(op: UOp, class: Class, a: u64) -> u64 {
    let sign = 1 << (8 * class.bytes() - 1);
    match op {
        UOp::Sqrt if class == Class::F32 => u64::from(f32::from_bits(a as u32).sqrt().to_bits()),
        UOp::Sqrt => f64::from_bits(a).sqrt().to_bits(),
        UOp::Neg => a ^ sign,
        UOp::Abs => a & !sign,
        UOp::RcpApprox => unreachable!("run by rcp_approx"),
    }
}

/// `rcp.approx.ftz`: exact on ±0, ±inf and NaN, else `1/a` off by `error` (relative);
/// an f64 result truncated to its high word (the hardware estimates from the high word
/// only), an f32 one rounded to f32, subnormal inputs and results flushed.
fn rcp_approx(class: Class, a: u64, error: f64) -> u64 {
    if class == Class::F32 {
        let x = f32::from_bits(a as u32);
        let x = if x.is_subnormal() {
            0.0 * x.signum()
        } else {
            x
        };
        let y = if x == 0.0 || !x.is_finite() {
            1.0 / x
        } else {
            ((1.0 / f64::from(x)) * (1.0 + error)) as f32
        };
        let y = if y.is_subnormal() {
            0.0 * y.signum()
        } else {
            y
        };
        return u64::from(y.to_bits());
    }
    let a = f64::from_bits(a);
    if a == 0.0 || !a.is_finite() {
        return (1.0 / a).to_bits();
    }
    ((1.0 / a) * (1.0 + error)).to_bits() & !0xFFFF_FFFF
}

fn fma(class: Class, a: u64, b: u64, c: u64) -> u64 {
    if class == Class::F32 {
        let f = |v: u64| f32::from_bits(v as u32);
        u64::from(f(a).mul_add(f(b), f(c)).to_bits())
    } else {
        let f = f64::from_bits;
        f(a).mul_add(f(b), f(c)).to_bits()
    }
}

/// `op` on integers of `class`'s width, zero-extended (`put` drops the bits above it).
fn int_op(op: IOp, class: Class, a: u64, b: u64) -> u64 {
    let unused = 64 - 8 * class.bytes();
    let signed = |v: u64| ((v << unused) as i64) >> unused;
    match op {
        IOp::Add => a.wrapping_add(b),
        IOp::Sub => a.wrapping_sub(b),
        IOp::Mul => a.wrapping_mul(b),
        IOp::DivS => signed(a).wrapping_div(signed(b)) as u64,
        IOp::And => a & b,
        IOp::Or => a | b,
        IOp::Shl => a.checked_shl(b as u32).unwrap_or(0),
        IOp::ShrU => a.checked_shr(b as u32).unwrap_or(0),
        IOp::ShrS => (signed(a) >> b.min(63 - u64::from(unused))) as u64,
        IOp::MaxU => a.max(b),
    }
}

fn convert(op: Cvt, a: u64) -> u64 {
    let f32_of = |v: u64| f32::from_bits(v as u32);
    match op {
        Cvt::F64F32 => f64::from(f32_of(a)).to_bits(),
        Cvt::F32F64 => u64::from((f64::from_bits(a) as f32).to_bits()),
        Cvt::S32F32 => u64::from(f32_of(a) as i32 as u32),
        Cvt::S32F64 => u64::from(f64::from_bits(a) as i32 as u32),
        Cvt::F32S32 => u64::from((a as u32 as i32 as f32).to_bits()),
        Cvt::F64S32 => f64::from(a as u32 as i32).to_bits(),
        Cvt::FloorF64 => f64::from_bits(a).floor().to_bits(),
        Cvt::U64U32 => a & 0xFFFF_FFFF,
    }
}

fn setp(cmp: Cmp, ty: CmpTy, class: Class, a: u64, b: u64) -> bool {
    match ty {
        CmpTy::Float if class == Class::F32 => {
            let f = |v: u64| f64::from(f32::from_bits(v as u32));
            compare(cmp, f(a), f(b))
        }
        CmpTy::Float => compare(cmp, f64::from_bits(a), f64::from_bits(b)),
        CmpTy::Signed if class == Class::B32 => compare(cmp, a as u32 as i32, b as u32 as i32),
        CmpTy::Signed => compare(cmp, a as i64, b as i64),
        CmpTy::Unsigned => compare(cmp, a, b),
    }
}

fn compare<T: PartialOrd>(cmp: Cmp, a: T, b: T) -> bool {
    match cmp {
        Cmp::Lt => a < b,
        Cmp::Le => a <= b,
        Cmp::Gt => a > b,
        Cmp::Ge => a >= b,
        Cmp::Eq => a == b,
        Cmp::Ne => a != b,
    }
}
