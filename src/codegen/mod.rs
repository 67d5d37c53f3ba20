//! Program -> PTX. (Being written.)

/// Codegen failure.
#[derive(Debug, Clone, thiserror::Error)]
#[error("codegen error")]
pub struct CodegenError;

impl From<CodegenError> for vyre_driver::BackendError {
    fn from(e: CodegenError) -> Self {
        vyre_driver::BackendError::new(e.to_string())
    }
}
