//! Optional on-disk cache of emitted PTX (`VYRE_CUDA_CACHE_DIR`), so a new process skips
//! the emitter for programs it has seen before. The driver's own JIT cache (see
//! [`crate::driver::JIT_CACHE_DEFAULTS`]) then turns the same PTX into a cached binary.
//!
//! One file per kernel key (program digest, workgroup, PTX target, emitter version), named
//! by the key's hex. A record carries a magic, a format version, its key and a blake3
//! checksum over the payload; anything that does not check out (truncation, corruption, a
//! record for another key or program) is ignored with a `tracing::warn!` and the kernel is
//! regenerated, never a failed dispatch. Writes go to a temporary file and are renamed into
//! place, so readers never see half a record.

use super::cache::KernelKey;
use crate::codegen::{
    BindingRole, EmittedKernel, KernelAbi, KernelBinding, PtxTarget, KERNEL_ENTRY,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vyre_foundation::ir::{BufferAccess, Program};

const MAGIC: &[u8; 8] = b"VYRECUDA";
const FORMAT: u32 = 6;

/// The on-disk PTX cache rooted at one directory.
#[derive(Debug)]
pub(crate) struct DiskCache {
    dir: PathBuf,
}

/// Why a record was not used.
#[derive(Debug)]
pub(crate) enum Miss {
    /// No record for the key.
    Absent,
    /// A record exists but is unusable (already logged).
    Corrupt(String),
}

impl DiskCache {
    /// A cache in `dir` (created on first store).
    pub(crate) fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    fn path(&self, key: &KernelKey) -> PathBuf {
        self.dir.join(format!("{}.vyreptx", key.hex()))
    }

    /// The kernel stored for `key`, rebuilt against `program` (names and element types
    /// come from its declarations).
    pub(crate) fn load(
        &self,
        key: &KernelKey,
        program: &Program,
        target: PtxTarget,
    ) -> Result<Arc<EmittedKernel>, Miss> {
        let path = self.path(key);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Err(Miss::Absent),
            Err(error) => return Err(corrupt(&path, format!("cannot read it: {error}"))),
        };
        decode(&bytes, key, program, target)
            .map(Arc::new)
            .map_err(|reason| corrupt(&path, reason))
    }

    /// Stores `kernel` under `key`; I/O errors are logged and otherwise ignored.
    pub(crate) fn store(&self, key: &KernelKey, kernel: &EmittedKernel) -> Result<(), String> {
        let record = encode(key, kernel);
        let path = self.path(key);
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&self.dir)?;
            let tmp = self.dir.join(format!(
                ".{}.{}.{:?}.tmp",
                key.hex(),
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::write(&tmp, &record)?;
            std::fs::rename(&tmp, &path).inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            })
        };
        write().map_err(|error| {
            tracing::warn!(path = %path.display(), %error, "vyre-cuda: cannot write the PTX disk cache; continuing without it");
            error.to_string()
        })
    }
}

fn corrupt(path: &Path, reason: String) -> Miss {
    tracing::warn!(
        path = %path.display(),
        %reason,
        "vyre-cuda: ignoring an unusable PTX disk-cache record; the kernel is regenerated"
    );
    Miss::Corrupt(reason)
}

