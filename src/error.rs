//! The error boundary: [`CudaError`], the crate's one typed error; the `Fix:` rendering of
//! every message; the conversion to vyre's `BackendError`; the backend id.
//!
//! `codegen` and `driver` return their own typed errors ([`CodegenError`],
//! [`DriverError`]) that carry what went wrong and, for codegen, what to do instead;
//! neither knows about vyre-driver. This module is the only place that writes `Fix:` and
//! the only place that builds a `BackendError`, so every message a user sees carries
//! exactly one hint (vyre-driver's own variants append a generic `Fix:` of their own; where
//! they do, our hint goes into the message as "what to do").

use crate::codegen::CodegenError;
use crate::driver::{DriverError, DriverErrorKind, NcclError};
use std::borrow::Cow;
use std::fmt;
use vyre_driver::BackendError;
use vyre_foundation::validate::ValidationError;

/// Backend id under which vyre-cuda registers (see [`crate::compat::BACKEND_ID`]).
pub const CUDA_BACKEND_ID: &str = crate::compat::BACKEND_ID;

/// Everything that can go wrong inside vyre-cuda. `Display` is "what went wrong. Fix: what
/// to do", with exactly one `Fix:`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    /// The program cannot be lowered to PTX (unsupported construct, invalid shape, ...).
    Codegen(#[from] CodegenError),
    /// A CUDA driver call failed.
    Driver(#[from] DriverError),
    /// NCCL could not be loaded, or one of its calls failed.
    Nccl(NcclError),
    /// The caller's inputs or configuration do not fit the program's dispatch ABI.
    InvalidInput {
        /// What is wrong.
        message: String,
        /// How to fix it.
        fix: String,
    },
    /// vyre's validator rejected the program (never empty).
    InvalidProgram {
        /// The validator's findings, in its order.
        errors: Vec<ValidationError>,
    },
    /// A dispatch setting asks for something this backend does not do.
    UnsupportedSetting {
        /// The setting, e.g. "forced speculation".
        feature: &'static str,
        /// What to set instead.
        fix: &'static str,
    },
    /// An error returned by one of vyre's own checks, passed through unchanged (it carries
    /// vyre's own `Fix:`).
    Vyre(BackendError),
    /// The kernel reported a run-time error that the reference also reports.
    KernelRuntime {
        /// The reference's description of the failing operation.
        message: String,
        /// How to avoid it.
        fix: String,
    },
    /// The backend was shut down; it cannot be used any more.
    ShutDown,
    /// A sticky driver error (e.g. an illegal address) destroyed the CUDA context.
    DeviceLost {
        /// The device's ordinal.
        device: usize,
        /// The error that destroyed the context.
        cause: String,
    },
    /// The JIT helper process (`VYRE_CUDA_JIT_HELPER`) could not compile a kernel: it did
    /// not start, died (the driver's PTX compiler crashed on the kernel), or reported an
    /// error.
    JitHelper {
        /// What happened.
        message: String,
        /// How to get past it.
        fix: String,
    },
    /// A dispatch across ranks failed (timed out, or NCCL reported an asynchronous error)
    /// and every communicator it used was aborted; those ranks cannot run collectives any
    /// more.
    CollectiveAborted {
        /// What happened.
        message: String,
    },
    /// A device allocation would exceed the free device memory.
    OutOfMemory {
        /// Bytes requested.
        requested: u64,
        /// Bytes the device reported free.
        available: u64,
    },
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Self::Vyre(inner) = self {
            return write!(f, "{inner}");
        }
        let (what, fix) = self.parts();
        write!(f, "{}. Fix: {}", fold_hints(&what), fold_hints(&fix))
    }
}

/// Text from elsewhere (vyre's validator and inliner, the driver) may carry its own
/// `Fix:`; inside our message it reads "to fix:", so the message keeps exactly one.
fn fold_hints(text: &str) -> Cow<'_, str> {
    let text = text.trim_end_matches('.');
    if text.contains("Fix:") {
        Cow::Owned(text.replace("Fix:", "to fix:"))
    } else {
        Cow::Borrowed(text)
    }
}

