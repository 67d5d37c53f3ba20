//! NCCL, loaded at run time: the library and its entry points (`library`), its version
//! ([`version`]), the bootstrap id ([`NcclUniqueId`]), NCCL's data types and reduction
//! operators, and [`NcclError`]; the communicator and the calls on it ([`NcclComm`],
//! [`NcclGroup`]) are in `comm`.
//!
//! Nothing links NCCL: the library is opened on first use, never at build time and never
//! when a backend is created. cudarc's `nccl` feature is not used: it panics when the
//! library or one of its symbols is missing, and its search never tries `libnccl.so.2`,
//! the only name the `nvidia-nccl-cu13` wheel ships. The search here is
//! `$VYRE_NCCL_LIBRARY`, then `libnccl.so.2`, then `libnccl.so`; the first library that
//! opens is the one used, and it must export every entry point below and be NCCL
//! [`MINIMUM_VERSION`] or newer.

mod comm;

use super::DriverError;
pub use comm::{NcclComm, NcclGroup};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;
use std::sync::OnceLock;

/// Environment variable naming the NCCL library to load (a path, or a name the dynamic
/// loader finds), tried before `libnccl.so.2` and `libnccl.so`.
pub const LIBRARY_ENV: &str = "VYRE_NCCL_LIBRARY";

/// The library names tried after [`LIBRARY_ENV`]: the soname every NCCL 2 package and the
/// pip wheel ship, then the development symlink of `libnccl-dev`.
const LIBRARY_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

/// The oldest NCCL accepted. Every entry point bound here exists since 2.14
/// (`ncclCommFinalize`; `ncclGetLastError` since 2.13), but 2.18 is the first release with
/// `ncclCommSplit`, which communicator sub-groups (`CommGroup` ids other than WORLD) are
/// built on, and the oldest NCCL header cudarc 0.19 binds; refusing older libraries here
/// keeps one version floor for the whole several-GPU path.
pub const MINIMUM_VERSION: NcclVersion = NcclVersion {
    major: 2,
    minor: 18,
    patch: 0,
};

/// `ncclResult_t` (a C enum).
type NcclStatus = c_int;
/// `ncclComm_t`: an opaque pointer.
type RawComm = *mut c_void;
/// `cudaStream_t`, which is the driver's `CUstream`.
type RawStream = cudarc::driver::sys::CUstream;

/// `ncclSuccess`.
const SUCCESS: NcclStatus = 0;
/// `ncclInProgress`: a non-blocking operation has not finished yet (not an error).
const IN_PROGRESS: NcclStatus = 7;

/// `ncclResult_t` names, by value (`nccl.h`).
const STATUS_NAMES: [&str; 8] = [
    "ncclSuccess",
    "ncclUnhandledCudaError",
    "ncclSystemError",
    "ncclInternalError",
    "ncclInvalidArgument",
    "ncclInvalidUsage",
    "ncclRemoteError",
    "ncclInProgress",
];

/// The 128-byte `ncclUniqueId` that every rank of a communicator must be given: rank 0
/// creates it ([`NcclUniqueId::new`]) and hands it to the others out of band, for example
/// as the 256 hex characters of [`NcclUniqueId::to_hex`].
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NcclUniqueId {
    internal: [u8; Self::BYTES],
}

macro_rules! nccl_api {
    ($($field:ident = $symbol:literal: fn($($arg:ty),*) -> $ret:ty;)*) => {
        /// NCCL's entry points, resolved once from the loaded library.
        struct Api {
            $($field: unsafe extern "C" fn($($arg),*) -> $ret,)*
        }

        impl Api {
            /// Every entry point, or the first one `library` lacks.
            fn resolve(lib: &libloading::Library, library: &str) -> Result<Self, NcclError> {
                Ok(Self {
                    $($field: {
                        // SAFETY: looking a symbol up calls nothing; the fn-pointer type is
                        // the symbol's prototype in nccl.h (C enums are `int`, handles are
                        // pointers, `size_t` is `usize`), and the pointer is only called
                        // while `lib` is loaded (`Nccl` owns both).
                        let symbol = unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(
                                $symbol.as_bytes(),
                            )
                        };
                        *symbol.map_err(|_| NcclError::MissingSymbol {
                            library: library.to_owned(),
                            symbol: $symbol,
                        })?
                    },)*
                })
            }
        }
    };
}

