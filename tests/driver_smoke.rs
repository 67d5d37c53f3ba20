//! Smoke test of the CUDA driver layer on a real GPU; skips (and passes) without one.

use std::sync::Arc;
use vyre_cuda::driver::{
    device_count, driver_library_present, Device, DeviceAlloc, Event, KernelArg, Module,
    PinnedHostBuffer, Stream, StreamMemOp,
};

/// PTX ISA version and target for a compute capability; unknown architectures get `sm_70`
/// PTX, which the driver JIT compiles for any newer GPU.
fn ptx_header((major, minor): (u32, u32)) -> (&'static str, String) {
    let version = match (major, minor) {
        (7, _) | (8, 0) => "7.0",
        (8, 6) => "7.1",
        (8, 7) => "7.4",
        (8, 9) | (9, 0) => "7.8",
        (10, 0) | (10, 1) => "8.6",
        (10, 3) | (12, 1) => "8.8",
        (12, 0) => "8.7",
        _ => return ("7.0", "sm_70".to_owned()),
    };
    (version, format!("sm_{major}{minor}"))
}

/// `p[i] += 1` for `i < n`, one thread per element.
fn add_one_ptx(cc: (u32, u32)) -> String {
    let (version, target) = ptx_header(cc);
    format!(
        r#".version {version}
.target {target}
.address_size 64

.visible .entry add_one(
    .param .u64 p,
    .param .u32 n
)
{{
    .reg .pred %pr<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [p];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %pr1, %r5, %r1;
    @%pr1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r6, [%rd4];
    add.s32 %r7, %r6, 1;
    st.global.u32 [%rd4], %r7;
DONE:
    ret;
}}
"#
    )
}

fn to_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn to_words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Launches `add_one` over `n` words at `ptr`.
fn launch_add_one(stream: &Stream, f: &vyre_cuda::driver::Function, ptr: u64, n: u32) {
    stream
        .launch(
            f,
            [4, 1, 1],
            [256, 1, 1],
            &[KernelArg::U64(ptr), KernelArg::U32(n)],
        )
        .expect("launch add_one");
}

