//! The floor's hand-written PTX. Every kernel is the plainest fast form of its workload:
//! 16-byte vector loads and stores where the data allows, `.rn` f32 arithmetic with no
//! contraction (vyre-reference never fuses `a*b+c`), `.ftz` because the reference flushes
//! f32 subnormals on input and output.

/// `.version`/`.target` header for a device of compute capability `major.minor`. PTX ISA
/// 8.0 (CUDA 12.0) covers sm_50..sm_90; newer devices JIT the sm_90 PTX forward.
pub fn header(major: i32, minor: i32) -> String {
    let sm = (major * 10 + minor).min(90);
    format!(".version 8.0\n.target sm_{sm}\n.address_size 64\n\n")
}

/// `out[i] = a[i] + b[i] + salt` (wrapping u32), four elements per thread with `v4` loads,
/// a scalar tail for the last `n % 4`. Launch with `ceil(ceil(n/4)/block)` blocks.
pub fn vadd(name: &str, salt: u32) -> String {
    format!(
        r#".visible .entry {name}(
	.param .u64 pa,
	.param .u64 pb,
	.param .u64 pout,
	.param .u32 pn
)
{{
	.reg .pred %p<4>;
	.reg .b32 %r<24>;
	.reg .b64 %rd<16>;
	ld.param.u64 %rd1, [pa];
	ld.param.u64 %rd2, [pb];
	ld.param.u64 %rd3, [pout];
	ld.param.u32 %r1, [pn];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	mul.wide.u32 %rd4, %r5, 4;
	cvt.u64.u32 %rd5, %r1;
	setp.ge.u64 %p1, %rd4, %rd5;
	@%p1 bra $L_{name}_done;
	sub.u64 %rd6, %rd5, %rd4;
	shl.b64 %rd7, %rd4, 2;
	add.u64 %rd8, %rd1, %rd7;
	add.u64 %rd9, %rd2, %rd7;
	add.u64 %rd10, %rd3, %rd7;
	setp.lt.u64 %p2, %rd6, 4;
	@%p2 bra $L_{name}_tail;
	ld.global.nc.v4.u32 {{%r6, %r7, %r8, %r9}}, [%rd8];
	ld.global.nc.v4.u32 {{%r10, %r11, %r12, %r13}}, [%rd9];
	add.u32 %r6, %r6, %r10;
	add.u32 %r7, %r7, %r11;
	add.u32 %r8, %r8, %r12;
	add.u32 %r9, %r9, %r13;
	add.u32 %r6, %r6, {salt};
	add.u32 %r7, %r7, {salt};
	add.u32 %r8, %r8, {salt};
	add.u32 %r9, %r9, {salt};
	st.global.v4.u32 [%rd10], {{%r6, %r7, %r8, %r9}};
	bra $L_{name}_done;
$L_{name}_tail:
	cvt.u32.u64 %r14, %rd6;
$L_{name}_loop:
	ld.global.u32 %r6, [%rd8];
	ld.global.u32 %r10, [%rd9];
	add.u32 %r6, %r6, %r10;
	add.u32 %r6, %r6, {salt};
	st.global.u32 [%rd10], %r6;
	add.u64 %rd8, %rd8, 4;
	add.u64 %rd9, %rd9, 4;
	add.u64 %rd10, %rd10, 4;
	sub.u32 %r14, %r14, 1;
	setp.ne.u32 %p3, %r14, 0;
	@%p3 bra $L_{name}_loop;
$L_{name}_done:
	ret;
}}

"#
    )
}

