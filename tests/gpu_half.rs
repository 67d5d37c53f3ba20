//! F16/BF16 conversions against vyre-reference 0.7.2, exhaustively:
//!
//! * every one of the 2^16 f16 and 2^16 bf16 bit patterns loaded and stored back, and
//!   loaded and cast to f32, on the GPU against the reference interpreter itself;
//! * every one of the 2^32 f32 bit patterns cast to F16/BF16 and stored into an F16/BF16
//!   buffer, and cast to F16/BF16 and back to f32 (the validator admits only half-typed
//!   values into half buffers, so a store of an f32 goes through the cast, whose rounding
//!   the store repeats), in dispatches of 2^26, against a verbatim port of the reference's
//!   conversion functions, which a CPU test checks against the reference interpreter on
//!   every class of input;
//! * the same 2^32 patterns through the integer bf16 rounding emitted below sm_80, by a
//!   backend that emits sm_75 PTX (the driver JIT-compiles it for the device).
//!
//! Prints one line per check (`f32->f16 store: 4294967296 checked, 0 differing`). Without
//! a GPU the GPU tests print `skipped: no CUDA device`.

mod common;

use std::time::Instant;
use vyre_cuda::{CudaBackend, CudaOptions};
use vyre_driver::DispatchConfig;
use vyre_foundation::ir::{BinOp, BufferDecl, DataType, Expr, Node, Program};

/// Verbatim port of vyre-reference 0.7.2's `src/float16.rs` and of `canonical_f32`
/// (`src/execution/typed_ops/float_ops.rs`); `reference_port_matches_the_interpreter`
/// keeps it honest.
mod port {
    pub fn canonical_f32(value: f32) -> f32 {
        if value.is_nan() {
            f32::from_bits(0x7FC0_0000)
        } else if value.is_subnormal() {
            f32::from_bits(value.to_bits() & 0x8000_0000)
        } else {
            value
        }
    }

    pub fn bf16_to_f32(bits: u16) -> f32 {
        canonical_f32(f32::from_bits(u32::from(bits) << 16))
    }

    pub fn f32_to_bf16(value: f32) -> u16 {
        let bits = canonical_f32(value).to_bits();
        if bits & 0x7f80_0000 == 0x7f80_0000 && bits & 0x007f_ffff != 0 {
            return 0x7fc0;
        }
        let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1));
        (rounded >> 16) as u16
    }

    pub fn f16_to_f32(bits: u16) -> f32 {
        let sign = u32::from(bits & 0x8000) << 16;
        let exponent = u32::from((bits >> 10) & 0x1f);
        let fraction = u32::from(bits & 0x03ff);
        let result = match (exponent, fraction) {
            (0, 0) => sign,
            (0, _) => {
                let leading = 31 - fraction.leading_zeros();
                let shift = 10 - leading;
                let normalized_fraction = (fraction << shift) & 0x03ff;
                let unbiased = -14_i32 - i32::try_from(shift).expect("bounded half shift");
                sign | (u32::try_from(unbiased + 127).expect("half exponent fits") << 23)
                    | (normalized_fraction << 13)
            }
            (0x1f, 0) => sign | 0x7f80_0000,
            (0x1f, _) => 0x7fc0_0000,
            _ => sign | ((exponent + 112) << 23) | (fraction << 13),
        };
        canonical_f32(f32::from_bits(result))
    }

    pub fn f32_to_f16(value: f32) -> u16 {
        let bits = canonical_f32(value).to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let exponent = ((bits >> 23) & 0xff) as i32;
        let fraction = bits & 0x007f_ffff;
        if exponent == 0xff {
            return if fraction == 0 { sign | 0x7c00 } else { 0x7e00 };
        }
        if exponent == 0 {
            return sign;
        }
        let unbiased = exponent - 127;
        if unbiased > 15 {
            return sign | 0x7c00;
        }
        if unbiased >= -14 {
            let mut half_exponent =
                u16::try_from(unbiased + 15).expect("normal half exponent fits");
            let rounded_fraction = round_shift_right(fraction, 13);
            if rounded_fraction == 0x400 {
                half_exponent += 1;
                if half_exponent >= 0x1f {
                    return sign | 0x7c00;
                }
                return sign | (half_exponent << 10);
            }
            return sign | (half_exponent << 10) | rounded_fraction as u16;
        }
        if unbiased < -25 {
            return sign;
        }
        let significand = 0x0080_0000 | fraction;
        let shift = u32::try_from(-unbiased - 1).expect("subnormal half shift fits");
        let rounded = round_shift_right(significand, shift);
        if rounded >= 0x400 {
            sign | 0x0400
        } else {
            sign | rounded as u16
        }
    }

    fn round_shift_right(value: u32, shift: u32) -> u32 {
        if shift == 0 {
            return value;
        }
        let quotient = value >> shift;
        let mask = (1_u32 << shift) - 1;
        let remainder = value & mask;
        let halfway = 1_u32 << (shift - 1);
        quotient + u32::from(remainder > halfway || (remainder == halfway && quotient & 1 == 1))
    }
}

