//! Loaded-kernel cache: one PTX generation and one module load per (program, workgroup
//! shape, target); every later dispatch of the same program is a single hash lookup.

use crate::codegen::{KernelAbi, PtxTarget, EMITTER_VERSION};
use crate::driver::Function;
use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex};

/// blake3 over the program's exact identity (its fingerprint plus the signs of its zero
/// literals, see `identity.rs`), the effective workgroup size, the PTX target and the
/// emitter version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct KernelKey([u8; 32]);

impl KernelKey {
    pub(crate) fn new(program_identity: &[u8; 32], workgroup: [u32; 3], target: PtxTarget) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(program_identity);
        for dim in workgroup {
            hasher.update(&dim.to_le_bytes());
        }
        hasher.update(&target.sm().to_le_bytes());
        hasher.update(&target.isa().major.to_le_bytes());
        hasher.update(&target.isa().minor.to_le_bytes());
        hasher.update(&EMITTER_VERSION.to_le_bytes());
        Self(*hasher.finalize().as_bytes())
    }
}

/// A kernel ready to launch.
pub(crate) struct LoadedKernel {
    pub(crate) abi: KernelAbi,
    /// One entry per segment, launched in order (see `KernelAbi::segments`).
    pub(crate) functions: Vec<Function>,
}

#[derive(Default)]
pub(crate) struct KernelCache {
    kernels: Mutex<FxHashMap<KernelKey, Arc<LoadedKernel>>>,
}

impl KernelCache {
    pub(crate) fn get(&self, key: &KernelKey) -> Option<Arc<LoadedKernel>> {
        self.kernels.lock().ok()?.get(key).cloned()
    }

    pub(crate) fn insert(&self, key: KernelKey, kernel: Arc<LoadedKernel>) -> Arc<LoadedKernel> {
        match self.kernels.lock() {
            Ok(mut kernels) => Arc::clone(kernels.entry(key).or_insert(kernel)),
            Err(_) => kernel,
        }
    }

    pub(crate) fn clear(&self) {
        if let Ok(mut kernels) = self.kernels.lock() {
            kernels.clear();
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.kernels.lock().map(|k| k.len()).unwrap_or(0)
    }
}
