//! Codegen errors: one enum, data-carrying variants, every message ends in a `Fix:` hint.

use vyre_driver::BackendError;

/// Why a `Program` could not be lowered to PTX.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodegenError {
    /// The program uses an IR construct this emitter does not lower (yet).
    #[error("vyre-cuda cannot lower {construct}: {detail}. Fix: {fix}")]
    Unsupported {
        /// The construct, e.g. `UnOp::Sin` or `Node::AsyncLoad`.
        construct: String,
        /// Why it is rejected.
        detail: String,
        /// What the caller can do instead.
        fix: String,
    },
    /// The program is malformed in a way the reference would also reject.
    #[error("invalid program: {detail}. Fix: {fix}")]
    Invalid {
        /// What is wrong.
        detail: String,
        /// How to repair it.
        fix: String,
    },
    /// The requested PTX target cannot be produced.
    #[error("unsupported PTX target: {detail}. Fix: {fix}")]
    Target {
        /// What is wrong with the target.
        detail: String,
        /// How to pick a valid one.
        fix: String,
    },
}

impl CodegenError {
    pub(crate) fn unsupported(
        construct: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::Unsupported {
            construct: construct.into(),
            detail: detail.into(),
            fix: fix.into(),
        }
    }

    pub(crate) fn invalid(detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self::Invalid {
            detail: detail.into(),
            fix: fix.into(),
        }
    }

    /// The IR construct named by an `Unsupported` error (used for rejection statistics).
    #[must_use]
    pub fn construct(&self) -> Option<&str> {
        match self {
            Self::Unsupported { construct, .. } => Some(construct),
            _ => None,
        }
    }
}

impl From<CodegenError> for BackendError {
    fn from(error: CodegenError) -> Self {
        match &error {
            CodegenError::Unsupported { construct, .. } => BackendError::UnsupportedFeature {
                name: format!("{construct} ({error})"),
                backend: crate::adapter::CUDA_BACKEND_ID.to_string(),
            },
            CodegenError::Invalid { detail, fix } => BackendError::InvalidProgram {
                fix: format!("Fix: {fix} (vyre-cuda: {detail})"),
            },
            CodegenError::Target { .. } => BackendError::KernelCompileFailed {
                backend: crate::adapter::CUDA_BACKEND_ID.to_string(),
                compiler_message: error.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_stays_small_so_results_stay_cheap() {
        assert!(std::mem::size_of::<CodegenError>() <= 80);
    }

    #[test]
    fn every_variant_carries_a_fix_hint_through_backend_error() {
        for error in [
            CodegenError::unsupported("UnOp::Sin", "no exact lowering", "remove it"),
            CodegenError::invalid("bad", "repair"),
            CodegenError::Target {
                detail: "sm_50".into(),
                fix: "use sm_70+".into(),
            },
        ] {
            let backend: BackendError = error.into();
            assert!(backend.to_string().contains("Fix:"), "{backend}");
        }
    }
}