/// One of the two formats, with the port's view of it.
#[derive(Clone, Copy)]
struct Format {
    ty: fn() -> DataType,
    name: &'static str,
    to_half: fn(f32) -> u16,
    to_f32: fn(u16) -> f32,
}

const F16: Format = Format {
    ty: || DataType::F16,
    name: "f16",
    to_half: port::f32_to_f16,
    to_f32: port::f16_to_f32,
};

const BF16: Format = Format {
    ty: || DataType::BF16,
    name: "bf16",
    to_half: port::f32_to_bf16,
    to_f32: port::bf16_to_f32,
};

/// The f32 an F32 buffer holds for the input bits (the reference canonicalises loads).
fn loaded(bits: u32) -> f32 {
    port::canonical_f32(f32::from_bits(bits))
}

/// `Store(half, Cast(half, a[i]))`: the cast rounds and widens, the store rounds again.
fn stored(format: Format, bits: u32) -> u16 {
    let cast = (format.to_f32)((format.to_half)(loaded(bits)));
    (format.to_half)(cast)
}

/// `Store(f32, Cast(F32, Cast(half, a[i])))`: the F32 store canonicalises.
fn cast_back(format: Format, bits: u32) -> u32 {
    let cast = (format.to_f32)((format.to_half)(loaded(bits)));
    port::canonical_f32(cast).to_bits()
}

/// `out[i] = value` for `i < n`, from input `a` of `input` elements.
fn program(input: DataType, out: DataType, n: u32, value: Expr) -> Program {
    let gid = Expr::InvocationId { axis: 0 };
    Program::wrapped(
        vec![
            BufferDecl::read("a", 0, input).with_count(n),
            BufferDecl::output("out", 1, out).with_count(n),
        ],
        [256, 1, 1],
        vec![Node::if_then(
            Expr::BinOp {
                op: BinOp::Lt,
                left: Box::new(gid.clone()),
                right: Box::new(Expr::u32(n)),
            },
            vec![Node::store("out", gid, value)],
        )],
    )
}

fn a() -> Expr {
    Expr::load("a", Expr::InvocationId { axis: 0 })
}

fn cast(target: DataType, value: Expr) -> Expr {
    Expr::Cast {
        target,
        value: Box::new(value),
    }
}

/// One exhaustive f32 check: a program over f32 inputs and the port's expected output.
struct Check {
    name: String,
    program: Program,
    format: Format,
    /// The output is a half buffer (2-byte elements), else an f32 buffer.
    half_out: bool,
    /// The expected output element for the input bits, from the port.
    port: fn(Format, u32) -> u32,
}

impl Check {
    fn want(&self, bits: u32) -> u32 {
        (self.port)(self.format, bits)
    }
}

/// The two f32 checks of a format: the store into a half buffer, and the cast back to f32.
fn f32_checks(format: Format, n: u32) -> [Check; 2] {
    let half = (format.ty)();
    [
        Check {
            name: format!("f32->{} store", format.name),
            program: program(DataType::F32, half.clone(), n, cast(half.clone(), a())),
            format,
            half_out: true,
            port: |format, bits| u32::from(stored(format, bits)),
        },
        Check {
            name: format!("f32->{}->f32 cast", format.name),
            program: program(
                DataType::F32,
                DataType::F32,
                n,
                cast(DataType::F32, cast(half, a())),
            ),
            format,
            half_out: false,
            port: cast_back,
        },
    ]
}

/// The f32 bit patterns the port is checked on: every bf16-exact pattern, every bf16 tie
/// and its neighbours, every f16-exact value with its f16 ties and neighbours, the f16
/// subnormal range, NaNs of both signs, infinities, f32 subnormals, the overflow
/// boundaries and random patterns.
fn port_sample() -> Vec<u32> {
    let mut out = Vec::new();
    for h in 0..=u16::MAX {
        let high = u32::from(h) << 16;
        out.extend([high, high | 0x7FFF, high | 0x8000, high | 0x8001, high | 1]);
        let exact = port::f16_to_f32(h).to_bits();
        for offset in [0x0FFF, 0x1000, 0x1001, 0x2000, 0x3000] {
            out.push(exact.wrapping_add(offset));
        }
    }
    let mut rng = common::gpu::Rng::new(0x16);
    // The f16 subnormal and underflow range, both signs.
    out.extend((0..1u32 << 16).map(|i| {
        let exponent = 100 + i % 16;
        (i & 0x8000_0000) | (exponent << 23) | (rng.next_u32() & 0x007F_FFFF)
    }));
    out.extend((0..1u32 << 16).map(|_| rng.next_u32()));
    for edge in [
        0x477F_E000u32,
        0x477F_F000,
        0x7F7F_8000,
        0x7F80_0000,
        0x3300_0000,
    ] {
        for d in 0..64u32 {
            out.extend([edge - 32 + d, (edge - 32 + d) | 0x8000_0000]);
        }
    }
    out
}