#[test]
fn driver_smoke() {
    if !driver_library_present() || !matches!(device_count(), Ok(n) if n > 0) {
        println!("skipped: no CUDA device");
        return;
    }
    let device: Arc<Device> = Device::open(0).expect("open device 0");
    let info = device.info();
    println!("{info:#?}");
    println!("memory bandwidth: {} GB/s", info.memory_bandwidth_gbps());
    assert!(info.warp_size > 0 && info.multiprocessor_count > 0);
    let (free, total) = device.memory_info().expect("memory info");
    assert!(free > 0 && free <= total);
    assert!(Device::open(usize::MAX >> 1).is_err());

    let module = Module::load_ptx(&device, &add_one_ptx(info.compute_capability)).expect("PTX");
    let add_one = module.function("add_one").expect("add_one");
    println!(
        "add_one: {} registers, max {} threads/block",
        add_one.num_registers().expect("regs"),
        add_one.max_threads_per_block().expect("max threads")
    );
    assert!(module.function("no_such_kernel").is_err());

    // Upload, launch, read back.
    const N: usize = 1000;
    let input: Vec<u32> = (0..N as u32)
        .map(|i| i.wrapping_mul(7).wrapping_add(3))
        .collect();
    let stream = Stream::new(&device).expect("stream");
    let buf = DeviceAlloc::new(&device, N * 4).expect("alloc");
    assert_eq!(buf.len(), N * 4);
    stream
        .copy_to_device(buf.ptr(), &to_bytes(&input))
        .expect("upload");
    launch_add_one(&stream, &add_one, buf.ptr(), N as u32);
    let mut out = vec![0u8; N * 4];
    stream
        .copy_to_host_blocking(&mut out, buf.ptr())
        .expect("download");
    for (i, (got, want)) in to_words(&out).iter().zip(&input).enumerate() {
        assert_eq!(*got, want + 1, "element {i}");
    }

    // Timing: 64 launches bracketed by two events.
    let (start, end) = (
        Event::new(&device, true).expect("event"),
        Event::new(&device, true).expect("event"),
    );
    start.record(&stream).expect("record start");
    for _ in 0..64 {
        launch_add_one(&stream, &add_one, buf.ptr(), N as u32);
    }
    end.record(&stream).expect("record end");
    end.synchronize().expect("event sync");
    assert!(end.is_complete().expect("query"));
    assert!(stream.query_idle().expect("stream query"));
    let ns = end.elapsed_ns_since(&start).expect("elapsed");
    println!("64 launches: {ns} ns");
    assert!(ns > 0);
    stream
        .copy_to_host_blocking(&mut out, buf.ptr())
        .expect("download");
    assert!(to_words(&out).iter().zip(&input).all(|(g, w)| *g == w + 65));

    // memset_zero (aligned and unaligned) and device-to-device copy.
    let copy = DeviceAlloc::new(&device, N * 4).expect("alloc");
    stream
        .copy_device_to_device(copy.ptr(), buf.ptr(), N * 4)
        .expect("dtod");
    stream.memset_zero(buf.ptr(), N * 4).expect("memset d32");
    stream.memset_zero(copy.ptr() + 1, 6).expect("memset d8");
    stream
        .copy_to_host_blocking(&mut out, buf.ptr())
        .expect("download");
    assert!(out.iter().all(|&b| b == 0));
    stream
        .copy_to_host_blocking(&mut out, copy.ptr())
        .expect("download");
    let mut want = to_bytes(&input.iter().map(|w| w + 65).collect::<Vec<_>>());
    want[1..7].fill(0);
    assert_eq!(out, want);

    // Pinned round trip through the raw async copies.
    let mut pinned = PinnedHostBuffer::new(&device, N * 4).expect("pinned");
    assert_eq!(pinned.len(), N * 4);
    assert!(pinned.as_slice().iter().all(|&b| b == 0));
    pinned.as_mut_slice().copy_from_slice(&to_bytes(&input));
    // SAFETY: `pinned` and the allocations live until the stream is synchronised below.
    unsafe {
        stream
            .copy_to_device_async_raw(copy.ptr(), pinned.as_ptr(), N * 4)
            .expect("pinned upload");
        launch_add_one(&stream, &add_one, copy.ptr(), N as u32);
        stream
            .copy_to_host_async(pinned.as_mut_ptr(), N * 4, copy.ptr())
            .expect("pinned download");
    }
    stream.synchronize().expect("sync");
    assert!(to_words(pinned.as_slice())
        .iter()
        .zip(&input)
        .all(|(g, w)| *g == w + 1));
    device.synchronize().expect("device sync");

    // Another thread binds the context itself; the opt-in shared-memory attribute applies.
    let words = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut bytes = vec![0u8; N * 4];
                stream
                    .copy_to_host_blocking(&mut bytes, copy.ptr())
                    .map(|()| to_words(&bytes))
            })
            .join()
    });
    let words = words.expect("thread").expect("download on another thread");
    assert!(words.iter().zip(&input).all(|(g, w)| *g == w + 1));
    add_one
        .set_max_dynamic_shared_bytes(info.max_shared_memory_per_block_optin)
        .expect("opt-in shared memory");

    // Empty allocations and copies make no driver calls.
    let empty = DeviceAlloc::new(&device, 0).expect("empty alloc");
    assert!(empty.is_empty() && empty.ptr() == 0);
    stream.copy_to_device(0, &[]).expect("empty copy");
    assert!(PinnedHostBuffer::new(&device, 0)
        .expect("empty pinned")
        .is_empty());

    // Invalid PTX is an error with the JIT log or error name, not a panic.
    let err = Module::load_ptx(&device, "garbage").expect_err("garbage PTX must fail");
    let text = err.to_string();
    println!("invalid PTX: {text}");
    assert!(
        text.contains("JIT log") || text.contains("CUDA_ERROR_"),
        "{text}"
    );
    assert!(Module::load_ptx(&device, "nul\0inside").is_err());
    let (version, target) = ptx_header(info.compute_capability);
    let bad = format!(".version {version}\n.target {target}\n.address_size 64\n.visible .entry k()\n{{\n    bogus.op;\n}}\n");
    let err = Module::load_ptx(&device, &bad).expect_err("bad PTX must fail");
    println!("bad PTX: {err}");
    assert!(err.log().is_some_and(|log| !log.is_empty()), "{err}");

    stream_mem_ops(&device, &stream);

    // Last, since it poisons the process: a faulting kernel gives a sticky error (the
    // driver keeps it for the whole process; there is no in-process recovery).
    let fault = Module::load_ptx(&device, &fault_ptx(info.compute_capability)).expect("PTX");
    let fault = fault.function("fault").expect("fault");
    // It faults on purpose.
    let launched = stream.launch(&fault, [1, 1, 1], [1, 1, 1], &[]);
    let err = launched
        .and_then(|()| stream.synchronize())
        .expect_err("kernel must fault");
    println!("fault: {err}");
    assert!(err.is_sticky(), "{err}");
    drop((
        stream, buf, copy, pinned, module, add_one, fault, start, end,
    ));
}

