//! The floor's reductions over one f32 vector (`n % 4 == 0`): the grid-wide forms a
//! hand-written kernel takes of vyre-libs' RMS norm, layer norm and softmax, whose programs
//! run the whole vector in one workgroup. Each is a few launches over `G` blocks:
//!
//! 1. a partials kernel: each thread's grid-stride fold over `v4` loads, then the block's
//!    tree (warp shuffles, then one warp over the warps' results); block `b` writes
//!    `partials[b]` (and `partials[G + b]` for a second moment);
//! 2. the next kernel: each block folds the `G` partials itself (they are few and in L2),
//!    thread 0 derives the statistic and shares it, the grid goes on (softmax: a second
//!    partials pass of `exp(x - max)`; the norms and softmax's last launch: the output,
//!    `v4` loads and stores).
//!
//! `.rn` arithmetic without contraction, like the reference; the sums' order differs from
//! the programs' and softmax's `exp` is `ex2.approx`, so the floor is checked to a relative
//! tolerance, not bit for bit.

/// One warp's shuffle tree of `op` (`add.rn.f32`, `max.f32`) over f32 `reg` (lane 0 ends
/// with the warp's result).
fn tree(reg: &str, op: &str) -> String {
    [16, 8, 4, 2, 1]
        .iter()
        .map(|d| {
            format!("\tshfl.sync.down.b32 %f9, {reg}, {d}, 31, -1;\n\t{op} {reg}, {reg}, %f9;\n")
        })
        .collect()
}

/// The block's fold (`op`, identity `zero`) of each thread's f32 `reg`, into `reg` of
/// thread 0, through `{tag}_warps` (declared by [`shared_decls`]). Uses %r20-%r24,
/// %p10-%p12, %f9; every thread of the block comes here.
fn block_fold(tag: &str, reg: &str, op: &str, zero: &str) -> String {
    let lanes = tree(reg, op);
    format!(
        r#"{lanes}	and.b32 %r20, %r4, 31;
	shr.u32 %r21, %r4, 5;
	setp.ne.u32 %p10, %r20, 0;
	@%p10 bra $L_{tag}_stored;
	mov.u32 %r22, {tag}_warps;
	shl.b32 %r23, %r21, 2;
	add.u32 %r22, %r22, %r23;
	st.shared.f32 [%r22], {reg};
$L_{tag}_stored:
	bar.sync 0;
	mov.f32 {reg}, {zero};
	setp.ne.u32 %p11, %r21, 0;
	@%p11 bra $L_{tag}_folded;
	shr.u32 %r24, %r3, 5;
	setp.ge.u32 %p12, %r20, %r24;
	@%p12 bra $L_{tag}_lane;
	mov.u32 %r22, {tag}_warps;
	shl.b32 %r23, %r20, 2;
	add.u32 %r22, %r22, %r23;
	ld.shared.f32 {reg}, [%r22];
$L_{tag}_lane:
{lanes}$L_{tag}_folded:
"#
    )
}

const SUM: (&str, &str) = ("add.rn.f32", "0f00000000");
/// `max.f32`, from `f32::MIN` (what the softmax program starts its max from).
const MAX: (&str, &str) = ("max.f32", "0fFF7FFFFF");

/// Fold `G` (`%r9`) partials at `%rd{base}` into `reg` (each thread a strided share, then
/// the block's fold), and share thread 0's result with the block through `{tag}_value`.
fn fold_partials(tag: &str, base: u32, reg: &str, (op, zero): (&str, &str)) -> String {
    let block = block_fold(tag, reg, op, zero);
    format!(
        r#"	mov.f32 {reg}, {zero};
	mov.u32 %r10, %r4;
$L_{tag}_parts:
	setp.ge.u32 %p1, %r10, %r9;
	@%p1 bra $L_{tag}_block;
	mul.wide.u32 %rd4, %r10, 4;
	add.u64 %rd5, %rd{base}, %rd4;
	ld.global.f32 %f2, [%rd5];
	{op} {reg}, {reg}, %f2;
	add.u32 %r10, %r10, %r3;
	bra $L_{tag}_parts;
$L_{tag}_block:
{block}{share}"#,
        share = share(tag, reg)
    )
}