fn u32_le(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

fn u16_le(bytes: &[u8]) -> impl Iterator<Item = u16> + '_ {
    bytes
        .chunks_exact(2)
        .map(|w| u16::from_le_bytes([w[0], w[1]]))
}

/// Outputs of the reference interpreter for `program` (one input), as u32 words of the
/// f32 output or u16 halves of a half output.
fn reference_words(program: &Program, input: Vec<u8>, half_out: bool) -> Vec<u32> {
    let outputs = common::gpu::reference(program, &[input]).expect("the reference runs it");
    if half_out {
        u16_le(&outputs[0]).map(u32::from).collect()
    } else {
        u32_le(&outputs[0]).collect()
    }
}

#[test]
fn reference_port_matches_the_interpreter() {
    let sample = port_sample();
    let n = sample.len() as u32;
    let input: Vec<u8> = sample.iter().flat_map(|b| b.to_le_bytes()).collect();
    let mut failures = Vec::new();
    for format in [F16, BF16] {
        for check in f32_checks(format, n) {
            let started = Instant::now();
            let want = reference_words(&check.program, input.clone(), check.half_out);
            let differing: Vec<(u32, u32, u32)> = sample
                .iter()
                .zip(&want)
                .filter(|(bits, want)| check.want(**bits) != **want)
                .map(|(bits, want)| (*bits, *want, check.want(*bits)))
                .collect();
            println!(
                "port vs reference, {}: {n} checked, {} differing ({:.1} s)",
                check.name,
                differing.len(),
                started.elapsed().as_secs_f64()
            );
            if let Some(first) = differing.first() {
                failures.push(format!(
                    "{}: {first:#x?} (input, reference, port)",
                    check.name
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every 16-bit pattern of `format`: loaded and stored back, loaded and cast to f32; GPU
/// against the reference interpreter.
fn check_every_half_pattern(backend: &CudaBackend, format: Format) -> Vec<String> {
    let n = 1u32 << 16;
    let half = (format.ty)();
    let input: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
    let checks = [
        (
            format!("{0}->{0} load/store", format.name),
            program(half.clone(), half.clone(), n, a()),
        ),
        (
            format!("{}->f32 load/cast", format.name),
            program(half, DataType::F32, n, cast(DataType::F32, a())),
        ),
    ];
    let mut failures = Vec::new();
    for (name, program) in checks {
        let want = common::gpu::reference(&program, std::slice::from_ref(&input))
            .expect("the reference runs it");
        let got = backend
            .dispatch(
                &program,
                std::slice::from_ref(&input),
                &DispatchConfig::default(),
            )
            .unwrap_or_else(|e| panic!("{name}: dispatch failed: {e}"));
        let width = want[0].len() / n as usize;
        let differing: Vec<usize> = (0..n as usize)
            .filter(|i| {
                let at = i * width..(i + 1) * width;
                want[0][at.clone()] != got[0][at]
            })
            .collect();
        println!("{name}: {n} checked, {} differing", differing.len());
        for &i in differing.iter().take(8) {
            let at = i * width..(i + 1) * width;
            println!(
                "    {name}({i:#06x}) want {:02x?} got {:02x?}",
                &want[0][at.clone()],
                &got[0][at]
            );
        }
        if !differing.is_empty() {
            failures.push(format!("{name}: {} differing", differing.len()));
        }
    }
    failures
}

#[test]
fn every_half_pattern_loads_like_the_reference() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    let mut failures = check_every_half_pattern(backend, F16);
    failures.extend(check_every_half_pattern(backend, BF16));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Elements per dispatch of the exhaustive f32 sweep.
const CHUNK: u32 = 1 << 26;

/// An input whose output differs: (input bits, expected, got).
type Mismatch = (u32, u32, u32);

/// Every f32 bit pattern through `check`, in dispatches of [`CHUNK`], compared with the
/// port on all cores; returns the number differing.
fn sweep_f32(backend: &CudaBackend, check: &Check, tag: &str) -> u64 {
    let started = Instant::now();
    let name = format!("{}{tag}", check.name);
    let config = DispatchConfig::default();
    let mut input = vec![0u8; CHUNK as usize * 4];
    let mut outputs: Vec<Vec<u8>> = Vec::new();
    let mut differing = 0u64;
    let mut first: Vec<Mismatch> = Vec::new();
    for chunk in 0..(1u64 << 32) / u64::from(CHUNK) {
        let start = (chunk * u64::from(CHUNK)) as u32;
        for (k, w) in input.chunks_exact_mut(4).enumerate() {
            w.copy_from_slice(&(start + k as u32).to_le_bytes());
        }
        backend
            .dispatch_borrowed_into(&check.program, &[&input], &config, &mut outputs)
            .unwrap_or_else(|e| panic!("{name}: dispatch failed: {e}"));
        let (count, examples) = compare_chunk(check, start, &outputs[0]);
        differing += count;
        first.extend(examples);
    }
    println!(
        "{name}: {} checked, {differing} differing ({:.1} s)",
        1u64 << 32,
        started.elapsed().as_secs_f64()
    );
    for (bits, want, got) in first.iter().take(8) {
        println!("    {name}({bits:#010x}) want {want:#x} got {got:#x}");
    }
    differing
}

/// Compare one dispatch's output (inputs `start..`) with the port on all cores: the
/// number differing and up to 8 examples.
fn compare_chunk(check: &Check, start: u32, output: &[u8]) -> (u64, Vec<Mismatch>) {
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
    let width = if check.half_out { 2 } else { 4 };
    let elements = output.len() / width;
    let per = elements.div_ceil(threads);
    std::thread::scope(|s| {
        let workers: Vec<_> = output
            .chunks(per * width)
            .enumerate()
            .map(|(t, bytes)| {
                s.spawn(move || {
                    let base = start + (t * per) as u32;
                    let mut count = 0u64;
                    let mut examples = Vec::new();
                    for (k, got) in bytes.chunks_exact(width).enumerate() {
                        let got = match width {
                            2 => u32::from(u16::from_le_bytes([got[0], got[1]])),
                            _ => u32::from_le_bytes([got[0], got[1], got[2], got[3]]),
                        };
                        let bits = base + k as u32;
                        let want = check.want(bits);
                        if got != want {
                            count += 1;
                            if examples.len() < 8 {
                                examples.push((bits, want, got));
                            }
                        }
                    }
                    (count, examples)
                })
            })
            .collect();
        let mut total = (0u64, Vec::new());
        for worker in workers {
            let (count, examples) = worker.join().expect("comparison thread");
            total.0 += count;
            total.1.extend(examples);
        }
        total.1.truncate(8);
        total
    })
}

/// The exhaustive f32 checks of `formats` on `backend`, named with `tag`.
fn sweep_formats(backend: &CudaBackend, formats: &[Format], tag: &str) -> Vec<String> {
    let mut failures = Vec::new();
    for &format in formats {
        for check in f32_checks(format, CHUNK) {
            let differing = sweep_f32(backend, &check, tag);
            if differing > 0 {
                failures.push(format!("{}{tag}: {differing} differing", check.name));
            }
        }
    }
    failures
}

#[test]
fn every_f32_pattern_rounds_like_the_reference() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    let failures = sweep_formats(backend, &[F16, BF16], "");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Below sm_80 bf16 rounds with integer instructions instead of `cvt.rn.bf16.f32`: emit
/// for sm_75 and run that PTX on this device.
#[test]
fn every_f32_pattern_rounds_like_the_reference_through_sm75_integer_bf16() {
    let Some(native) = common::gpu::backend() else {
        return;
    };
    let options = CudaOptions {
        emit_sm: Some(75),
        ..CudaOptions::from_env().expect("options")
    };
    let backend = common::gpu::fresh(options).expect("a second backend");
    assert_eq!(backend.target().sm(), 75);
    let [store, _] = f32_checks(BF16, CHUNK);
    let store = store.program;
    let config = DispatchConfig::default();
    let sm75 = backend.emit(&store, &config).expect("emits").ptx;
    assert!(
        sm75.contains("bfe.u32") && !sm75.contains("cvt.rn.bf16.f32"),
        "the sm_75 kernel does not round bf16 with integers:\n{sm75}"
    );
    if native.target().sm() >= 80 {
        let own = native.emit(&store, &config).expect("emits").ptx;
        assert!(own.contains("cvt.rn.bf16.f32"), "{own}");
    }
    let failures = sweep_formats(&backend, &[BF16], " (sm_75 integer rounding)");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