fn encode(key: &KernelKey, kernel: &EmittedKernel) -> Vec<u8> {
    let abi = &kernel.abi;
    let mut payload = Vec::with_capacity(kernel.ptx.len() + 64 + abi.bindings.len() * 40);
    for dim in abi.workgroup_size {
        payload.extend_from_slice(&dim.to_le_bytes());
    }
    payload.extend_from_slice(&abi.shared_bytes.to_le_bytes());
    payload.push(u8::from(abi.fault_word) | (u8::from(abi.cooperative) << 1));
    payload.extend_from_slice(&abi.segments.to_le_bytes());
    payload.extend_from_slice(&abi.vector_lanes.to_le_bytes());
    payload.extend_from_slice(&(abi.bindings.len() as u32).to_le_bytes());
    for binding in &abi.bindings {
        payload.extend_from_slice(&(binding.decl_index as u32).to_le_bytes());
        payload.push(match binding.role {
            BindingRole::Input => 0,
            BindingRole::InputOutput => 1,
            BindingRole::Output => 2,
        });
        payload.push(u8::from(binding.accumulated));
        payload.extend_from_slice(&binding.element_size.to_le_bytes());
        payload.extend_from_slice(&(binding.output_bytes as u64).to_le_bytes());
        match &binding.output_byte_range {
            Some(range) => {
                payload.push(1);
                payload.extend_from_slice(&(range.start as u64).to_le_bytes());
                payload.extend_from_slice(&(range.end as u64).to_le_bytes());
            }
            None => payload.push(0),
        }
    }
    // The vector module follows exactly when `vector_lanes` > 0.
    for ptx in std::iter::once(&kernel.ptx).chain(&kernel.vector_ptx) {
        payload.extend_from_slice(&(ptx.len() as u64).to_le_bytes());
        payload.extend_from_slice(ptx.as_bytes());
    }

    let mut record = Vec::with_capacity(payload.len() + 80);
    record.extend_from_slice(MAGIC);
    record.extend_from_slice(&FORMAT.to_le_bytes());
    record.extend_from_slice(key.bytes());
    record.extend_from_slice(blake3::hash(&payload).as_bytes());
    record.extend_from_slice(&payload);
    record
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("the record is truncated".to_string());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or([0; 4]),
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or([0; 8]),
        ))
    }
    fn usize(&mut self) -> Result<usize, String> {
        usize::try_from(self.u64()?).map_err(|_| "a length does not fit usize".to_string())
    }
    /// A length-prefixed, NUL-free UTF-8 PTX module.
    fn ptx(&mut self) -> Result<String, String> {
        let len = self.usize()?;
        let ptx =
            std::str::from_utf8(self.take(len)?).map_err(|_| "the PTX is not UTF-8".to_string())?;
        if ptx.contains('\0') {
            return Err("the PTX contains a NUL byte".to_string());
        }
        Ok(ptx.to_string())
    }
}