/// Thread 0's `reg` to every thread of the block, through `{tag}_value`.
fn share(tag: &str, reg: &str) -> String {
    format!(
        r#"	setp.ne.u32 %p13, %r4, 0;
	@%p13 bra $L_{tag}_shared;
	st.shared.f32 [{tag}_value], {reg};
$L_{tag}_shared:
	bar.sync 0;
	ld.shared.f32 {reg}, [{tag}_value];
"#
    )
}

/// The shared memory of the folds tagged `tags`.
fn shared_decls(tags: &[&str]) -> String {
    tags.iter()
        .map(|t| {
            format!("\t.shared .align 4 .f32 {t}_warps[32];\n\t.shared .align 4 .f32 {t}_value;\n")
        })
        .collect()
}

/// A kernel: `.entry name(params)`, the registers, the shared memory of `tags`, the
/// common prologue (`%rd1` x, `%r1` n, `%r2`-`%r4` block, block size and thread,
/// `%r5` the thread's first `v4` group, `%r7` the grid's stride, `%r8` the groups), `body`.
fn kernel(name: &str, params: &[&str], tags: &[&str], body: &str) -> String {
    let params = params.join(",\n\t");
    let shared = shared_decls(tags);
    format!(
        r#".visible .entry {name}(
	.param .u64 px,
	.param .u32 pn,
	{params}
)
{{
	.reg .pred %p<16>;
	.reg .b32 %r<32>;
	.reg .b64 %rd<16>;
	.reg .f32 %f<24>;
{shared}	ld.param.u64 %rd1, [px];
	ld.param.u32 %r1, [pn];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	mov.u32 %r6, %nctaid.x;
	mul.lo.u32 %r7, %r6, %r3;
	shr.u32 %r8, %r1, 2;
	mov.u64 %rd7, 0;
{body}	ret;
}}

"#
    )
}

/// The grid-stride loop over `v4` groups: `%f11`-`%f14` hold x's four elements, `%rd6`
/// their address and `%rd8` the same offset from `%rd7` (the output), for `body`.
fn v4_loop(tag: &str, body: &str) -> String {
    format!(
        r#"$L_{tag}_loop:
	setp.ge.u32 %p3, %r5, %r8;
	@%p3 bra $L_{tag}_end;
	mul.wide.u32 %rd5, %r5, 16;
	add.u64 %rd6, %rd1, %rd5;
	add.u64 %rd8, %rd7, %rd5;
	ld.global.nc.v4.f32 {{%f11, %f12, %f13, %f14}}, [%rd6];
{body}	add.u32 %r5, %r5, %r7;
	bra $L_{tag}_loop;
$L_{tag}_end:
"#
    )
}

/// Thread 0 writes `reg` to the partials array at `%rd{base}`: at `[block]`, or at
/// `[G + block]` for a second moment (`second`).
fn write_partial(tag: &str, reg: &str, base: u32, second: bool) -> String {
    let index = match second {
        true => "\tadd.u32 %r11, %r2, %r6;\n",
        false => "\tmov.u32 %r11, %r2;\n",
    };
    format!(
        r#"	setp.ne.u32 %p2, %r4, 0;
	@%p2 bra $L_{tag}_written;
{index}	mul.wide.u32 %rd4, %r11, 4;
	add.u64 %rd5, %rd{base}, %rd4;
	st.global.f32 [%rd5], {reg};
$L_{tag}_written:
"#
    )
}

/// Each of `%f11`-`%f14` through `op dst, src, operand;` in place.
fn each(op: &str, operand: &str) -> String {
    (11..15)
        .map(|f| format!("\t{op} %f{f}, %f{f}, {operand};\n"))
        .collect()
}

/// `%f11`-`%f14` := `exp(%f1x - %f15)` (`ex2.approx` of the scaled difference).
fn exp_minus_max() -> String {
    each("sub.rn.f32", "%f15")
        + &each("mul.rn.f32", "0f3FB8AA3B")
        + &(11..15)
            .map(|f| format!("\tex2.approx.ftz.f32 %f{f}, %f{f};\n"))
            .collect::<String>()
}

/// `%f11`-`%f14` squared in place.
fn squares() -> String {
    (11..15)
        .map(|f| format!("\tmul.rn.f32 %f{f}, %f{f}, %f{f};\n"))
        .collect()
}

/// The `v4` store of `%f11`-`%f14` to the output (`%rd8`, see [`v4_loop`]).
const STORE_Y: &str = "\tst.global.v4.f32 [%rd8], {%f11, %f12, %f13, %f14};\n";

