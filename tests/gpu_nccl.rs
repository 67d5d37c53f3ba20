//! GPU: NCCL through vyre-cuda's own loader, with one rank on device 0 (and two ranks
//! when the machine has two GPUs). Each collective on device buffers of the crate's driver
//! layer: with one rank AllReduce, AllGather, ReduceScatter and Broadcast copy their input
//! (out of place) or keep it (in place); send/receive to oneself in a group; the
//! asynchronous-error poll; a unique id through hex into `ncclCommInitRank`; and a
//! communicator dropped with work in flight neither hangs nor panics.
//!
//! Without a device every test prints `skipped: no CUDA device`; with a device but no
//! NCCL it prints `skipped: no NCCL library`. `VYRE_CUDA_REQUIRE_GPU=1` turns either into
//! a failure.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;
use vyre_cuda::driver::nccl::{NcclComm, NcclDataType, NcclGroup, NcclRedOp, NcclUniqueId};
use vyre_cuda::driver::{device_count, Device, DeviceAlloc, NcclError, Stream};

fn required() -> bool {
    std::env::var("VYRE_CUDA_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// `count` devices from ordinal 0, or `None` after the skip line.
fn devices(count: usize) -> Option<Vec<Arc<Device>>> {
    let visible = match device_count() {
        Ok(visible) => visible,
        Err(error) => {
            assert!(
                !required(),
                "VYRE_CUDA_REQUIRE_GPU=1 but no CUDA driver: {error}"
            );
            println!("skipped: no CUDA device");
            return None;
        }
    };
    if visible == 0 {
        assert!(!required(), "VYRE_CUDA_REQUIRE_GPU=1 but no CUDA device");
        println!("skipped: no CUDA device");
        return None;
    }
    match vyre_cuda::nccl_version() {
        Ok(version) => println!("NCCL {version}"),
        Err(error) => {
            assert!(
                !required(),
                "VYRE_CUDA_REQUIRE_GPU=1 and a device is present, but NCCL is not: {error}"
            );
            println!("skipped: no NCCL library ({error})");
            return None;
        }
    }
    if visible < count {
        println!("skipped: {count} CUDA devices needed, {visible} visible");
        return None;
    }
    Some(
        (0..count)
            .map(|ordinal| Device::open(ordinal).expect("a visible device opens"))
            .collect(),
    )
}

fn upload(stream: &Stream, bytes: &[u8]) -> DeviceAlloc {
    let alloc = DeviceAlloc::new(stream.device(), bytes.len()).expect("device memory");
    stream.copy_to_device(alloc.ptr(), bytes).expect("upload");
    alloc
}

fn download(stream: &Stream, alloc: &DeviceAlloc) -> Vec<u8> {
    let mut bytes = vec![0; alloc.len()];
    stream
        .copy_to_host_blocking(&mut bytes, alloc.ptr())
        .expect("download");
    bytes
}

/// Deterministic test data of `count` elements of `dtype`.
fn data(dtype: NcclDataType, count: usize, seed: u32) -> Vec<u8> {
    (0..count as u32)
        .flat_map(|i| match dtype {
            NcclDataType::Float32 => (i as f32 * 0.37 - 100.0 + seed as f32).to_le_bytes(),
            _ => (i.wrapping_mul(2_654_435_761) ^ seed).to_le_bytes(),
        })
        .collect()
}

/// A byte pattern no collective output equals, so an untouched output shows.
fn poison(bytes: usize) -> Vec<u8> {
    vec![0xcd; bytes]
}

fn fix_count(error: NcclError) -> usize {
    vyre_cuda::CudaError::from(error)
        .to_string()
        .matches("Fix:")
        .count()
}

const COUNT: usize = 1027;

/// One collective call from a send address to a receive address.
type Collective<'a> = dyn Fn(u64, u64) -> Result<(), NcclError> + 'a;

#[test]
fn one_rank_collectives_copy_or_keep_their_data() {
    let Some(devices) = devices(1) else {
        return;
    };
    let device = &devices[0];
    let comms = NcclComm::init_all(&devices).expect("a one-rank communicator");
    let comm = &comms[0];
    assert_eq!((comm.rank(), comm.world_size()), (0, 1));
    assert_eq!(comm.count().unwrap(), 1);
    assert_eq!(comm.user_rank().unwrap(), 0);
    assert_eq!(comm.cu_device().unwrap(), device.info().ordinal);
    let stream = Stream::new(device).expect("a stream");
    for dtype in [NcclDataType::Float32, NcclDataType::Uint32] {
        let bytes = COUNT * dtype.size();
        let input = data(dtype, COUNT, 7);
        let send = upload(&stream, &input);
        let collectives: [(&str, &Collective); 5] = [
            ("all_reduce sum", &|s, r| {
                comm.all_reduce(s, r, COUNT, dtype, NcclRedOp::Sum, &stream)
            }),
            ("all_reduce max", &|s, r| {
                comm.all_reduce(s, r, COUNT, dtype, NcclRedOp::Max, &stream)
            }),
            ("all_gather", &|s, r| {
                comm.all_gather(s, r, COUNT, dtype, &stream)
            }),
            ("reduce_scatter sum", &|s, r| {
                comm.reduce_scatter(s, r, COUNT, dtype, NcclRedOp::Sum, &stream)
            }),
            ("broadcast root 0", &|s, r| {
                comm.broadcast(s, r, COUNT, dtype, 0, &stream)
            }),
        ];
        for (name, run) in collectives {
            // Out of place: the output (poisoned first) becomes the input.
            let recv = upload(&stream, &poison(bytes));
            run(send.ptr(), recv.ptr()).unwrap_or_else(|e| panic!("{name} {dtype:?}: {e}"));
            assert!(
                download(&stream, &recv) == input,
                "{name} {dtype:?} out of place"
            );
            assert!(
                download(&stream, &send) == input,
                "{name} {dtype:?}: input kept"
            );
            // In place: the buffer keeps its data.
            let buffer = upload(&stream, &input);
            run(buffer.ptr(), buffer.ptr()).unwrap_or_else(|e| panic!("{name} {dtype:?}: {e}"));
            assert!(
                download(&stream, &buffer) == input,
                "{name} {dtype:?} in place"
            );
        }
    }
    stream.synchronize().expect("the stream ran every call");
    comm.poll_async_error().expect("no asynchronous error");
    drop(comms);
}

#[test]
fn one_rank_sends_to_itself_in_a_group() {
    let Some(devices) = devices(1) else {
        return;
    };
    let comms = NcclComm::init_all(&devices).expect("a one-rank communicator");
    let comm = &comms[0];
    let stream = Stream::new(&devices[0]).expect("a stream");
    let dtype = NcclDataType::Uint32;
    let input = data(dtype, COUNT, 11);
    let send = upload(&stream, &input);
    let recv = upload(&stream, &poison(input.len()));
    let group = NcclGroup::start(&comms).expect("ncclGroupStart");
    comm.send(send.ptr(), COUNT, dtype, 0, &stream)
        .expect("ncclSend");
    comm.recv(recv.ptr(), COUNT, dtype, 0, &stream)
        .expect("ncclRecv");
    group.end().expect("ncclGroupEnd");
    assert!(download(&stream, &recv) == input, "received what was sent");
    comm.poll_async_error().expect("no asynchronous error");
}

#[test]
fn bad_roots_and_peers_are_typed_errors_before_nccl() {
    let Some(devices) = devices(1) else {
        return;
    };
    let comms = NcclComm::init_all(&devices).expect("a one-rank communicator");
    let comm = &comms[0];
    let stream = Stream::new(&devices[0]).expect("a stream");
    let buffer = upload(&stream, &data(NcclDataType::Uint32, COUNT, 3));
    let (ptr, dtype) = (buffer.ptr(), NcclDataType::Uint32);
    let errors = [
        comm.broadcast(ptr, ptr, COUNT, dtype, 1, &stream),
        comm.send(ptr, COUNT, dtype, 1, &stream),
        comm.recv(ptr, COUNT, dtype, 5, &stream),
    ];
    for error in errors {
        let error = error.expect_err("rank 1 of a one-rank communicator");
        assert!(
            matches!(error, NcclError::InvalidArgument { .. }),
            "{error}"
        );
        assert_eq!(fix_count(error), 1);
    }
    let twice = NcclComm::init_all(&[devices[0].clone(), devices[0].clone()])
        .expect_err("one rank per GPU");
    assert!(
        matches!(twice, NcclError::InvalidArgument { .. }),
        "{twice}"
    );
    assert!(matches!(
        NcclComm::init_all(&[]),
        Err(NcclError::InvalidArgument { .. })
    ));
    comm.poll_async_error().expect("no asynchronous error");
}

#[test]
fn a_unique_id_through_hex_joins_a_one_rank_communicator() {
    let Some(devices) = devices(1) else {
        return;
    };
    let id = NcclUniqueId::new().expect("ncclGetUniqueId");
    let hex = id.to_hex();
    assert_eq!(hex.len(), 256);
    let parsed = NcclUniqueId::from_hex(&hex).expect("its own hex");
    assert_eq!(parsed, id);
    let error = NcclComm::init_rank(&devices[0], &parsed, 1, 1).expect_err("rank 1 of 1");
    assert!(
        matches!(error, NcclError::InvalidArgument { .. }),
        "{error}"
    );
    let comm = NcclComm::init_rank(&devices[0], &parsed, 0, 1).expect("ncclCommInitRank");
    assert_eq!(comm.count().unwrap(), 1);
    assert_eq!(comm.user_rank().unwrap(), 0);
    let stream = Stream::new(&devices[0]).expect("a stream");
    let input = data(NcclDataType::Float32, COUNT, 5);
    let send = upload(&stream, &input);
    let recv = upload(&stream, &poison(input.len()));
    comm.all_reduce(
        send.ptr(),
        recv.ptr(),
        COUNT,
        NcclDataType::Float32,
        NcclRedOp::Sum,
        &stream,
    )
    .expect("ncclAllReduce");
    assert!(download(&stream, &recv) == input);
    comm.poll_async_error().expect("no asynchronous error");
    comm.close().expect("finalize and destroy");
}

#[test]
fn a_communicator_dropped_mid_use_neither_hangs_nor_panics() {
    let Some(devices) = devices(1) else {
        return;
    };
    let (done, finished) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let device = &devices[0];
        let stream = Stream::new(device).expect("a stream");
        let count = 16 << 20; // 64 MiB of f32 per buffer: the calls outlast the drop
        let a = DeviceAlloc::new(device, count * 4).expect("device memory");
        let b = DeviceAlloc::new(device, count * 4).expect("device memory");
        let comms = NcclComm::init_all(&devices).expect("a one-rank communicator");
        for _ in 0..16 {
            let comm = &comms[0];
            comm.all_reduce(
                a.ptr(),
                b.ptr(),
                count,
                NcclDataType::Float32,
                NcclRedOp::Sum,
                &stream,
            )
            .expect("ncclAllReduce");
            comm.all_reduce(
                b.ptr(),
                b.ptr(),
                count,
                NcclDataType::Float32,
                NcclRedOp::Sum,
                &stream,
            )
            .expect("ncclAllReduce in place");
        }
        drop(comms); // work still queued on the stream
        stream
            .synchronize()
            .expect("the stream survives the aborted communicator");
        // The device and NCCL still work: a fresh communicator runs a checked call.
        let comms = NcclComm::init_all(&devices).expect("a fresh communicator");
        let input = data(NcclDataType::Uint32, COUNT, 9);
        let send = upload(&stream, &input);
        let recv = upload(&stream, &poison(input.len()));
        comms[0]
            .all_reduce(
                send.ptr(),
                recv.ptr(),
                COUNT,
                NcclDataType::Uint32,
                NcclRedOp::Sum,
                &stream,
            )
            .expect("ncclAllReduce after the drop");
        assert!(download(&stream, &recv) == input);
        comms[0].poll_async_error().expect("no asynchronous error");
        done.send(()).expect("the test waits");
    });
    match finished.recv_timeout(Duration::from_secs(120)) {
        Ok(()) => worker.join().expect("no panic"),
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => panic!("the worker ended without reporting"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("dropping a communicator mid-use hung for 120 s")
        }
    }
}