/// `out[i] = a[i] + b[i] + salt`, one element per thread and no loop: the cheapest kernel
/// for the driver's JIT (the cold-compile floor). Launch with `ceil(n/block)` blocks.
pub fn vadd_scalar(name: &str, salt: u32) -> String {
    format!(
        r#".visible .entry {name}(
	.param .u64 pa,
	.param .u64 pb,
	.param .u64 pout,
	.param .u32 pn
)
{{
	.reg .pred %p<2>;
	.reg .b32 %r<12>;
	.reg .b64 %rd<12>;
	ld.param.u64 %rd1, [pa];
	ld.param.u64 %rd2, [pb];
	ld.param.u64 %rd3, [pout];
	ld.param.u32 %r1, [pn];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra $L_{name}_done;
	mul.wide.u32 %rd4, %r5, 4;
	add.u64 %rd5, %rd1, %rd4;
	add.u64 %rd6, %rd2, %rd4;
	add.u64 %rd7, %rd3, %rd4;
	ld.global.u32 %r6, [%rd5];
	ld.global.u32 %r7, [%rd6];
	add.u32 %r8, %r6, %r7;
	add.u32 %r8, %r8, {salt};
	st.global.u32 [%rd7], %r8;
$L_{name}_done:
	ret;
}}

"#
    )
}

/// `out[i] = alpha * x[i] + y[i]` in f32 as two correctly rounded operations (`mul.rn`,
/// `add.rn`, flush-to-zero), four elements per thread.
pub fn saxpy(name: &str, alpha: f32) -> String {
    let a = format!("0f{:08X}", alpha.to_bits());
    format!(
        r#".visible .entry {name}(
	.param .u64 px,
	.param .u64 py,
	.param .u64 pout,
	.param .u32 pn
)
{{
	.reg .pred %p<4>;
	.reg .b32 %r<8>;
	.reg .f32 %f<16>;
	.reg .b64 %rd<16>;
	ld.param.u64 %rd1, [px];
	ld.param.u64 %rd2, [py];
	ld.param.u64 %rd3, [pout];
	ld.param.u32 %r1, [pn];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	mul.wide.u32 %rd4, %r5, 4;
	cvt.u64.u32 %rd5, %r1;
	setp.ge.u64 %p1, %rd4, %rd5;
	@%p1 bra $L_{name}_done;
	sub.u64 %rd6, %rd5, %rd4;
	shl.b64 %rd7, %rd4, 2;
	add.u64 %rd8, %rd1, %rd7;
	add.u64 %rd9, %rd2, %rd7;
	add.u64 %rd10, %rd3, %rd7;
	setp.lt.u64 %p2, %rd6, 4;
	@%p2 bra $L_{name}_tail;
	ld.global.nc.v4.f32 {{%f1, %f2, %f3, %f4}}, [%rd8];
	ld.global.nc.v4.f32 {{%f5, %f6, %f7, %f8}}, [%rd9];
	mul.rn.ftz.f32 %f1, %f1, {a};
	mul.rn.ftz.f32 %f2, %f2, {a};
	mul.rn.ftz.f32 %f3, %f3, {a};
	mul.rn.ftz.f32 %f4, %f4, {a};
	add.rn.ftz.f32 %f1, %f1, %f5;
	add.rn.ftz.f32 %f2, %f2, %f6;
	add.rn.ftz.f32 %f3, %f3, %f7;
	add.rn.ftz.f32 %f4, %f4, %f8;
	st.global.v4.f32 [%rd10], {{%f1, %f2, %f3, %f4}};
	bra $L_{name}_done;
$L_{name}_tail:
	cvt.u32.u64 %r6, %rd6;
$L_{name}_loop:
	ld.global.f32 %f1, [%rd8];
	ld.global.f32 %f5, [%rd9];
	mul.rn.ftz.f32 %f1, %f1, {a};
	add.rn.ftz.f32 %f1, %f1, %f5;
	st.global.f32 [%rd10], %f1;
	add.u64 %rd8, %rd8, 4;
	add.u64 %rd9, %rd9, 4;
	add.u64 %rd10, %rd10, 4;
	sub.u32 %r6, %r6, 1;
	setp.ne.u32 %p3, %r6, 0;
	@%p3 bra $L_{name}_loop;
$L_{name}_done:
	ret;
}}

"#
    )
}

/// `out[0] += sum(a[0..n])` (wrapping u32): a grid-stride loop of `v4` loads, a warp
/// shuffle tree, a shared-memory block tree and one `atom.add` per block. Wrapping integer
/// addition is associative and commutative, so any order gives the reference's value.
pub fn reduce(name: &str) -> String {
    format!(
        r#".visible .entry {name}(
	.param .u64 pa,
	.param .u64 pout,
	.param .u32 pn
)
{{
{}{}}}

"#,
        reduce_threads(name),
        reduce_block(name)
    )
}

