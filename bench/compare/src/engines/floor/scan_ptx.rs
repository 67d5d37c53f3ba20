//! The floor's inclusive u32 prefix sum (`n % 1024 == 0`): the three-pass form of a
//! hand-written scan, one tile of 1024 elements (256 threads, a `v4` each) per block.
//!
//! 1. `floor_scan_totals(x, n, totals)`: block `b` sums its tile into `totals[b]`;
//! 2. `floor_scan_offsets(totals, tiles)`: one block turns the totals into their exclusive
//!    prefix sums in place (each thread a run of consecutive totals);
//! 3. `floor_scan_apply(x, n, totals, y)`: block `b` scans its tile (each thread its
//!    four, then the block's exclusive scan of the threads' sums) and adds `totals[b]`.
//!
//! Wrapping u32 arithmetic, as the program's: the floor's output is compared bit for bit.

/// The block's exclusive scan of `%r30` (each thread's value) into `%r31`, and the block's
/// total into `%r29`, through `{tag}_warps` (32 u32). Uses %r20-%r28, %p10-%p14; every
/// thread of the block comes here (`%r3` block size, `%r4` thread).
fn block_exclusive_scan(tag: &str) -> String {
    let up: String = [1, 2, 4, 8, 16]
        .iter()
        .map(|d| {
            format!(
                "\tshfl.sync.up.b32 %r25, %r24, {d}, 0, -1;\n\tsetp.ge.u32 %p10, %r20, {d};\n\t@%p10 add.u32 %r24, %r24, %r25;\n"
            )
        })
        .collect();
    format!(
        r#"	and.b32 %r20, %r4, 31;
	shr.u32 %r21, %r4, 5;
	mov.u32 %r24, %r30;
{up}	mov.u32 %r26, %r24;
	setp.ne.u32 %p11, %r20, 31;
	@%p11 bra $L_{tag}_stored;
	mov.u32 %r22, {tag}_warps;
	shl.b32 %r23, %r21, 2;
	add.u32 %r22, %r22, %r23;
	st.shared.u32 [%r22], %r24;
$L_{tag}_stored:
	bar.sync 0;
	setp.ne.u32 %p12, %r21, 0;
	@%p12 bra $L_{tag}_scanned;
	shr.u32 %r27, %r3, 5;
	mov.u32 %r24, 0;
	setp.ge.u32 %p13, %r20, %r27;
	mov.u32 %r22, {tag}_warps;
	shl.b32 %r23, %r20, 2;
	add.u32 %r22, %r22, %r23;
	@!%p13 ld.shared.u32 %r24, [%r22];
{up}	@!%p13 st.shared.u32 [%r22], %r24;
$L_{tag}_scanned:
	bar.sync 0;
	sub.u32 %r31, %r26, %r30;
	setp.eq.u32 %p14, %r21, 0;
	@%p14 bra $L_{tag}_first;
	mov.u32 %r22, {tag}_warps;
	shl.b32 %r23, %r21, 2;
	add.u32 %r22, %r22, %r23;
	ld.shared.u32 %r28, [%r22+-4];
	add.u32 %r31, %r31, %r28;
$L_{tag}_first:
	shr.u32 %r27, %r3, 5;
	mov.u32 %r22, {tag}_warps;
	shl.b32 %r23, %r27, 2;
	add.u32 %r22, %r22, %r23;
	ld.shared.u32 %r29, [%r22+-4];
	bar.sync 0;
"#
    )
}

/// The kernels' common start: `%r2` block, `%r3` block size, `%r4` thread.
const IDS: &str = "\tmov.u32 %r2, %ctaid.x;\n\tmov.u32 %r3, %ntid.x;\n\tmov.u32 %r4, %tid.x;\n";

/// Registers and `{tag}_warps`.
fn decls(tag: &str) -> String {
    format!(
        "\t.reg .pred %p<16>;\n\t.reg .b32 %r<40>;\n\t.reg .b64 %rd<16>;\n\t.shared .align 4 .b32 {tag}_warps[32];\n"
    )
}

/// `%rd5` := the address of block `%r2`'s thread `%r4`'s `v4` in `%rd{base}` (a tile of
/// 1024 elements a block).
fn v4_address(base: u32) -> String {
    format!(
        "\tshl.b32 %r5, %r2, 8;\n\tadd.u32 %r5, %r5, %r4;\n\tmul.wide.u32 %rd4, %r5, 16;\n\tadd.u64 %rd5, %rd{base}, %rd4;\n"
    )
}