impl CudaError {
    /// What went wrong and what to do about it.
    fn parts(&self) -> (Cow<'_, str>, Cow<'_, str>) {
        match self {
            Self::Codegen(inner) => (inner.to_string().into(), inner.fix().into()),
            Self::Driver(inner) => (inner.to_string().into(), driver_fix(inner).into()),
            Self::Nccl(inner) => (inner.to_string().into(), nccl_fix(inner)),
            Self::InvalidInput { message, fix } | Self::JitHelper { message, fix } => {
                (message.as_str().into(), fix.as_str().into())
            }
            Self::KernelRuntime { message, fix } => (
                format!("kernel run-time error: {message}").into(),
                fix.as_str().into(),
            ),
            Self::CollectiveAborted { message } => (
                format!("collective dispatch aborted: {message}").into(),
                "check every rank's error (a rank that faulted, exited or dispatched a different \
                 program leaves its peers waiting), then create the cluster (or join every rank) \
                 again; VYRE_CUDA_COLLECTIVE_TIMEOUT_MS sets how long a dispatch may wait"
                    .into(),
            ),
            Self::InvalidProgram { errors } => (
                format!(
                    "vyre's validator rejects the program: {}",
                    errors
                        .iter()
                        .map(|e| e.message())
                        .collect::<Vec<_>>()
                        .join("; ")
                )
                .into(),
                "repair the Program as the validator says before dispatching it".into(),
            ),
            Self::UnsupportedSetting { feature, fix } => (
                format!("unsupported dispatch setting: {feature}").into(),
                (*fix).into(),
            ),
            Self::Vyre(inner) => (inner.to_string().into(), "".into()),
            Self::ShutDown => (
                "the CUDA backend was shut down".into(),
                "create a new backend (CudaBackend::new or vyre_driver::acquire) after shutdown"
                    .into(),
            ),
            Self::DeviceLost { device, cause } => (
                format!("CUDA device {device} is lost: {cause}").into(),
                DEVICE_LOST_FIX.into(),
            ),
            Self::OutOfMemory {
                requested,
                available,
            } => (
                format!("device out of memory: requested {requested} bytes, {available} available")
                    .into(),
                "reduce the buffer sizes or split the dispatch, or free GPU memory held \
                 elsewhere (resident buffers, other processes)"
                    .into(),
            ),
        }
    }

    pub(crate) fn invalid_input(message: impl Into<String>, fix: impl Into<String>) -> Self {
        Self::InvalidInput {
            message: message.into(),
            fix: fix.into(),
        }
    }

    /// The construct or setting of an error vyre calls an unsupported feature.
    fn unsupported_name(&self) -> Option<&str> {
        match self {
            Self::Codegen(CodegenError::Unsupported { construct, .. }) => Some(construct),
            Self::UnsupportedSetting { feature, .. } => Some(feature),
            _ => None,
        }
    }
}

/// What to do once the context is lost.
const DEVICE_LOST_FIX: &str = "restart the process; the driver keeps this error for the whole \
     process, so in-process recovery is not possible";

/// What to do about a failed driver call, by class of error.
fn driver_fix(error: &DriverError) -> &'static str {
    match error.kind() {
        DriverErrorKind::NoDriver => {
            "install or update the NVIDIA driver (CUDA 12.0 or newer) so that libcuda.so.1 is \
             loadable, or add its directory to LD_LIBRARY_PATH"
        }
        DriverErrorKind::NoDevice => {
            "check that `nvidia-smi` lists a GPU, that CUDA_VISIBLE_DEVICES does not hide it, \
             and that VYRE_CUDA_DEVICE names a valid device ordinal"
        }
        DriverErrorKind::OutOfMemory => {
            "reduce the buffer sizes or dispatch size, or free GPU memory held by other \
             processes (see `nvidia-smi`), then retry"
        }
        DriverErrorKind::Sticky => {
            "a GPU kernel fault corrupted the CUDA context and its device buffers are lost; \
             the driver keeps this error for the whole process, so restart the process, and \
             report a vyre-cuda bug with the program that faulted"
        }
        DriverErrorKind::Jit => {
            "the driver rejected the generated PTX: report a vyre-cuda bug with the PTX and the \
             JIT log (or update the driver if the PTX version is unsupported)"
        }
        DriverErrorKind::LaunchResources => {
            "reduce the workgroup size or shared memory of the kernel; the launch needs more \
             registers or shared memory than a multiprocessor has"
        }
        DriverErrorKind::Other => {
            "check GPU health with `nvidia-smi` and retry; if the error persists, report a \
             vyre-cuda bug with this message"
        }
    }
}