/// The reduction's body, first half: each thread's grid-stride `v4` sum, and thread
/// 0's scalar tail (the last `n % 4` elements).
fn reduce_threads(name: &str) -> String {
    format!(
        r#"	.reg .pred %p<8>;
	.reg .b32 %r<32>;
	.reg .b64 %rd<8>;
	.shared .align 4 .b32 {name}_warps[32];
	ld.param.u64 %rd1, [pa];
	ld.param.u64 %rd2, [pout];
	ld.param.u32 %r1, [pn];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	mov.u32 %r6, %nctaid.x;
	mul.lo.u32 %r7, %r6, %r3;
	shr.u32 %r8, %r1, 2;
	mov.u32 %r9, 0;
	mov.u32 %r10, %r5;
$L_{name}_loop:
	setp.ge.u32 %p1, %r10, %r8;
	@%p1 bra $L_{name}_loopend;
	mul.wide.u32 %rd3, %r10, 16;
	add.u64 %rd4, %rd1, %rd3;
	ld.global.nc.v4.u32 {{%r11, %r12, %r13, %r14}}, [%rd4];
	add.u32 %r9, %r9, %r11;
	add.u32 %r9, %r9, %r12;
	add.u32 %r9, %r9, %r13;
	add.u32 %r9, %r9, %r14;
	add.u32 %r10, %r10, %r7;
	bra $L_{name}_loop;
$L_{name}_loopend:
	setp.ne.u32 %p2, %r5, 0;
	@%p2 bra $L_{name}_warp;
	shl.b32 %r15, %r8, 2;
$L_{name}_tail:
	setp.ge.u32 %p3, %r15, %r1;
	@%p3 bra $L_{name}_warp;
	mul.wide.u32 %rd5, %r15, 4;
	add.u64 %rd6, %rd1, %rd5;
	ld.global.u32 %r16, [%rd6];
	add.u32 %r9, %r9, %r16;
	add.u32 %r15, %r15, 1;
	bra $L_{name}_tail;
"#
    )
}

/// The reduction's body, second half: the warp shuffle tree, the block tree through shared
/// memory, one `atom.add` per block.
fn reduce_block(name: &str) -> String {
    let tree = |reg: &str| {
        [16, 8, 4, 2, 1]
            .iter()
            .map(|d| {
                format!(
                    "\tshfl.sync.down.b32 %r17, {reg}, {d}, 31, -1;\n\tadd.u32 {reg}, {reg}, %r17;\n"
                )
            })
            .collect::<String>()
    };
    let tree9 = tree("%r9");
    let tree24 = tree("%r24");
    format!(
        r#"$L_{name}_warp:
{tree9}	and.b32 %r18, %r4, 31;
	shr.u32 %r19, %r4, 5;
	setp.ne.u32 %p4, %r18, 0;
	@%p4 bra $L_{name}_sync;
	mov.u32 %r20, {name}_warps;
	shl.b32 %r21, %r19, 2;
	add.u32 %r22, %r20, %r21;
	st.shared.u32 [%r22], %r9;
$L_{name}_sync:
	bar.sync 0;
	setp.ne.u32 %p5, %r19, 0;
	@%p5 bra $L_{name}_done;
	shr.u32 %r23, %r3, 5;
	mov.u32 %r24, 0;
	setp.ge.u32 %p6, %r18, %r23;
	@%p6 bra $L_{name}_w0;
	mov.u32 %r20, {name}_warps;
	shl.b32 %r21, %r18, 2;
	add.u32 %r22, %r20, %r21;
	ld.shared.u32 %r24, [%r22];
$L_{name}_w0:
{tree24}	setp.ne.u32 %p7, %r18, 0;
	@%p7 bra $L_{name}_done;
	atom.global.add.u32 %r25, [%rd2], %r24;
$L_{name}_done:
	ret;
"#
    )
}