nccl_api! {
    get_version = "ncclGetVersion": fn(*mut c_int) -> NcclStatus;
    get_error_string = "ncclGetErrorString": fn(NcclStatus) -> *const c_char;
    get_last_error = "ncclGetLastError": fn(RawComm) -> *const c_char;
    get_unique_id = "ncclGetUniqueId": fn(*mut NcclUniqueId) -> NcclStatus;
    comm_init_all = "ncclCommInitAll": fn(*mut RawComm, c_int, *const c_int) -> NcclStatus;
    comm_init_rank = "ncclCommInitRank": fn(*mut RawComm, c_int, NcclUniqueId, c_int) -> NcclStatus;
    comm_finalize = "ncclCommFinalize": fn(RawComm) -> NcclStatus;
    comm_destroy = "ncclCommDestroy": fn(RawComm) -> NcclStatus;
    comm_abort = "ncclCommAbort": fn(RawComm) -> NcclStatus;
    comm_get_async_error = "ncclCommGetAsyncError": fn(RawComm, *mut NcclStatus) -> NcclStatus;
    comm_count = "ncclCommCount": fn(RawComm, *mut c_int) -> NcclStatus;
    comm_cu_device = "ncclCommCuDevice": fn(RawComm, *mut c_int) -> NcclStatus;
    comm_user_rank = "ncclCommUserRank": fn(RawComm, *mut c_int) -> NcclStatus;
    all_reduce = "ncclAllReduce": fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclStatus;
    all_gather = "ncclAllGather": fn(*const c_void, *mut c_void, usize, c_int, RawComm, RawStream) -> NcclStatus;
    reduce_scatter = "ncclReduceScatter": fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclStatus;
    broadcast = "ncclBroadcast": fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclStatus;
    send = "ncclSend": fn(*const c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclStatus;
    recv = "ncclRecv": fn(*mut c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclStatus;
    group_start = "ncclGroupStart": fn() -> NcclStatus;
    group_end = "ncclGroupEnd": fn() -> NcclStatus;
}

/// A loaded NCCL library: where it came from, its version and its entry points.
pub(crate) struct Nccl {
    api: Api,
    path: String,
    version: NcclVersion,
    /// Keeps the library mapped while `api`'s pointers are in use; last, so it is
    /// dropped after them.
    _lib: libloading::Library,
}

impl fmt::Debug for Nccl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NCCL {} ({})", self.version, self.path)
    }
}

/// One library to try: the text the error shows, and the name handed to the loader.
#[derive(Debug, Clone)]
struct Candidate {
    shown: String,
    name: Result<String, String>,
    /// Named by the user ([`LIBRARY_ENV`]): falling back past it is worth a warning.
    explicit: bool,
}

/// The libraries to try, in order: `$VYRE_NCCL_LIBRARY` when set, then [`LIBRARY_NAMES`].
fn candidates() -> Vec<Candidate> {
    let mut list = Vec::with_capacity(3);
    if let Some(value) = std::env::var_os(LIBRARY_ENV).filter(|v| !v.is_empty()) {
        let shown = format!("${LIBRARY_ENV}={}", value.to_string_lossy());
        let name = value
            .into_string()
            .map_err(|_| "the path is not valid UTF-8".to_owned());
        list.push(Candidate {
            shown,
            name,
            explicit: true,
        });
    }
    list.extend(LIBRARY_NAMES.iter().map(|name| Candidate {
        shown: (*name).to_owned(),
        name: Ok((*name).to_owned()),
        explicit: false,
    }));
    list
}