fn decode(
    bytes: &[u8],
    key: &KernelKey,
    program: &Program,
    target: PtxTarget,
) -> Result<EmittedKernel, String> {
    let mut header = Reader(bytes);
    if header.take(8)? != MAGIC {
        return Err("bad magic".to_string());
    }
    let format = header.u32()?;
    if format != FORMAT {
        return Err(format!("record format {format}, expected {FORMAT}"));
    }
    if header.take(32)? != key.bytes() {
        return Err("the record belongs to another kernel key".to_string());
    }
    let checksum = header.take(32)?;
    let payload = header.0;
    if blake3::hash(payload).as_bytes() != checksum {
        return Err("checksum mismatch (corrupted record)".to_string());
    }
    let mut r = Reader(payload);
    let workgroup_size = [r.u32()?, r.u32()?, r.u32()?];
    let shared_bytes = r.u32()?;
    let flags = r.u8()?;
    let (fault_word, cooperative) = (flags & 1 != 0, flags & 2 != 0);
    if flags > 3 || (cooperative && !fault_word) {
        return Err(format!("unknown kernel flags {flags:#x}"));
    }
    let segments = r.u32()?;
    if segments == 0 {
        return Err("a kernel with no entry".to_string());
    }
    let vector_lanes = r.u32()?;
    if vector_lanes != 0 && vector_lanes != crate::codegen::VECTOR_LANES {
        return Err(format!("unknown vector entry width {vector_lanes}"));
    }
    let count = r.u32()? as usize;
    let buffers = program.buffers();
    let mut bindings = Vec::with_capacity(count.min(buffers.len()));
    for _ in 0..count {
        let decl_index = r.u32()? as usize;
        let decl = buffers
            .get(decl_index)
            .filter(|decl| decl.access() != BufferAccess::Workgroup)
            .ok_or_else(|| format!("binding names buffer {decl_index}, which the program lacks"))?;
        let role = match r.u8()? {
            0 => BindingRole::Input,
            1 => BindingRole::InputOutput,
            2 => BindingRole::Output,
            other => return Err(format!("unknown binding role {other}")),
        };
        let accumulated = match r.u8()? {
            0 => false,
            1 if vector_lanes != 0 => true,
            other => return Err(format!("unknown binding flags {other:#x}")),
        };
        let element_size = r.u32()?;
        if element_size == 0 {
            return Err("zero element size".to_string());
        }
        let output_bytes = r.usize()?;
        let output_byte_range = match r.u8()? {
            0 => None,
            _ => Some(r.usize()?..r.usize()?),
        };
        bindings.push(KernelBinding {
            decl_index,
            name: Arc::from(decl.name()),
            element: decl.element(),
            element_size,
            role,
            output_bytes,
            output_byte_range,
            accumulated,
        });
    }
    let storage_buffers = buffers
        .iter()
        .filter(|decl| decl.access() != BufferAccess::Workgroup)
        .count();
    if bindings.len() != storage_buffers {
        return Err("the record's bindings do not match the program".to_string());
    }
    let ptx = r.ptx()?;
    let vector_ptx = if vector_lanes > 0 {
        Some(r.ptx()?)
    } else {
        None
    };
    if !r.0.is_empty() {
        return Err("trailing bytes after the PTX".to_string());
    }
    Ok(EmittedKernel {
        ptx,
        vector_ptx,
        abi: KernelAbi {
            entry: KERNEL_ENTRY,
            workgroup_size,
            bindings,
            shared_bytes,
            fault_word,
            cooperative,
            segments,
            vector_lanes,
        },
        target,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::emit_ptx;
    use vyre_foundation::ir::{BufferDecl, DataType, Expr, Node};

    fn program() -> Program {
        Program::wrapped(
            vec![
                BufferDecl::read("a", 0, DataType::U32).with_count(8),
                BufferDecl::workgroup("tile", 4, DataType::U32),
                BufferDecl::output("out", 1, DataType::U32)
                    .with_count(8)
                    .with_output_byte_range(4..12),
            ],
            [4, 1, 1],
            vec![Node::store(
                "out",
                Expr::gid_x(),
                Expr::load("a", Expr::gid_x()),
            )],
        )
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "vyre-cuda-disk-cache-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn round_trip_reproduces_the_emitted_kernel() {
        let program = program();
        let target = PtxTarget::sm90();
        let kernel = emit_ptx(&program, None, target).unwrap();
        let key = KernelKey::new(&program.fingerprint(), kernel.abi.workgroup_size, target);
        let cache = DiskCache::new(temp_dir("round-trip"));
        assert!(matches!(
            cache.load(&key, &program, target),
            Err(Miss::Absent)
        ));
        cache.store(&key, &kernel).unwrap();
        let loaded = cache.load(&key, &program, target).unwrap();
        assert_eq!(*loaded, kernel);
    }

    #[test]
    fn corruption_truncation_and_foreign_records_are_misses_not_errors() {
        let program = program();
        let target = PtxTarget::sm90();
        let kernel = emit_ptx(&program, None, target).unwrap();
        let key = KernelKey::new(&program.fingerprint(), kernel.abi.workgroup_size, target);
        let dir = temp_dir("corrupt");
        let cache = DiskCache::new(&dir);
        cache.store(&key, &kernel).unwrap();
        let path = cache.path(&key);
        let good = std::fs::read(&path).unwrap();

        // One flipped byte in the PTX: the checksum catches it.
        let mut flipped = good.clone();
        let last = flipped.len() - 10;
        flipped[last] ^= 0x20;
        std::fs::write(&path, &flipped).unwrap();
        assert!(
            matches!(cache.load(&key, &program, target), Err(Miss::Corrupt(r)) if r.contains("checksum"))
        );

        // Truncated.
        std::fs::write(&path, &good[..good.len() / 2]).unwrap();
        assert!(matches!(
            cache.load(&key, &program, target),
            Err(Miss::Corrupt(_))
        ));

        // Garbage.
        std::fs::write(&path, b"not a record").unwrap();
        assert!(matches!(
            cache.load(&key, &program, target),
            Err(Miss::Corrupt(_))
        ));

        // A valid record stored under the wrong file name.
        let other = KernelKey::new(&program.fingerprint(), [8, 1, 1], target);
        std::fs::write(cache.path(&other), &good).unwrap();
        assert!(
            matches!(cache.load(&other, &program, target), Err(Miss::Corrupt(r)) if r.contains("another kernel key"))
        );

        // Storing again repairs the record.
        cache.store(&key, &kernel).unwrap();
        assert_eq!(*cache.load(&key, &program, target).unwrap(), kernel);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unwritable_directory_is_reported_not_fatal() {
        let dir = temp_dir("unwritable");
        std::fs::write(&dir, b"a file where the directory should be").unwrap();
        let cache = DiskCache::new(dir.join("sub"));
        let program = program();
        let kernel = emit_ptx(&program, None, PtxTarget::sm90()).unwrap();
        let key = KernelKey::new(
            &program.fingerprint(),
            kernel.abi.workgroup_size,
            PtxTarget::sm90(),
        );
        assert!(cache.store(&key, &kernel).is_err());
        assert!(cache.load(&key, &program, PtxTarget::sm90()).is_err());
        let _ = std::fs::remove_file(&dir);
    }
}