/// The u64 words at `ptr`, read on `stream` (which has nothing else queued).
fn read_u64s(stream: &Stream, ptr: u64, n: usize) -> Vec<u64> {
    let mut bytes = vec![0u8; n * 8];
    stream
        .copy_to_host_blocking(&mut bytes, ptr)
        .expect("read back");
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// Waits up to 5 s for `stream` to drain; a stream still waiting then fails the test.
fn drained(stream: &Stream, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !stream.query_idle().expect("cuStreamQuery") {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: the stream still waits"
        );
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

/// 64-bit stream memory operations (the peer barrier's flags): a wait holds its stream
/// until another stream's write reaches the value (GEQ), one by one and batched.
fn stream_mem_ops(device: &Arc<Device>, stream: &Stream) {
    if !device.stream_mem_ops_64() {
        println!("64-bit stream memory operations: not supported (peer barriers use events)");
        return;
    }
    let flags = DeviceAlloc::new(device, 32).expect("alloc");
    stream.memset_zero(flags.ptr(), 32).expect("zero");
    stream.synchronize().expect("sync");
    let waiter = Stream::new(device).expect("stream");
    let (flag, after) = (flags.ptr(), flags.ptr() + 8);
    waiter.wait_value64_geq(flag, 5).expect("wait");
    waiter.write_value64(after, 7).expect("write");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(
        read_u64s(stream, flags.ptr(), 4),
        [0, 0, 0, 0],
        "the wait holds"
    );
    // A larger value passes a GEQ wait too.
    stream.write_value64(flag, 6).expect("write");
    drained(&waiter, "write_value64 / wait_value64_geq");
    assert_eq!(read_u64s(stream, flags.ptr(), 4), [6, 7, 0, 0]);

    let (flag, after) = (flags.ptr() + 16, flags.ptr() + 24);
    let waits = [
        StreamMemOp::WaitGeq64 {
            addr: flag,
            value: 9,
        },
        StreamMemOp::Write64 {
            addr: after,
            value: 11,
        },
    ];
    waiter.batch_mem_ops(&waits).expect("batch");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(
        read_u64s(stream, flags.ptr(), 4),
        [6, 7, 0, 0],
        "the batched wait holds"
    );
    let writes = [
        StreamMemOp::Write64 {
            addr: flags.ptr(),
            value: 8,
        },
        StreamMemOp::Write64 {
            addr: flag,
            value: 9,
        },
    ];
    stream.batch_mem_ops(&writes).expect("batch");
    drained(&waiter, "batch_mem_ops");
    assert_eq!(read_u64s(stream, flags.ptr(), 4), [8, 7, 9, 11]);
    println!("64-bit stream memory operations: waits hold until the value, one by one and batched");
}

/// Stores through a null pointer: `CUDA_ERROR_ILLEGAL_ADDRESS`.
fn fault_ptx(cc: (u32, u32)) -> String {
    let (version, target) = ptx_header(cc);
    format!(
        ".version {version}\n.target {target}\n.address_size 64\n\n.visible .entry fault()\n{{\n    \
         .reg .b64 %rd<2>;\n    mov.u64 %rd1, 0;\n    st.global.u32 [%rd1], 1;\n    ret;\n}}\n"
    )
}