#[test]
fn two_ranks_on_two_devices_sum_in_one_group() {
    let Some(devices) = devices(2) else {
        return;
    };
    let comms = NcclComm::init_all(&devices).expect("a two-rank communicator");
    let streams: Vec<Stream> = devices
        .iter()
        .map(|device| Stream::new(device).expect("a stream"))
        .collect();
    let dtype = NcclDataType::Float32;
    // Small integers: exact in f32 whatever the order of the sum.
    let values = |rank: usize| -> Vec<u8> {
        (0..COUNT)
            .flat_map(|i| ((i % 1000) as f32 + 1000.0 * rank as f32).to_le_bytes())
            .collect()
    };
    let buffers: Vec<DeviceAlloc> = streams
        .iter()
        .enumerate()
        .map(|(rank, stream)| upload(stream, &values(rank)))
        .collect();
    let mismatch = comms[0]
        .all_reduce(
            buffers[0].ptr(),
            buffers[0].ptr(),
            COUNT,
            dtype,
            NcclRedOp::Sum,
            &streams[1],
        )
        .expect_err("a stream of the other device");
    assert!(
        matches!(mismatch, NcclError::InvalidArgument { .. }),
        "{mismatch}"
    );
    let group = NcclGroup::start(&comms).expect("ncclGroupStart");
    for ((comm, stream), buffer) in comms.iter().zip(&streams).zip(&buffers) {
        comm.all_reduce(
            buffer.ptr(),
            buffer.ptr(),
            COUNT,
            dtype,
            NcclRedOp::Sum,
            stream,
        )
        .expect("ncclAllReduce");
    }
    group.end().expect("ncclGroupEnd");
    let want: Vec<u8> = (0..COUNT)
        .flat_map(|i| (2.0 * (i % 1000) as f32 + 1000.0).to_le_bytes())
        .collect();
    for (rank, (stream, buffer)) in streams.iter().zip(&buffers).enumerate() {
        assert!(download(stream, buffer) == want, "rank {rank}");
    }
    for comm in &comms {
        comm.poll_async_error().expect("no asynchronous error");
    }
}