/// `%f16` := the sum of `%f11`-`%f14` (pairwise).
fn sum4() -> &'static str {
    "\tadd.rn.f32 %f16, %f11, %f12;\n\tadd.rn.f32 %f17, %f13, %f14;\n\tadd.rn.f32 %f16, %f16, %f17;\n"
}

/// The parameters of a norm's second kernel (after x and n), and their loads: `%rd2`
/// partials, `%rd7` y, `%r9` G, `%f10` eps.
const NORM_APPLY_PARAMS: &[&str] = &[
    ".param .u64 ppart",
    ".param .u64 py",
    ".param .u32 pparts",
    ".param .f32 peps",
];
const NORM_APPLY_LOADS: &str = "\tld.param.u64 %rd2, [ppart];\n\tld.param.u64 %rd7, [py];\n\tld.param.u32 %r9, [pparts];\n\tld.param.f32 %f10, [peps];\n";

/// `%f6` := `1 / sqrt(reg + eps)` (`%f10`), correctly rounded at each step as the
/// program's `InverseSqrt` of the sum.
fn inverse_sqrt_plus_eps(reg: &str) -> String {
    format!("\tadd.rn.f32 {reg}, {reg}, %f10;\n\tsqrt.rn.f32 {reg}, {reg};\n\tdiv.rn.f32 %f6, 0f3F800000, {reg};\n")
}

/// The floor's RMS norm: `floor_rms_partials(x, n, partials)` then
/// `floor_rms_apply(x, n, partials, y, G, eps)`.
pub fn rms_norm() -> String {
    let sum_sq = squares() + sum4() + "\tadd.rn.f32 %f1, %f1, %f16;\n";
    let partials = format!(
        "\tld.param.u64 %rd2, [ppart];\n\tmov.f32 %f1, 0f00000000;\n{}{}{}",
        v4_loop("rms_sq", &sum_sq),
        block_fold("rms_p", "%f1", SUM.0, SUM.1),
        write_partial("rms_p", "%f1", 2, false)
    );
    let scale = "\tcvt.rn.f32.u32 %f3, %r1;\n\tdiv.rn.f32 %f1, %f1, %f3;\n".to_string()
        + &inverse_sqrt_plus_eps("%f1");
    let apply = format!(
        "{NORM_APPLY_LOADS}{}{scale}{}",
        fold_partials("rms_a", 2, "%f1", SUM),
        v4_loop("rms_y", &(each("mul.rn.f32", "%f6") + STORE_Y))
    );
    kernel(
        "floor_rms_partials",
        &[".param .u64 ppart"],
        &["rms_p"],
        &partials,
    ) + &kernel("floor_rms_apply", NORM_APPLY_PARAMS, &["rms_a"], &apply)
}

/// The floor's layer norm: `floor_ln_partials(x, n, partials)` (sums at `[b]`, sums of
/// squares at `[G + b]`) then `floor_ln_apply(x, n, partials, y, G, eps)`:
/// `y = (x - mean) * rsqrt(mean(x^2) - mean^2 + eps)`, as the program computes it.
pub fn layer_norm() -> String {
    let moments = sum4().to_string()
        + "\tadd.rn.f32 %f1, %f1, %f16;\n"
        + &squares()
        + sum4()
        + "\tadd.rn.f32 %f7, %f7, %f16;\n";
    let partials = format!(
        "\tld.param.u64 %rd2, [ppart];\n\tmov.f32 %f1, 0f00000000;\n\tmov.f32 %f7, 0f00000000;\n{}{}{}{}{}",
        v4_loop("ln_m", &moments),
        block_fold("ln_s", "%f1", SUM.0, SUM.1),
        block_fold("ln_q", "%f7", SUM.0, SUM.1),
        write_partial("ln_s", "%f1", 2, false),
        write_partial("ln_q", "%f7", 2, true)
    );
    let stats = "\tcvt.rn.f32.u32 %f3, %r1;\n\tdiv.rn.f32 %f15, %f1, %f3;\n\tdiv.rn.f32 %f7, %f7, %f3;\n\tmul.rn.f32 %f4, %f15, %f15;\n\tsub.rn.f32 %f7, %f7, %f4;\n".to_string()
        + &inverse_sqrt_plus_eps("%f7");
    let second = "\tmul.wide.u32 %rd9, %r9, 4;\n\tadd.u64 %rd3, %rd2, %rd9;\n";
    let apply = format!(
        "{NORM_APPLY_LOADS}{second}{}{}{stats}{}",
        fold_partials("ln_as", 2, "%f1", SUM),
        fold_partials("ln_aq", 3, "%f7", SUM),
        v4_loop(
            "ln_y",
            &(each("sub.rn.f32", "%f15") + &each("mul.rn.f32", "%f6") + STORE_Y)
        )
    );
    kernel(
        "floor_ln_partials",
        &[".param .u64 ppart"],
        &["ln_s", "ln_q"],
        &partials,
    ) + &kernel(
        "floor_ln_apply",
        NORM_APPLY_PARAMS,
        &["ln_as", "ln_aq"],
        &apply,
    )
}