/// Opens the first candidate that loads, resolves every entry point and checks the
/// version. Never panics; nothing is cached here (see [`library`]).
fn load(candidates: &[Candidate]) -> Result<Nccl, NcclError> {
    let mut tried = Vec::with_capacity(candidates.len());
    for candidate in candidates {
        let opened = candidate.name.clone().and_then(|name| {
            // SAFETY: opening NCCL runs its initialisers, the documented way to use it;
            // nothing is called through the handle until its symbols are resolved.
            unsafe { libloading::Library::new(name.as_str()) }.map_err(|e| loader_reason(&e, &name))
        });
        let lib = match opened {
            Ok(lib) => lib,
            Err(why) => {
                tried.push(format!("{} ({why})", candidate.shown));
                continue;
            }
        };
        if candidates.first().is_some_and(|first| first.explicit) && !candidate.explicit {
            tracing::warn!(used = %candidate.shown, tried = ?tried, "{LIBRARY_ENV} did not load; using a fallback");
        }
        let path = candidate.shown.clone();
        let api = Api::resolve(&lib, &path)?;
        let mut code = 0;
        // SAFETY: `get_version` is `ncclGetVersion(int*)` of the loaded library; the out
        // pointer is a live `c_int`.
        let status = unsafe { (api.get_version)(&mut code) };
        let version = NcclVersion::from_code(code);
        let nccl = Nccl {
            api,
            path,
            version,
            _lib: lib,
        };
        nccl.check("ncclGetVersion", status)?;
        if version < MINIMUM_VERSION {
            return Err(NcclError::TooOld {
                library: nccl.path.clone(),
                found: version,
                minimum: MINIMUM_VERSION,
            });
        }
        tracing::debug!(nccl = ?nccl, "NCCL loaded");
        return Ok(nccl);
    }
    Err(NcclError::Unavailable { tried })
}

/// The loader's reason for not opening `name`: libloading 0.9 says only "dlopen failed"
/// and keeps `dlerror()`'s text as the source, which starts with the name again.
fn loader_reason(error: &libloading::Error, name: &str) -> String {
    let reason = match std::error::Error::source(error) {
        Some(source) => source.to_string(),
        None => error.to_string(),
    };
    match reason.strip_prefix(name).and_then(|r| r.strip_prefix(": ")) {
        Some(rest) => rest.to_owned(),
        None => reason,
    }
}

/// The process's NCCL, loaded and checked on first use (the outcome, success or not, is
/// kept for the process).
pub(crate) fn library() -> Result<&'static Nccl, NcclError> {
    static NCCL: OnceLock<Result<Nccl, NcclError>> = OnceLock::new();
    NCCL.get_or_init(|| load(&candidates()))
        .as_ref()
        .map_err(Clone::clone)
}

/// The version of the NCCL library this process loads (loading it if needed), for logs.
pub fn version() -> Result<NcclVersion, NcclError> {
    Ok(library()?.version)
}

impl Nccl {
    /// `Ok` for `ncclSuccess`, else the error of `call`, with NCCL's description of the
    /// code and its last error message.
    fn check(&self, call: &'static str, status: NcclStatus) -> Result<(), NcclError> {
        if status == SUCCESS {
            return Ok(());
        }
        Err(self.error(call, status))
    }

    /// The error `status` of `call`, described by NCCL.
    fn error(&self, call: &'static str, status: NcclStatus) -> NcclError {
        let text = |ptr: *const c_char| {
            // SAFETY: NCCL returns null or a NUL-terminated string it owns, valid at least
            // until its next call on this thread; it is copied out at once.
            (!ptr.is_null()).then(|| {
                unsafe { CStr::from_ptr(ptr) }
                    .to_string_lossy()
                    .into_owned()
            })
        };
        // SAFETY: both entry points take a result code or a (here null: "currently unused")
        // communicator and only return a static or thread-local string.
        let (description, last) = unsafe {
            (
                text((self.api.get_error_string)(status)),
                text((self.api.get_last_error)(std::ptr::null_mut())),
            )
        };
        NcclError::Call {
            call,
            code: status,
            description: description.unwrap_or_default(),
            detail: last.unwrap_or_default().trim().to_owned(),
        }
    }
}

