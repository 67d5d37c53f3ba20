//! The ranks' settings from the environment, without a GPU: `VYRE_CUDA_COLLECTIVE_TIMEOUT_MS`,
//! `VYRE_CUDA_COLLECTIVE_REDUCTION`, `VYRE_CUDA_COLLECTIVE_PEER_FOLD` and `VYRE_CUDA_PEER_BARRIER` reach `CudaOptions`, bad values are errors with one
//! `Fix:`, and without a device or NCCL a cluster is a typed error, never a panic. One test
//! function, so nothing else in this process reads the environment while it changes.

use std::time::Duration;
use vyre_cuda::{
    CollectiveReduction, CudaCluster, CudaOptions, PeerBarrierKind, COLLECTIVE_PEER_FOLD_ENV,
    COLLECTIVE_REDUCTION_ENV, COLLECTIVE_TIMEOUT_ENV, PEER_BARRIER_ENV,
};

#[test]
fn collective_settings_come_from_the_environment() {
    let defaults = CudaOptions::from_env().expect("defaults parse");
    assert_eq!(defaults.collective_reduction, CollectiveReduction::Exact);
    assert_eq!(defaults.collective_timeout, Duration::from_secs(60));
    assert!(defaults.collective_peer_fold);
    assert_eq!(defaults.collective_peer_barrier, PeerBarrierKind::MemOps);

    std::env::set_var(COLLECTIVE_TIMEOUT_ENV, "250");
    std::env::set_var(COLLECTIVE_REDUCTION_ENV, "native");
    std::env::set_var(COLLECTIVE_PEER_FOLD_ENV, "0");
    std::env::set_var(PEER_BARRIER_ENV, "events");
    let options = CudaOptions::from_env().expect("valid settings parse");
    assert_eq!(options.collective_timeout, Duration::from_millis(250));
    assert_eq!(options.collective_reduction, CollectiveReduction::Native);
    assert!(!options.collective_peer_fold);
    assert_eq!(options.collective_peer_barrier, PeerBarrierKind::Events);
    std::env::set_var(PEER_BARRIER_ENV, "memops-each");
    let options = CudaOptions::from_env().expect("valid settings parse");
    assert_eq!(options.collective_peer_barrier, PeerBarrierKind::MemOpsEach);

    for (name, value) in [
        (COLLECTIVE_TIMEOUT_ENV, "soon"),
        (COLLECTIVE_REDUCTION_ENV, "fast"),
        (COLLECTIVE_PEER_FOLD_ENV, "maybe"),
        (PEER_BARRIER_ENV, "flags"),
    ] {
        let keep = std::env::var(name).ok();
        std::env::set_var(name, value);
        let text = CudaOptions::from_env()
            .expect_err("a bad value is refused")
            .to_string();
        assert!(text.contains(name), "{text}");
        assert_eq!(text.matches("Fix:").count(), 1, "{text}");
        match keep {
            Some(keep) => std::env::set_var(name, keep),
            None => std::env::remove_var(name),
        }
    }
    std::env::remove_var(COLLECTIVE_TIMEOUT_ENV);
    std::env::remove_var(COLLECTIVE_REDUCTION_ENV);
    std::env::remove_var(COLLECTIVE_PEER_FOLD_ENV);
    std::env::remove_var(PEER_BARRIER_ENV);

    // An empty device list is refused before anything is opened; with no device (or no
    // NCCL) a cluster is a typed error.
    let empty = CudaCluster::new(&[]).expect_err("no devices");
    assert_eq!(empty.to_string().matches("Fix:").count(), 1, "{empty}");
    match CudaCluster::all_visible() {
        Ok(cluster) => println!("a cluster of {} rank(s) opened", cluster.world_size()),
        Err(error) => {
            let text = error.to_string();
            assert_eq!(text.matches("Fix:").count(), 1, "{text}");
            println!("skipped: no CUDA device or NCCL ({text})");
        }
    }
}
