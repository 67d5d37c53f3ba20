//! Test-only executor for the [`super::ptx`] instruction lists, with PTX semantics
//! (`.rn` IEEE arithmetic with subnormals, saturating `cvt.rzi`, clamped shift counts).
//! It checks a port's logic against `libm` on the CPU; the GPU sweep checks the PTX.

use super::ptx::{Class, Cmp, CmpTy, Cvt, FOp, Func, IOp, Inst, Op, R};
use std::collections::HashMap;

/// The functions of one module, ready to run.
pub(crate) struct Machine {
    funcs: HashMap<&'static str, (Func, HashMap<u32, usize>)>,
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
        Machine { funcs }
    }

    /// Run the public routine `name` on one f32.
    pub(crate) fn call_f32(&self, name: &str, x: f32) -> f32 {
        let out = self.run(name, &[u64::from(x.to_bits())]);
        f32::from_bits(out[0] as u32)
    }

    /// Run `name`; arguments and results are raw register bits.
    pub(crate) fn run(&self, name: &str, args: &[u64]) -> Vec<u64> {
        let (f, labels) = self
            .funcs
            .get(name)
            .unwrap_or_else(|| panic!("no function {name}"));
        let mut regs: [Vec<u64>; 5] = Default::default();
        for class in Class::ALL {
            regs[class.slot()] = vec![0; f.counts[class.slot()] as usize];
        }
        let mut locals: Vec<Vec<u64>> = f.locals.iter().map(|l| vec![0; l.len as usize]).collect();
        for (p, &v) in f.params.iter().zip(args) {
            regs[p.class.slot()][p.id as usize] = v;
        }
        let mut pc = 0usize;
        let mut steps = 0u64;
        loop {
            steps += 1;
            assert!(steps < 1_000_000, "{name}: runaway loop");
            let inst = f
                .body
                .get(pc)
                .unwrap_or_else(|| panic!("{name}: fell off the end"));
            pc += 1;
            match inst {
                Inst::F { op, d, a, b } => {
                    let (a, b) = (val(&regs, *a, d.class), val(&regs, *b, d.class));
                    let v = if d.class == Class::F32 {
                        let (a, b) = (f32::from_bits(a as u32), f32::from_bits(b as u32));
                        u64::from(
                            match op {
                                FOp::Add => a + b,
                                FOp::Sub => a - b,
                                FOp::Mul => a * b,
                                FOp::Div => a / b,
                            }
                            .to_bits(),
                        )
                    } else {
                        let (a, b) = (f64::from_bits(a), f64::from_bits(b));
                        match op {
                            FOp::Add => a + b,
                            FOp::Sub => a - b,
                            FOp::Mul => a * b,
                            FOp::Div => a / b,
                        }
                        .to_bits()
                    };
                    put(&mut regs, *d, v);
                }
                Inst::Sqrt { d, a } => {
                    let a = val(&regs, *a, d.class);
                    let v = if d.class == Class::F32 {
                        u64::from(f32::from_bits(a as u32).sqrt().to_bits())
                    } else {
                        f64::from_bits(a).sqrt().to_bits()
                    };
                    put(&mut regs, *d, v);
                }
                Inst::Neg { d, a } => {
                    let a = val(&regs, *a, d.class);
                    put(&mut regs, *d, a ^ sign_bit(d.class));
                }
                Inst::Abs { d, a } => {
                    let a = val(&regs, *a, d.class);
                    put(&mut regs, *d, a & !sign_bit(d.class));
                }
                Inst::I { op, d, a, b } => {
                    let (a, b) = (val(&regs, *a, d.class), val(&regs, *b, d.class));
                    let v = if d.class == Class::B32 {
                        let (a, b) = (a as u32, b as u32);
                        u64::from(match op {
                            IOp::Add => a.wrapping_add(b),
                            IOp::Sub => a.wrapping_sub(b),
                            IOp::Mul => a.wrapping_mul(b),
                            IOp::DivS => (a as i32).wrapping_div(b as i32) as u32,
                            IOp::And => a & b,
                            IOp::Or => a | b,
                            IOp::Shl => a.checked_shl(b).unwrap_or(0),
                            IOp::ShrU => a.checked_shr(b).unwrap_or(0),
                            IOp::ShrS => ((a as i32) >> b.min(31)) as u32,
                        })
                    } else {
                        match op {
                            IOp::Add => a.wrapping_add(b),
                            IOp::Sub => a.wrapping_sub(b),
                            IOp::Mul => a.wrapping_mul(b),
                            IOp::DivS => (a as i64).wrapping_div(b as i64) as u64,
                            IOp::And => a & b,
                            IOp::Or => a | b,
                            IOp::Shl => a.checked_shl(b as u32).unwrap_or(0),
                            IOp::ShrU => a.checked_shr(b as u32).unwrap_or(0),
                            IOp::ShrS => ((a as i64) >> b.min(63)) as u64,
                        }
                    };
                    put(&mut regs, *d, v);
                }
                Inst::Cvt { op, d, a } => {
                    let a = get(&regs, *a);
                    let f32_of = |v: u64| f32::from_bits(v as u32);
                    let v = match op {
                        Cvt::F64F32 => f64::from(f32_of(a)).to_bits(),
                        Cvt::F32F64 => u64::from((f64::from_bits(a) as f32).to_bits()),
                        Cvt::S32F32 => u64::from(f32_of(a) as i32 as u32),
                        Cvt::S32F64 => u64::from(f64::from_bits(a) as i32 as u32),
                        Cvt::F32S32 => u64::from((a as u32 as i32 as f32).to_bits()),
                        Cvt::F64S32 => f64::from(a as u32 as i32).to_bits(),
                        Cvt::FloorF64 => f64::from_bits(a).floor().to_bits(),
                        Cvt::U64U32 => a & 0xFFFF_FFFF,
                    };
                    put(&mut regs, *d, v);
                }
                Inst::Mov { d, a } => {
                    let v = val(&regs, *a, d.class);
                    put(&mut regs, *d, v);
                }
                Inst::Setp { cmp, ty, d, a, b } => {
                    let class = a.class().or(b.class()).unwrap_or(Class::B32);
                    let (a, b) = (val(&regs, *a, class), val(&regs, *b, class));
                    let v = match ty {
                        CmpTy::Float => {
                            let (a, b) = if class == Class::F32 {
                                (
                                    f64::from(f32::from_bits(a as u32)),
                                    f64::from(f32::from_bits(b as u32)),
                                )
                            } else {
                                (f64::from_bits(a), f64::from_bits(b))
                            };
                            compare(*cmp, a, b)
                        }
                        CmpTy::Signed if class == Class::B32 => {
                            compare(*cmp, a as u32 as i32, b as u32 as i32)
                        }
                        CmpTy::Signed => compare(*cmp, a as i64, b as i64),
                        CmpTy::Unsigned => compare(*cmp, a, b),
                    };
                    put(&mut regs, *d, u64::from(v));
                }
                Inst::Selp { d, a, b, p } => {
                    let v = if get(&regs, *p) != 0 {
                        val(&regs, *a, d.class)
                    } else {
                        val(&regs, *b, d.class)
                    };
                    put(&mut regs, *d, v);
                }
                Inst::Bra { to, when } => {
                    let taken = match when {
                        None => true,
                        Some((p, value)) => (get(&regs, *p) != 0) == *value,
                    };
                    if taken {
                        pc = labels[to];
                    }
                }
                Inst::Label(_) => {}
                Inst::Ret(vals) => return vals.iter().map(|r| get(&regs, *r)).collect(),
                Inst::Call { callee, args, rets } => {
                    let args: Vec<u64> = args.iter().map(|r| get(&regs, *r)).collect();
                    let out = self.run(callee, &args);
                    for (r, v) in rets.iter().zip(out) {
                        put(&mut regs, *r, v);
                    }
                }
                Inst::LdTable { d, table, idx, .. } => {
                    let i = val(&regs, *idx, Class::B32) as usize;
                    let mut v = table.data[i];
                    if table.class != Class::F64 {
                        v &= 0xFFFF_FFFF;
                    }
                    put(&mut regs, *d, v);
                }
                Inst::LdLocal { d, arr, idx, .. } => {
                    let i = val(&regs, *idx, Class::B32) as usize;
                    put(&mut regs, *d, locals[*arr][i]);
                }
                Inst::StLocal { arr, idx, v, .. } => {
                    let i = val(&regs, *idx, Class::B32) as usize;
                    locals[*arr][i] = get(&regs, *v);
                }
            }
        }
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

fn sign_bit(class: Class) -> u64 {
    if class == Class::F32 {
        0x8000_0000
    } else {
        0x8000_0000_0000_0000
    }
}

fn get(regs: &[Vec<u64>; 5], r: R) -> u64 {
    regs[r.class.slot()][r.id as usize]
}

fn put(regs: &mut [Vec<u64>; 5], r: R, v: u64) {
    let v = match r.class {
        Class::B32 | Class::F32 => v & 0xFFFF_FFFF,
        _ => v,
    };
    regs[r.class.slot()][r.id as usize] = v;
}

/// An operand's bits in an instruction of width `class`.
fn val(regs: &[Vec<u64>; 5], op: Op, class: Class) -> u64 {
    match op {
        Op::Reg(r) => get(regs, r),
        Op::F32(bits) => u64::from(bits),
        Op::F64(bits) => bits,
        Op::Int(v) => match class {
            Class::B64 | Class::F64 => v as u64,
            _ => u64::from(v as u32),
        },
    }
}