/// An NCCL version, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NcclVersion {
    /// Major version (2).
    pub major: u32,
    /// Minor version, e.g. 28 for NCCL 2.28.
    pub minor: u32,
    /// Patch level.
    pub patch: u32,
}

impl NcclVersion {
    /// Decodes `ncclGetVersion`'s code: `major * 10000 + minor * 100 + patch` since NCCL
    /// 2.9, `major * 1000 + minor * 100 + patch` before (`NCCL_VERSION_CODE` in nccl.h).
    pub fn from_code(code: i32) -> Self {
        let code = u32::try_from(code).unwrap_or(0);
        let (major, rest) = if code >= 10_000 {
            (code / 10_000, code % 10_000)
        } else {
            (code / 1_000, code % 1_000)
        };
        Self {
            major,
            minor: rest / 100,
            patch: rest % 100,
        }
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl NcclUniqueId {
    /// Size of an id in bytes (`NCCL_UNIQUE_ID_BYTES`).
    pub const BYTES: usize = 128;

    /// A fresh id from NCCL (`ncclGetUniqueId`; it opens the bootstrap socket that the
    /// other ranks connect to, so only one rank creates it).
    pub fn new() -> Result<Self, NcclError> {
        let nccl = library()?;
        let mut id = Self::from_bytes([0; Self::BYTES]);
        // SAFETY: `id` is a live, writable `ncclUniqueId` (128 bytes, `repr(C)`).
        let status = unsafe { (nccl.api.get_unique_id)(&mut id) };
        nccl.check("ncclGetUniqueId", status)?;
        Ok(id)
    }

    /// The id of these bytes (as received from the rank that created it).
    pub fn from_bytes(bytes: [u8; Self::BYTES]) -> Self {
        Self { internal: bytes }
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; Self::BYTES] {
        &self.internal
    }

    /// The id as 256 lowercase hex characters.
    pub fn to_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = String::with_capacity(2 * Self::BYTES);
        for byte in self.internal {
            hex.push(char::from(DIGITS[usize::from(byte >> 4)]));
            hex.push(char::from(DIGITS[usize::from(byte & 15)]));
        }
        hex
    }

    /// Parses [`NcclUniqueId::to_hex`]'s form: exactly 256 hex digits (either case);
    /// surrounding whitespace, such as a trailing newline, is ignored.
    pub fn from_hex(text: &str) -> Result<Self, NcclError> {
        let hex = text.trim().as_bytes();
        if hex.len() != 2 * Self::BYTES {
            return Err(NcclError::InvalidUniqueId {
                reason: format!("{} hex characters, expected {}", hex.len(), 2 * Self::BYTES),
            });
        }
        let digit = |at: usize| {
            char::from(hex[at])
                .to_digit(16)
                .map(|d| d as u8)
                .ok_or_else(|| NcclError::InvalidUniqueId {
                    reason: format!(
                        "{:?} at position {at} is not a hex digit",
                        char::from(hex[at])
                    ),
                })
        };
        let mut bytes = [0; Self::BYTES];
        for (index, byte) in bytes.iter_mut().enumerate() {
            *byte = digit(2 * index)? << 4 | digit(2 * index + 1)?;
        }
        Ok(Self::from_bytes(bytes))
    }
}

impl fmt::Debug for NcclUniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NcclUniqueId({})", self.to_hex())
    }
}

/// `ncclDataType_t` (values from nccl.h). The float8 types need NCCL 2.24 or newer; an
/// older library rejects them with `ncclInvalidArgument`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum NcclDataType {
    /// `ncclInt8`.
    Int8 = 0,
    /// `ncclUint8`.
    Uint8 = 1,
    /// `ncclInt32`.
    Int32 = 2,
    /// `ncclUint32`.
    Uint32 = 3,
    /// `ncclInt64`.
    Int64 = 4,
    /// `ncclUint64`.
    Uint64 = 5,
    /// `ncclFloat16`.
    Float16 = 6,
    /// `ncclFloat32`.
    Float32 = 7,
    /// `ncclFloat64`.
    Float64 = 8,
    /// `ncclBfloat16`.
    Bfloat16 = 9,
    /// `ncclFloat8e4m3`.
    Float8E4M3 = 10,
    /// `ncclFloat8e5m2`.
    Float8E5M2 = 11,
}

