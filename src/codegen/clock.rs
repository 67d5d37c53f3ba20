//! Clock stamps of a timed kernel ([`super::emit_timed`]): each block stamps
//! `%globaltimer` into the fault area when it starts and when its last invocation ends,
//! so the host reads a run's device time back with the fault word
//! ([`super::clock_span_ns`]) instead of recording CUDA events around the launches.
//!
//! At the start the block's leader zeroes the block's arrival count and folds the NOT of
//! its start time into [`CLOCK_START_AT`] with `red.max` (so the earliest start wins and a
//! zeroed area needs no other initial value); a barrier then orders the zeroed count before
//! any arrival. Every invocation ends at the entry's end block instead of exiting: the
//! lanes of a warp that arrive together add their number to the arrival count (one shared
//! atomic per group, by its lowest lane), and the group that completes the block's count
//! folds the end time into [`CLOCK_END_AT`] with `red.max`. No invocation waits there, so
//! lanes that end early (a `Return`, a fault, the replicated segments' idle lanes) never
//! block one another, and each block makes two global atomics in all.
//!
//! The entries of a kernel that writes its fault area only for the stamps (no faults, no
//! grid barrier) skip them when the area is null, so a host that does not read the device
//! time (the resident-batch lane, timed by events) launches it without an area.

use super::abi::{CLOCK_END_AT, CLOCK_START_AT};
use super::writer::{emit, PtxWriter};
use std::fmt::Display;

/// The entry's end block, where every invocation of a timed entry ends.
pub(crate) const CLOCK_END: &str = "vyre_clock_end";

/// The block's arrival count at the end block.
const ARRIVED: &str = "vyre_clock_arrived";

/// Declaration of the arrival count (entry scope).
pub(crate) const ARRIVED_DECL: &str = "\t.shared .align 4 .b32 vyre_clock_arrived;\n";

/// The block's start: where `leader` (one invocation of the block) holds, zero the
/// arrival count and fold the NOT of the clock into the start stamp of the fault area at
/// global address `area`, using `time` (a 64-bit register). The caller then orders this
/// before any arrival with a barrier.
pub(crate) fn put_start(
    w: &mut PtxWriter,
    leader: impl Display,
    area: impl Display,
    time: impl Display,
) {
    emit!(w, "@{leader} st.shared.u32 [{ARRIVED}], 0");
    emit!(w, "@{leader} mov.u64 {time}, %globaltimer");
    emit!(w, "@{leader} not.b64 {time}, {time}");
    emit!(
        w,
        "@{leader} red.global.max.u64 [{area}+{CLOCK_START_AT}], {time}"
    );
}

/// Registers of the end block.
pub(crate) struct EndRegs<T> {
    /// Three 32-bit registers.
    pub(crate) words: [T; 3],
    pub(crate) pred: T,
    /// A 64-bit register.
    pub(crate) time: T,
}

/// The end block (after [`CLOCK_END`]'s label): count the arriving lanes and let the group
/// completing the block's `threads` stamp the end, then `leave` (`exit` or `ret`).
pub(crate) fn put_end<T: Display>(
    w: &mut PtxWriter,
    threads: u32,
    area: impl Display,
    regs: &EndRegs<T>,
    leave: &str,
) {
    let EndRegs {
        words: [mask, below, count],
        pred,
        time,
    } = regs;
    emit!(w, "activemask.b32 {mask}");
    emit!(w, "mov.u32 {below}, %lanemask_lt");
    emit!(w, "and.b32 {below}, {below}, {mask}");
    emit!(w, "setp.ne.u32 {pred}, {below}, 0");
    emit!(w, "@{pred} {leave}");
    emit!(w, "popc.b32 {count}, {mask}");
    emit!(w, "atom.shared.add.u32 {below}, [{ARRIVED}], {count}");
    emit!(w, "add.u32 {below}, {below}, {count}");
    emit!(w, "setp.lt.u32 {pred}, {below}, {threads}");
    emit!(w, "@{pred} {leave}");
    emit!(w, "mov.u64 {time}, %globaltimer");
    emit!(w, "red.global.max.u64 [{area}+{CLOCK_END_AT}], {time}");
    emit!(w, "{leave}");
}