/// The three kernels of the floor's prefix sum.
pub fn prefix_sum() -> String {
    let totals_scan = block_exclusive_scan("scan_t");
    let offsets_scan = block_exclusive_scan("scan_o");
    let tile_scan = block_exclusive_scan("scan_a");
    let (dt, doff, da) = (decls("scan_t"), decls("scan_o"), decls("scan_a"));
    let (addr_x, addr_y) = (v4_address(1), v4_address(7));
    format!(
        r#".visible .entry floor_scan_totals(
	.param .u64 px,
	.param .u32 pn,
	.param .u64 ptotals
)
{{
{dt}	ld.param.u64 %rd1, [px];
	ld.param.u64 %rd2, [ptotals];
{IDS}{addr_x}	ld.global.nc.v4.u32 {{%r10, %r11, %r12, %r13}}, [%rd5];
	add.u32 %r30, %r10, %r11;
	add.u32 %r30, %r30, %r12;
	add.u32 %r30, %r30, %r13;
{totals_scan}	setp.ne.u32 %p1, %r4, 0;
	@%p1 bra $L_scan_t_done;
	mul.wide.u32 %rd6, %r2, 4;
	add.u64 %rd6, %rd2, %rd6;
	st.global.u32 [%rd6], %r29;
$L_scan_t_done:
	ret;
}}

.visible .entry floor_scan_offsets(
	.param .u64 ptotals,
	.param .u32 ptiles
)
{{
{doff}	ld.param.u64 %rd2, [ptotals];
	ld.param.u32 %r1, [ptiles];
{IDS}	add.u32 %r6, %r1, %r3;
	sub.u32 %r6, %r6, 1;
	div.u32 %r6, %r6, %r3;
	mul.lo.u32 %r7, %r6, %r4;
	add.u32 %r8, %r7, %r6;
	min.u32 %r8, %r8, %r1;
	min.u32 %r7, %r7, %r1;
	mov.u32 %r30, 0;
	mov.u32 %r9, %r7;
$L_scan_o_sum:
	setp.ge.u32 %p1, %r9, %r8;
	@%p1 bra $L_scan_o_scan;
	mul.wide.u32 %rd4, %r9, 4;
	add.u64 %rd5, %rd2, %rd4;
	ld.global.u32 %r10, [%rd5];
	add.u32 %r30, %r30, %r10;
	add.u32 %r9, %r9, 1;
	bra $L_scan_o_sum;
$L_scan_o_scan:
{offsets_scan}	mov.u32 %r9, %r7;
$L_scan_o_write:
	setp.ge.u32 %p2, %r9, %r8;
	@%p2 bra $L_scan_o_done;
	mul.wide.u32 %rd4, %r9, 4;
	add.u64 %rd5, %rd2, %rd4;
	ld.global.u32 %r10, [%rd5];
	st.global.u32 [%rd5], %r31;
	add.u32 %r31, %r31, %r10;
	add.u32 %r9, %r9, 1;
	bra $L_scan_o_write;
$L_scan_o_done:
	ret;
}}

.visible .entry floor_scan_apply(
	.param .u64 px,
	.param .u32 pn,
	.param .u64 ptotals,
	.param .u64 py
)
{{
{da}	ld.param.u64 %rd1, [px];
	ld.param.u64 %rd2, [ptotals];
	ld.param.u64 %rd7, [py];
{IDS}{addr_x}	ld.global.nc.v4.u32 {{%r10, %r11, %r12, %r13}}, [%rd5];
	add.u32 %r11, %r11, %r10;
	add.u32 %r12, %r12, %r11;
	add.u32 %r13, %r13, %r12;
	mov.u32 %r30, %r13;
{tile_scan}	mul.wide.u32 %rd6, %r2, 4;
	add.u64 %rd6, %rd2, %rd6;
	ld.global.u32 %r14, [%rd6];
	add.u32 %r31, %r31, %r14;
	add.u32 %r10, %r10, %r31;
	add.u32 %r11, %r11, %r31;
	add.u32 %r12, %r12, %r31;
	add.u32 %r13, %r13, %r31;
{addr_y}	st.global.v4.u32 [%rd5], {{%r10, %r11, %r12, %r13}};
	ret;
}}

"#
    )
}