impl NcclDataType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::Int8 | Self::Uint8 | Self::Float8E4M3 | Self::Float8E5M2 => 1,
            Self::Float16 | Self::Bfloat16 => 2,
            Self::Int32 | Self::Uint32 | Self::Float32 => 4,
            Self::Int64 | Self::Uint64 | Self::Float64 => 8,
        }
    }
}

/// `ncclRedOp_t`'s built-in operators (values from nccl.h). NCCL has no bitwise
/// reductions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum NcclRedOp {
    /// `ncclSum`.
    Sum = 0,
    /// `ncclProd`.
    Prod = 1,
    /// `ncclMax`.
    Max = 2,
    /// `ncclMin`.
    Min = 3,
    /// `ncclAvg`.
    Avg = 4,
}

/// A failure to load NCCL, or of one of its calls.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NcclError {
    /// No candidate library could be opened.
    #[error("NCCL could not be loaded (tried {}); collectives across GPUs need NCCL {MINIMUM_VERSION} or newer", tried.join("; "))]
    Unavailable {
        /// Each library tried, with the loader's reason.
        tried: Vec<String>,
    },
    /// The library opened but lacks an entry point (it is not NCCL, or a very old one).
    #[error("{library} was loaded as NCCL but lacks `{symbol}`")]
    MissingSymbol {
        /// The library that was opened.
        library: String,
        /// The first missing entry point.
        symbol: &'static str,
    },
    /// The library is older than [`MINIMUM_VERSION`].
    #[error("{library} is NCCL {found}, older than NCCL {minimum}, the oldest vyre-cuda uses")]
    TooOld {
        /// The library that was opened.
        library: String,
        /// Its version.
        found: NcclVersion,
        /// The oldest accepted.
        minimum: NcclVersion,
    },
    /// An NCCL call returned an error (or a communicator reported one asynchronously).
    #[error("{call} failed: {} ({code}){}{}", status_name(*code), prefixed(": ", description), prefixed("; ", detail))]
    Call {
        /// The entry point.
        call: &'static str,
        /// The `ncclResult_t`.
        code: i32,
        /// NCCL's description of the code.
        description: String,
        /// NCCL's last error message (`ncclGetLastError`), often naming the cause.
        detail: String,
    },
    /// A unique id in text form that is not 256 hex digits.
    #[error("invalid NCCL unique id: {reason}")]
    InvalidUniqueId {
        /// What is wrong with the text.
        reason: String,
    },
    /// Arguments NCCL would reject, caught before the call.
    #[error("{message}")]
    InvalidArgument {
        /// What is wrong.
        message: String,
        /// How to call it instead.
        fix: &'static str,
    },
    /// A CUDA driver call around an NCCL call (making the device's context current).
    #[error(transparent)]
    Driver(#[from] DriverError),
}

/// The name of an `ncclResult_t`.
fn status_name(code: i32) -> &'static str {
    usize::try_from(code)
        .ok()
        .and_then(|index| STATUS_NAMES.get(index))
        .copied()
        .unwrap_or("ncclUnknownResult")
}