/// NCCL errors; a driver error around an NCCL call is a driver error, with its hint.
impl From<NcclError> for CudaError {
    fn from(error: NcclError) -> Self {
        match error {
            NcclError::Driver(inner) => Self::Driver(inner),
            other => Self::Nccl(other),
        }
    }
}

/// Where to get an NCCL this crate can load.
const NCCL_INSTALL: &str = "install NVIDIA's NCCL 2.18 or newer (the libnccl2 package, \
     which puts libnccl.so.2 on the loader path), or `pip install nvidia-nccl-cu13` and set \
     VYRE_NCCL_LIBRARY to <site-packages>/nvidia/nccl/lib/libnccl.so.2";

/// What to do about an NCCL error, by kind (and by `ncclResult_t` for failed calls).
fn nccl_fix(error: &NcclError) -> Cow<'static, str> {
    match error {
        NcclError::Unavailable { .. } => NCCL_INSTALL.into(),
        NcclError::MissingSymbol { .. } | NcclError::TooOld { .. } => format!(
            "point VYRE_NCCL_LIBRARY at a real NCCL 2.18 or newer, or unset it and {NCCL_INSTALL}"
        )
        .into(),
        NcclError::InvalidUniqueId { .. } => "pass exactly the 256 hex characters that \
             NcclUniqueId::to_hex gave on the rank that created the id"
            .into(),
        NcclError::InvalidArgument { fix, .. } => (*fix).into(),
        NcclError::Driver(inner) => driver_fix(inner).into(),
        NcclError::Call { code, .. } => match code {
            1 => "a CUDA call inside NCCL failed: check GPU health with `nvidia-smi`, and rerun \
                  with NCCL_DEBUG=WARN to see the CUDA error"
                .into(),
            2 => "a system call inside NCCL failed (shared memory, sockets or threads): rerun \
                  with NCCL_DEBUG=WARN to see which, and check the space in /dev/shm and \
                  NCCL_SOCKET_IFNAME"
                .into(),
            3 => "NCCL hit an internal error: rerun with NCCL_DEBUG=INFO and report it to NVIDIA \
                  with that log"
                .into(),
            4 | 5 => "check the devices, ranks, counts, data type and stream given to NCCL (every \
                      rank must make the same calls in the same order); rerun with \
                      NCCL_DEBUG=WARN for NCCL's reason"
                .into(),
            6 => "a peer rank failed or exited: check the other ranks' logs, then drop (abort) \
                  and re-create the communicator on every rank"
                .into(),
            _ => "rerun with NCCL_DEBUG=WARN for NCCL's reason; if it persists, report a \
                  vyre-cuda bug with this message"
                .into(),
        },
    }
}