/// `x[i] += 1` over `n` elements, one per thread: the resident sequence's small step.
pub fn step(name: &str) -> String {
    format!(
        r#".visible .entry {name}(
	.param .u64 px,
	.param .u32 pn
)
{{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [px];
	ld.param.u32 %r1, [pn];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra $L_{name}_done;
	mul.wide.u32 %rd2, %r5, 4;
	add.u64 %rd3, %rd1, %rd2;
	ld.global.u32 %r6, [%rd3];
	add.u32 %r6, %r6, 1;
	st.global.u32 [%rd3], %r6;
$L_{name}_done:
	ret;
}}

"#
    )
}

/// The floor's main module: every kernel the warm rows use.
pub fn main_module(major: i32, minor: i32, vadd_salt: u32, alpha: f32) -> String {
    let mut text = header(major, minor);
    text.push_str(&vadd("floor_vadd", vadd_salt));
    text.push_str(&saxpy("floor_saxpy", alpha));
    text.push_str(&reduce("floor_reduce"));
    text.push_str(&step("floor_step"));
    text
}

/// A one-kernel module for the cold-compile row (a fresh literal makes it new to every
/// cache, the driver's JIT cache included): the scalar kernel, which JITs fastest.
pub fn cold_module(major: i32, minor: i32, salt: u32) -> String {
    let mut text = header(major, minor);
    text.push_str(&vadd_scalar("floor_vadd", salt));
    text
}

/// `out[i] = a[i] * s[0] + b[i]` in f32 (`mul.rn.ftz` then `add.rn.ftz`, as
/// `programs::axpb`), one element per thread: the artifact rows' one-kernel program.
pub fn axpb(name: &str) -> String {
    format!(
        r#".visible .entry {name}(
	.param .u64 pa,
	.param .u64 pb,
	.param .u64 ps,
	.param .u64 pout,
	.param .u32 pn
)
{{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .f32 %f<6>;
	.reg .b64 %rd<10>;
	ld.param.u64 %rd1, [pa];
	ld.param.u64 %rd2, [pb];
	ld.param.u64 %rd3, [ps];
	ld.param.u64 %rd4, [pout];
	ld.param.u32 %r1, [pn];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra $L_{name}_done;
	mul.wide.u32 %rd5, %r5, 4;
	add.u64 %rd6, %rd1, %rd5;
	add.u64 %rd7, %rd2, %rd5;
	add.u64 %rd8, %rd4, %rd5;
	ld.global.nc.f32 %f1, [%rd6];
	ld.global.nc.f32 %f2, [%rd7];
	ld.global.nc.f32 %f3, [%rd3];
	mul.rn.ftz.f32 %f4, %f1, %f3;
	add.rn.ftz.f32 %f5, %f4, %f2;
	st.global.f32 [%rd8], %f5;
$L_{name}_done:
	ret;
}}

"#
    )
}

/// A module with [`axpb`] as `floor_axpb`.
pub fn axpb_module(major: i32, minor: i32) -> String {
    let mut text = header(major, minor);
    text.push_str(&axpb("floor_axpb"));
    text
}

/// `y[i] = x[i] * c + d` (wrapping u32), one element per thread: the first kernel shape of
/// `programs::chain_kernel`, in a module of its own (`floor_chain`). Fresh literals make
/// it new to every cache: the cold rows' "one module's JIT".
pub fn chain_module(major: i32, minor: i32, c: u32, d: u32) -> String {
    let mut text = header(major, minor);
    text.push_str(&format!(
        r#".visible .entry floor_chain(
	.param .u64 px,
	.param .u64 py,
	.param .u32 pn
)
{{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<6>;
	ld.param.u64 %rd1, [px];
	ld.param.u64 %rd2, [py];
	ld.param.u32 %r1, [pn];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra $L_floor_chain_done;
	mul.wide.u32 %rd3, %r5, 4;
	add.u64 %rd4, %rd1, %rd3;
	add.u64 %rd5, %rd2, %rd3;
	ld.global.nc.u32 %r6, [%rd4];
	mad.lo.u32 %r7, %r6, {c}, {d};
	st.global.u32 [%rd5], %r7;
$L_floor_chain_done:
	ret;
}}

"#
    ));
    text
}