fn prefixed<'a>(prefix: &'a str, text: &'a str) -> impl fmt::Display + 'a {
    struct Prefixed<'a>(&'a str, &'a str);
    impl fmt::Display for Prefixed<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            if self.1.is_empty() {
                Ok(())
            } else {
                write!(f, "{}{}", self.0, self.1)
            }
        }
    }
    Prefixed(prefix, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(name: &str) -> Candidate {
        Candidate {
            shown: name.to_owned(),
            name: Ok(name.to_owned()),
            explicit: false,
        }
    }

    #[test]
    fn a_missing_library_names_every_path_tried_and_the_fix() {
        let missing = ["/nonexistent/vyre/libnccl.so.2", "/nonexistent/libnccl.so"];
        let list: Vec<Candidate> = missing.iter().map(|name| candidate(name)).collect();
        let error = load(&list).expect_err("nothing there");
        match &error {
            NcclError::Unavailable { tried } => assert_eq!(tried.len(), 2, "{tried:?}"),
            other => panic!("unexpected {other:?}"),
        }
        let text = error.to_string();
        for path in missing {
            assert!(text.contains(path), "{text}");
        }
        assert!(text.contains("cannot open shared object file"), "{text}");
        let text = crate::CudaError::from(error).to_string();
        assert_eq!(text.matches("Fix:").count(), 1, "{text}");
        assert!(text.contains("pip install nvidia-nccl-cu13"), "{text}");
        assert!(text.contains(LIBRARY_ENV), "{text}");
        assert!(text.contains("libnccl2"), "{text}");
    }

    #[test]
    fn a_library_that_is_not_nccl_names_the_missing_symbol() {
        // libm is on every glibc system and exports none of NCCL's entry points.
        let error = load(&[candidate("/nonexistent/x.so"), candidate("libm.so.6")])
            .expect_err("libm is not NCCL");
        match &error {
            NcclError::MissingSymbol { library, symbol } => {
                assert_eq!(library, "libm.so.6");
                assert_eq!(*symbol, "ncclGetVersion");
            }
            other => panic!("unexpected {other:?}"),
        }
        let text = crate::CudaError::from(error).to_string();
        assert!(text.contains("ncclGetVersion"), "{text}");
        assert_eq!(text.matches("Fix:").count(), 1, "{text}");
        assert!(text.contains(LIBRARY_ENV), "{text}");
    }

    #[test]
    fn the_environment_path_is_tried_first() {
        let list = candidates();
        let names: Vec<&str> = list.iter().map(|c| c.shown.as_str()).collect();
        let tail = &names[names.len() - 2..];
        assert_eq!(tail, ["libnccl.so.2", "libnccl.so"]);
        match std::env::var(LIBRARY_ENV) {
            Ok(value) if !value.is_empty() => {
                assert_eq!(names.len(), 3);
                assert_eq!(names[0], format!("${LIBRARY_ENV}={value}"));
            }
            _ => assert_eq!(names.len(), 2),
        }
        let bad = Candidate {
            shown: "$VYRE_NCCL_LIBRARY=\u{fffd}".into(),
            name: Err("the path is not valid UTF-8".into()),
            explicit: true,
        };
        match load(&[bad]) {
            Err(NcclError::Unavailable { tried }) => {
                assert!(tried[0].contains("not valid UTF-8"), "{tried:?}")
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn the_process_library_is_either_usable_or_a_typed_error() {
        match version() {
            Ok(found) => assert!(found >= MINIMUM_VERSION, "{found}"),
            Err(error) => {
                assert!(
                    matches!(
                        error,
                        NcclError::Unavailable { .. }
                            | NcclError::MissingSymbol { .. }
                            | NcclError::TooOld { .. }
                    ),
                    "{error}"
                );
                let text = crate::CudaError::from(error).to_string();
                assert_eq!(text.matches("Fix:").count(), 1, "{text}");
            }
        }
    }

    #[test]
    fn version_codes_decode_in_both_encodings() {
        let v = NcclVersion::from_code(22803);
        assert_eq!((v.major, v.minor, v.patch), (2, 28, 3));
        assert_eq!(v.to_string(), "2.28.3");
        assert_eq!(NcclVersion::from_code(2804).to_string(), "2.8.4");
        assert!(NcclVersion::from_code(21703) < MINIMUM_VERSION);
        assert!(NcclVersion::from_code(21801) >= MINIMUM_VERSION);
        assert!(NcclVersion::from_code(23003) > NcclVersion::from_code(22803));
        assert_eq!(NcclVersion::from_code(-1).to_string(), "0.0.0");
    }

    #[test]
    fn unique_ids_round_trip_through_hex() {
        let mut bytes = [0u8; NcclUniqueId::BYTES];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = (i as u8).wrapping_mul(37) ^ 0xa5;
        }
        let id = NcclUniqueId::from_bytes(bytes);
        let hex = id.to_hex();
        assert_eq!(hex.len(), 256);
        assert!(hex
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(&hex[..4], "a580");
        assert_eq!(NcclUniqueId::from_hex(&hex).unwrap(), id);
        assert_eq!(NcclUniqueId::from_hex(&hex.to_uppercase()).unwrap(), id);
        assert_eq!(NcclUniqueId::from_hex(&format!("{hex}\n")).unwrap(), id);
        assert_eq!(id.as_bytes(), &bytes);
        assert_eq!(std::mem::size_of::<NcclUniqueId>(), 128);
    }

    #[test]
    fn bad_hex_is_a_typed_error_with_one_fix() {
        let good = "0f".repeat(128);
        let cases = [
            (good[..254].to_owned(), "254 hex characters"),
            (format!("{good}00"), "258 hex characters"),
            (String::new(), "0 hex characters"),
            (format!("{}zz", &good[..254]), "'z' at position 254"),
            (format!("g{}", &good[1..]), "'g' at position 0"),
            (format!("{}é", &good[..254]), "position 254"),
        ];
        for (text, reason) in cases {
            let error = NcclUniqueId::from_hex(&text).expect_err("not an id");
            assert!(
                matches!(&error, NcclError::InvalidUniqueId { reason: r } if r.contains(reason)),
                "{text:?}: {error}"
            );
            let message = crate::CudaError::from(error).to_string();
            assert_eq!(message.matches("Fix:").count(), 1, "{message}");
            assert!(message.contains("to_hex"), "{message}");
        }
    }

    #[test]
    fn call_errors_name_the_call_and_result() {
        let error = NcclError::Call {
            call: "ncclAllReduce",
            code: 5,
            description: "invalid usage".into(),
            detail: "Duplicate GPU detected".into(),
        };
        assert_eq!(
            error.to_string(),
            "ncclAllReduce failed: ncclInvalidUsage (5): invalid usage; Duplicate GPU detected"
        );
        let bare = NcclError::Call {
            call: "ncclGroupEnd",
            code: 42,
            description: String::new(),
            detail: String::new(),
        };
        assert_eq!(
            bare.to_string(),
            "ncclGroupEnd failed: ncclUnknownResult (42)"
        );
        for code in 1..=8 {
            let error = NcclError::Call {
                call: "ncclCommInitAll",
                code,
                description: String::new(),
                detail: String::new(),
            };
            let text = crate::CudaError::from(error).to_string();
            assert_eq!(text.matches("Fix:").count(), 1, "{text}");
        }
    }

    #[test]
    fn enum_values_are_those_of_nccl_h() {
        use NcclDataType as T;
        let types = [
            (T::Int8, 0, 1),
            (T::Uint8, 1, 1),
            (T::Int32, 2, 4),
            (T::Uint32, 3, 4),
            (T::Int64, 4, 8),
            (T::Uint64, 5, 8),
            (T::Float16, 6, 2),
            (T::Float32, 7, 4),
            (T::Float64, 8, 8),
            (T::Bfloat16, 9, 2),
            (T::Float8E4M3, 10, 1),
            (T::Float8E5M2, 11, 1),
        ];
        for (ty, value, size) in types {
            assert_eq!(ty as i32, value, "{ty:?}");
            assert_eq!(ty.size(), size, "{ty:?}");
        }
        use NcclRedOp as O;
        let ops = [
            (O::Sum, 0),
            (O::Prod, 1),
            (O::Max, 2),
            (O::Min, 3),
            (O::Avg, 4),
        ];
        for (op, value) in ops {
            assert_eq!(op as i32, value, "{op:?}");
        }
        assert_eq!(status_name(IN_PROGRESS), "ncclInProgress");
    }
}