/// The one conversion to vyre's error type, keeping vyre's machine-readable error codes
/// (`BackendError::code`). Variants whose vyre-driver rendering adds a hint of its own get
/// text without a `Fix:`; `InvalidProgram` prints our message verbatim.
impl From<CudaError> for BackendError {
    fn from(error: CudaError) -> Self {
        if let Some(name) = error.unsupported_name() {
            let (what, fix) = error.parts();
            return BackendError::UnsupportedFeature {
                name: format!(
                    "{name}: {}; instead: {}",
                    fold_hints(&what),
                    fold_hints(&fix)
                ),
                backend: CUDA_BACKEND_ID.to_string(),
            };
        }
        match error {
            CudaError::InvalidProgram { mut errors } if !errors.is_empty() => {
                // The reference reports the first finding; so does the structured variant.
                BackendError::Validation {
                    source: errors.swap_remove(0),
                }
            }
            CudaError::DeviceLost { device, cause } => lost(device.to_string(), &cause),
            // No driver or no device: nothing was dispatched, so none of vyre's dispatch
            // variants (and their generic hints) fits; our message and hint, verbatim.
            CudaError::Driver(ref inner)
                if matches!(
                    inner.kind(),
                    DriverErrorKind::NoDriver | DriverErrorKind::NoDevice
                ) =>
            {
                BackendError::Other(error.to_string())
            }
            // No usable NCCL: likewise nothing was dispatched.
            CudaError::Nccl(
                NcclError::Unavailable { .. }
                | NcclError::MissingSymbol { .. }
                | NcclError::TooOld { .. },
            ) => BackendError::Other(error.to_string()),
            CudaError::Driver(inner) if inner.is_sticky() => {
                lost("unknown".into(), &inner.to_string())
            }
            CudaError::OutOfMemory {
                requested,
                available,
            } => BackendError::DeviceOutOfMemory {
                requested,
                available,
            },
            CudaError::Vyre(inner) => inner,
            error @ (CudaError::Codegen(_)
            | CudaError::InvalidInput { .. }
            | CudaError::InvalidProgram { .. }) => BackendError::InvalidProgram {
                fix: error.to_string(),
            },
            // vyre-driver appends a generic `Fix:` to `DispatchFailed`: ours goes into the
            // message as "what to do", and the variant keeps the machine-readable code.
            error => {
                let code = match &error {
                    CudaError::Driver(inner) => inner.code().and_then(|c| i32::try_from(c).ok()),
                    _ => None,
                };
                let (what, fix) = error.parts();
                BackendError::DispatchFailed {
                    code,
                    message: format!("{}; what to do: {}", fold_hints(&what), fold_hints(&fix)),
                }
            }
        }
    }
}

