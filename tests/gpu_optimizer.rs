//! `CudaOptimizerDispatcher` on the GPU against vyre-reference. Skips without a CUDA
//! device.

mod common;

use common::gpu::{backend, reference, Rng};
use common::kernels::{accumulate, affine, vadd};
use vyre_cuda::CudaOptimizerDispatcher;
use vyre_self_substrate::optimizer::dispatcher::{
    DispatchError, OptimizerDispatcher, ResidentDispatchStep, ResidentReadRange,
};

fn has_fix(error: &DispatchError) -> bool {
    error.to_string().matches("Fix:").count() == 1
}

#[test]
fn dispatch_and_resident_chains_match_the_reference() {
    let Some(backend) = backend() else { return };
    let dispatcher = CudaOptimizerDispatcher::new(backend);
    assert!(dispatcher.supports_persistent());
    assert_eq!(
        dispatcher.device_feature_cache_key() >> 32,
        u64::from(backend.target().sm())
    );
    let n = 2048usize;
    let mut rng = Rng::new(31);
    let inputs = vec![rng.bytes_u32(n), rng.bytes_u32(n)];
    let program = vadd(n as u32, 3);
    assert_eq!(
        dispatcher.dispatch(&program, &inputs, None).unwrap(),
        reference(&program, &inputs).unwrap()
    );

    let (x0, acc0) = (rng.bytes_u32(n), rng.bytes_u32(n));
    let handles = dispatcher.alloc_resident_many(&[n * 4, n * 4]).unwrap();
    let (x, acc) = (handles[0], handles[1]);
    let (scale, add) = (affine(3, 1, 64), accumulate());
    let steps = [
        ResidentDispatchStep {
            program: &scale,
            handle_ids: &[x],
            grid_override: None,
        },
        ResidentDispatchStep {
            program: &add,
            handle_ids: &[acc, x],
            grid_override: Some([(n as u32).div_ceil(128), 1, 1]),
        },
    ];
    let x1 = reference(&scale, std::slice::from_ref(&x0))
        .unwrap()
        .remove(0);
    let acc1 = reference(&add, &[x1.clone(), acc0.clone()])
        .unwrap()
        .remove(0);
    let got = dispatcher
        .upload_resident_many_sequence_read_many(
            &[(x, &x0[..]), (acc, &acc0[..])],
            &steps,
            &[acc, x],
        )
        .unwrap();
    assert_eq!(got, vec![acc1.clone(), x1.clone()]);
    let ranges = [
        ResidentReadRange {
            handle_id: acc,
            byte_offset: 8,
            byte_len: 16,
        },
        ResidentReadRange {
            handle_id: x,
            byte_offset: 0,
            byte_len: 4,
        },
    ];
    let mut outputs = Vec::new();
    dispatcher
        .upload_resident_many_sequence_read_ranges_into(
            &[(x, &x0[..]), (acc, &acc0[..])],
            &steps,
            &ranges,
            &mut outputs,
        )
        .unwrap();
    assert_eq!(outputs, vec![acc1[8..24].to_vec(), x1[..4].to_vec()]);
    // Fills (device memsets) before the chain: acc = 0 gives acc = x1.
    let mut outputs = Vec::new();
    dispatcher
        .fill_upload_resident_many_sequence_read_ranges_into(
            &[(acc, n * 4, 0)],
            &[(x, &x0[..])],
            &steps,
            &ranges,
            &mut outputs,
        )
        .unwrap();
    assert_eq!(outputs, vec![x1[8..24].to_vec(), x1[..4].to_vec()]);
    let mut outputs = Vec::new();
    dispatcher
        .clear_upload_resident_many_sequence_read_many_into(
            &[(acc, n * 4)],
            &[(x, &x0[..])],
            &steps,
            &[acc],
            &mut outputs,
        )
        .unwrap();
    assert_eq!(outputs, vec![x1.clone()]);
    dispatcher.dispatch_resident(&scale, &[x], None).unwrap();
    let x2 = reference(&scale, std::slice::from_ref(&x1))
        .unwrap()
        .remove(0);
    assert_eq!(dispatcher.read_resident(x).unwrap(), x2);
    assert_eq!(
        dispatcher.read_resident_ranges(&ranges[1..]).unwrap(),
        vec![x2[..4].to_vec()]
    );

    // Freed handles go to the size pool and come back zeroed; using a freed one is an error.
    dispatcher.free_resident(x).unwrap();
    let error = dispatcher.read_resident(x).unwrap_err();
    assert!(
        matches!(error, DispatchError::BadInputs(_)) && has_fix(&error),
        "{error}"
    );
    assert!(dispatcher.free_resident(x).is_err());
    let again = dispatcher.alloc_resident(n * 4).unwrap();
    assert_eq!(again, x, "same-size allocation reuses the pooled buffer");
    assert!(dispatcher
        .read_resident(again)
        .unwrap()
        .iter()
        .all(|&b| b == 0));
    let error = dispatcher
        .read_resident_ranges(&[ResidentReadRange {
            handle_id: again,
            byte_offset: n * 4,
            byte_len: 1,
        }])
        .unwrap_err();
    assert!(
        matches!(error, DispatchError::BadInputs(_)) && has_fix(&error),
        "{error}"
    );
    let error = dispatcher
        .dispatch_resident(&add, &[again], None)
        .unwrap_err();
    assert!(has_fix(&error), "{error}");
    let error = dispatcher.alloc_resident(0).unwrap_err();
    assert!(has_fix(&error), "{error}");
    for h in [again, acc] {
        dispatcher.free_resident(h).unwrap();
    }
}

#[test]
fn static_uploads_are_content_addressed_and_retained() {
    let Some(backend) = backend() else { return };
    let dispatcher = CudaOptimizerDispatcher::new(backend);
    let mut rng = Rng::new(32);
    let payloads = [rng.bytes_u32(1000), rng.bytes_u32(10)];
    let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    let uploaded = backend.metric("vyre_cuda_bytes_to_device_total");
    let first = dispatcher
        .acquire_resident_static_uploads(7, &refs)
        .unwrap();
    assert!(!first.cache_hit && first.retained_by_dispatcher);
    assert_eq!(
        dispatcher.read_resident_many(&first.handles).unwrap(),
        payloads.to_vec()
    );
    let handles = first.handles.clone();
    dispatcher.release_resident_static_uploads(first).unwrap();
    let after_first = backend.metric("vyre_cuda_bytes_to_device_total");
    assert_eq!(after_first - uploaded, 4040);
    let second = dispatcher
        .acquire_resident_static_uploads(7, &refs)
        .unwrap();
    assert!(second.cache_hit);
    assert_eq!(second.handles, handles);
    assert_eq!(
        backend.metric("vyre_cuda_bytes_to_device_total"),
        after_first,
        "a hit uploads nothing"
    );
    dispatcher.release_resident_static_uploads(second).unwrap();
    // Another domain is another entry.
    let other = dispatcher
        .acquire_resident_static_uploads(8, &refs)
        .unwrap();
    assert!(!other.cache_hit);
    dispatcher.release_resident_static_uploads(other).unwrap();
    let (_, bytes, sets) = dispatcher.retained();
    assert_eq!((bytes, sets), (8080, 2));
    let live = backend.metric("vyre_cuda_resident_buffers");
    drop(dispatcher);
    assert_eq!(
        backend.metric("vyre_cuda_resident_buffers"),
        live - 4,
        "drop frees retained buffers"
    );
}
