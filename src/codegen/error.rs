//! Codegen errors: one enum, data-carrying variants. Each carries what to do instead
//! (`fix`); the crate's error boundary (`crate::error`) renders it as the `Fix:` hint.

/// Why a `Program` could not be lowered to PTX.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodegenError {
    /// The program uses an IR construct this emitter does not lower (yet).
    #[error("vyre-cuda cannot lower {construct}: {detail}")]
    Unsupported {
        /// The construct, e.g. `UnOp::Sin` or `Node::AsyncLoad`.
        construct: String,
        /// Why it is rejected.
        detail: String,
        /// What the caller can do instead.
        fix: String,
    },
    /// The program is malformed in a way the reference would also reject.
    #[error("invalid program: {detail}")]
    Invalid {
        /// What is wrong.
        detail: String,
        /// How to repair it.
        fix: String,
    },
    /// The requested PTX target cannot be produced.
    #[error("unsupported PTX target: {detail}")]
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

    /// What the caller can do about it.
    #[must_use]
    pub fn fix(&self) -> &str {
        match self {
            Self::Unsupported { fix, .. }
            | Self::Invalid { fix, .. }
            | Self::Target { fix, .. } => fix,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_stays_small_so_results_stay_cheap() {
        assert!(std::mem::size_of::<CodegenError>() <= 80);
    }
}
