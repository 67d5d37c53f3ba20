//! The cooperative entry's software grid barrier (see `analysis::grid_sync` for how a
//! program is split into segments, and why the cooperative form is exact).

use std::fmt::Write as _;

/// Label after segment `index` of the cooperative entry.
pub(crate) fn segment_end_label(index: usize) -> String {
    format!("vyre_segment_end_{index}")
}

/// Registers of the grid barrier, declared at entry scope (segments declare `%p`, `%r`,
/// `%rd`... in their own nested scopes, so these names never clash).
pub(super) const BARRIER_DECLS: &str =
    "\t.reg .pred %gp<3>;\n\t.reg .b32 %gr<6>;\n\t.reg .b64 %grd<4>;\n";

/// The predicate of the block's leader (its invocation at local id 0), set by
/// [`barrier_prologue`].
pub(super) const LEADER: &str = "%gp0";

/// The global address of the fault area, set by [`barrier_prologue`].
pub(super) const AREA: &str = "%grd0";

/// Entry prologue of the grid barrier: the addresses of its words in the fault area
/// (`+4` arrival count, `+8` generation, `+12` stop flag), whether this thread leads its
/// block, and the grid's block count.
pub(super) fn barrier_prologue(out: &mut String) {
    out.push_str(concat!(
        "\tld.param.u64 %grd0, [vyre_fault];\n",
        "\tcvta.to.global.u64 %grd0, %grd0;\n",
        "\tadd.u64 %grd1, %grd0, 4;\n",
        "\tadd.u64 %grd2, %grd0, 8;\n",
        "\tadd.u64 %grd3, %grd0, 12;\n",
        "\tmov.u32 %gr0, %tid.x;\n",
        "\tmov.u32 %gr1, %tid.y;\n",
        "\tor.b32 %gr0, %gr0, %gr1;\n",
        "\tmov.u32 %gr1, %tid.z;\n",
        "\tor.b32 %gr0, %gr0, %gr1;\n",
        "\tsetp.eq.u32 %gp0, %gr0, 0;\n",
        "\tmov.u32 %gr1, %nctaid.x;\n",
        "\tmov.u32 %gr2, %nctaid.y;\n",
        "\tmul.lo.u32 %gr1, %gr1, %gr2;\n",
        "\tmov.u32 %gr2, %nctaid.z;\n",
        "\tmul.lo.u32 %gr1, %gr1, %gr2;\n",
    ));
}

/// Grid barrier `index`, then leave for `done` when a fault was recorded.
///
/// Each block's leader reads the generation, then adds to the arrival count (acq_rel); the
/// last block resets the count, copies the fault word into the stop flag and publishes
/// the next generation (release); the others poll it (acquire, `nanosleep` backoff) and
/// read the stop flag, which no block can overwrite before all have read it. `barrier.red`
/// hands the leader's decision to the block, so the exit is uniform. The words return to
/// "count 0" after every barrier: no re-zeroing between launches sharing a fault area.
pub(super) fn barrier(out: &mut String, index: usize, done: &str) {
    let wait = format!("vyre_grid_wait_{index}");
    let joined = format!("vyre_grid_joined_{index}");
    let _ = write!(
        out,
        concat!(
            "\tbarrier.sync 0;\n",
            "\tmov.u32 %gr4, 0;\n",
            "\t@!%gp0 bra {joined};\n",
            "\tld.acquire.gpu.global.u32 %gr2, [%grd2];\n",
            "\tatom.acq_rel.gpu.global.add.u32 %gr3, [%grd1], 1;\n",
            "\tadd.u32 %gr3, %gr3, 1;\n",
            "\tsetp.lt.u32 %gp1, %gr3, %gr1;\n",
            "\t@%gp1 bra {wait};\n",
            "\tst.relaxed.gpu.global.u32 [%grd1], 0;\n",
            "\tld.relaxed.gpu.global.u32 %gr4, [%grd0];\n",
            "\tst.relaxed.gpu.global.u32 [%grd3], %gr4;\n",
            "\tadd.u32 %gr2, %gr2, 1;\n",
            "\tst.release.gpu.global.u32 [%grd2], %gr2;\n",
            "\tbra {joined};\n",
            "{wait}:\n",
            "\tnanosleep.u32 32;\n",
            "\tld.acquire.gpu.global.u32 %gr5, [%grd2];\n",
            "\tsetp.eq.u32 %gp1, %gr5, %gr2;\n",
            "\t@%gp1 bra {wait};\n",
            "\tld.relaxed.gpu.global.u32 %gr4, [%grd3];\n",
            "{joined}:\n",
            "\tsetp.ne.u32 %gp1, %gr4, 0;\n",
            "\tbarrier.red.or.pred %gp2, 0, %gp1;\n",
            "\t@%gp2 bra {done};\n",
        ),
        wait = wait,
        joined = joined,
        done = done,
    );
}