/// `BackendError::DeviceLost`, whose rendering carries vyre's own `Fix:`: ours goes into
/// the message as "what to do". vyre-cuda never re-creates a context, so the lost
/// generation is always the first, 0.
fn lost(device: String, cause: &str) -> BackendError {
    BackendError::DeviceLost {
        backend: CUDA_BACKEND_ID.to_string(),
        device,
        generation: 0,
        message: format!("{}; what to do: {}", fold_hints(cause), DEVICE_LOST_FIX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver(code: u32) -> CudaError {
        DriverError::from_code("cuTest", code)
            .with_description("something happened")
            .into()
    }

    fn every_kind() -> Vec<CudaError> {
        vec![
            CodegenError::unsupported("UnOp::Sin", "no exact lowering", "remove it").into(),
            CodegenError::invalid("bad", "repair").into(),
            CodegenError::Target {
                detail: "sm_50".into(),
                fix: "use sm_70+".into(),
            }
            .into(),
            driver(2),
            driver(700),
            DriverError::library_missing().into(),
            CudaError::invalid_input("3 inputs for 2 bindings", "pass 2"),
            CudaError::InvalidProgram {
                errors: vec![unsupported_op("a"), unsupported_op("b")],
            },
            CudaError::UnsupportedSetting {
                feature: "forced speculation",
                fix: "use SpeculationMode::Auto",
            },
            CudaError::KernelRuntime {
                message: "division by zero".into(),
                fix: "guard the divisor".into(),
            },
            CudaError::ShutDown,
            CudaError::DeviceLost {
                device: 0,
                cause: "illegal address".into(),
            },
            CudaError::JitHelper {
                message: "helper died".into(),
                fix: "retry".into(),
            },
            CudaError::OutOfMemory {
                requested: 10,
                available: 5,
            },
            NcclError::Unavailable {
                tried: vec!["libnccl.so.2 (not found)".into()],
            }
            .into(),
            NcclError::MissingSymbol {
                library: "libm.so.6".into(),
                symbol: "ncclGetVersion",
            }
            .into(),
            NcclError::TooOld {
                library: "libnccl.so.2".into(),
                found: crate::driver::NcclVersion::from_code(21703),
                minimum: crate::driver::nccl::MINIMUM_VERSION,
            }
            .into(),
            NcclError::Call {
                call: "ncclAllReduce",
                code: 5,
                description: "invalid usage".into(),
                detail: "Fix: something NCCL suggests".into(),
            }
            .into(),
            NcclError::InvalidUniqueId {
                reason: "3 hex characters".into(),
            }
            .into(),
            NcclError::InvalidArgument {
                message: "rank 3 of 2".into(),
                fix: "name a rank below the world size",
            }
            .into(),
        ]
    }

    #[test]
    fn every_message_carries_exactly_one_fix() {
        for error in every_kind() {
            let text = error.to_string();
            assert_eq!(text.matches("Fix:").count(), 1, "{text}");
            let backend = BackendError::from(error).to_string();
            assert_eq!(backend.matches("Fix:").count(), 1, "{backend}");
        }
    }

    #[test]
    fn driver_hints_follow_the_error_class() {
        let hint = |code| driver(code).to_string();
        assert!(hint(2).contains("Fix: reduce"));
        assert!(hint(700).contains("restart the process"));
        assert!(hint(100).contains("nvidia-smi"));
        assert!(hint(101).contains("VYRE_CUDA_DEVICE"));
        assert!(hint(218).contains("PTX"));
        assert!(hint(222).contains("PTX"));
        assert!(hint(34).contains("NVIDIA driver"));
        assert!(hint(701).contains("shared memory"));
        let text = CudaError::from(DriverError::invalid_ptx_text("NUL")).to_string();
        assert!(text.contains("PTX"), "{text}");
        let text = CudaError::from(DriverError::library_missing()).to_string();
        assert!(text.contains("LD_LIBRARY_PATH"), "{text}");
    }

    fn unsupported_op(op: &str) -> ValidationError {
        ValidationError::unsupported_op("test", &std::sync::Arc::from(op), 0)
    }

    #[test]
    fn driver_errors_keep_their_code() {
        match BackendError::from(driver(2)) {
            BackendError::DispatchFailed { code, message } => {
                assert_eq!(code, Some(2));
                assert!(message.contains("CUDA_ERROR_OUT_OF_MEMORY"), "{message}");
                assert!(message.contains("what to do: reduce"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_missing_driver_keeps_our_hint_alone() {
        match BackendError::from(CudaError::from(DriverError::library_missing())) {
            BackendError::Other(text) => {
                assert!(text.contains("LD_LIBRARY_PATH"), "{text}");
                assert_eq!(text.matches("Fix:").count(), 1, "{text}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_missing_nccl_keeps_our_hint_alone() {
        let error = CudaError::from(NcclError::Unavailable {
            tried: vec!["libnccl.so.2 (cannot open shared object file)".into()],
        });
        match BackendError::from(error) {
            BackendError::Other(text) => {
                assert!(text.contains("libnccl.so.2"), "{text}");
                assert!(text.contains("nvidia-nccl-cu13"), "{text}");
                assert_eq!(text.matches("Fix:").count(), 1, "{text}");
            }
            other => panic!("unexpected {other:?}"),
        }
        let lost = DriverError::from_code("cuCtxSetCurrent", 700);
        assert!(matches!(
            CudaError::from(NcclError::Driver(lost)),
            CudaError::Driver(_)
        ));
    }

    #[test]
    fn sticky_errors_are_a_lost_device() {
        let lost = CudaError::DeviceLost {
            device: 3,
            cause: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
        };
        for error in [driver(700), lost] {
            match BackendError::from(error) {
                BackendError::DeviceLost {
                    backend, message, ..
                } => {
                    assert_eq!(backend, CUDA_BACKEND_ID);
                    assert!(message.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{message}");
                    assert!(message.contains("restart the process"), "{message}");
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn validation_failures_carry_the_first_finding() {
        let error = CudaError::InvalidProgram {
            errors: vec![unsupported_op("first.op"), unsupported_op("second.op")],
        };
        assert!(error.to_string().contains("second.op"));
        match BackendError::from(error) {
            BackendError::Validation { source } => {
                assert!(source.to_string().contains("first.op"), "{source}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn unsupported_constructs_stay_unsupported_features() {
        let error: CudaError =
            CodegenError::unsupported("UnOp::Sin", "no exact lowering", "remove it").into();
        match BackendError::from(error) {
            BackendError::UnsupportedFeature { name, backend } => {
                assert!(name.starts_with("UnOp::Sin"), "{name}");
                assert_eq!(backend, CUDA_BACKEND_ID);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