/// The floor's softmax: `floor_softmax_max(x, n, maxes)`, then
/// `floor_softmax_sum(x, n, maxes, sums, G)` (each block's sum of `exp(x - max)`), then
/// `floor_softmax_apply(x, n, maxes, sums, y, G)`: `y = exp(x - max) / sum`.
pub fn softmax() -> String {
    let max4: String = (11..15)
        .map(|f| format!("\tmax.f32 %f1, %f1, %f{f};\n"))
        .collect();
    let maxes = format!(
        "\tld.param.u64 %rd2, [pmax];\n\tmov.f32 %f1, {};\n{}{}{}",
        MAX.1,
        v4_loop("sm_m", &max4),
        block_fold("sm_m", "%f1", MAX.0, MAX.1),
        write_partial("sm_m", "%f1", 2, false)
    );
    let params = "\tld.param.u64 %rd2, [pmax];\n\tld.param.u64 %rd3, [psum];\n\tld.param.u32 %r9, [pparts];\n";
    let sums = format!(
        "{params}{}\tmov.f32 %f1, 0f00000000;\n{}{}{}",
        fold_partials("sm_sm", 2, "%f15", MAX),
        v4_loop(
            "sm_e",
            &(exp_minus_max() + sum4() + "\tadd.rn.f32 %f1, %f1, %f16;\n")
        ),
        block_fold("sm_s", "%f1", SUM.0, SUM.1),
        // The sums go to the second array (`%rd3`), not the maxes' (`%rd2`).
        write_partial("sm_s", "%f1", 3, false)
    );
    let apply = format!(
        "{params}\tld.param.u64 %rd7, [py];\n{}{}{}",
        fold_partials("sm_am", 2, "%f15", MAX),
        fold_partials("sm_as", 3, "%f6", SUM),
        v4_loop(
            "sm_y",
            &(exp_minus_max() + &each("div.rn.f32", "%f6") + STORE_Y)
        )
    );
    kernel(
        "floor_softmax_max",
        &[".param .u64 pmax"],
        &["sm_m"],
        &maxes,
    ) + &kernel(
        "floor_softmax_sum",
        &[".param .u64 pmax", ".param .u64 psum", ".param .u32 pparts"],
        &["sm_sm", "sm_s"],
        &sums,
    ) + &kernel(
        "floor_softmax_apply",
        &[
            ".param .u64 pmax",
            ".param .u64 psum",
            ".param .u64 py",
            ".param .u32 pparts",
        ],
        &["sm_am", "sm_as"],
        &apply,
    )
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::process::Command;

    /// The norms', softmax's and the prefix sum's kernels assemble with the pinned ptxas
    /// for sm_90 and sm_80 (the driver's JIT is the same compiler); skipped, saying so,
    /// where the wheel is not installed.
    #[test]
    fn the_reduction_floors_assemble_for_sm_90_and_sm_80() {
        let ptxas = std::env::var_os("VYRE_CUDA_PTXAS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("../../.tools/cuda-nvcc/nvidia/cu13/bin/ptxas"));
        if !ptxas.is_file() {
            println!("skipped: no ptxas at {}", ptxas.display());
            return;
        }
        let dir = std::env::temp_dir().join(format!("floor_reductions_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (major, minor) in [(9, 0), (8, 0)] {
            let file = dir.join(format!("floors_{major}{minor}.ptx"));
            let text = super::super::ptx::header(major, minor)
                + &super::rms_norm()
                + &super::layer_norm()
                + &super::softmax()
                + &super::super::scan_ptx::prefix_sum();
            std::fs::write(&file, text).unwrap();
            let out = Command::new(&ptxas)
                .arg(format!("-arch=sm_{major}{minor}"))
                .arg(&file)
                .args(["-o", "/dev/null"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "ptxas sm_{major}{minor}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
