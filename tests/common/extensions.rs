//! IR extensions no evaluator knows: the reference fails where it reaches one and runs
//! programs that never do.

use std::sync::Arc;
use vyre_foundation::ir::{DataType, Expr, ExprNode, Node, NodeExtension};

#[derive(Debug)]
struct UnknownNode;

impl NodeExtension for UnknownNode {
    fn extension_kind(&self) -> &'static str {
        "vyre_cuda_tests.unknown_node"
    }
    fn debug_identity(&self) -> &str {
        "unknown-node"
    }
    fn stable_fingerprint(&self) -> [u8; 32] {
        [3; 32]
    }
    fn validate_extension(&self) -> Result<(), String> {
        Ok(())
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[derive(Debug)]
struct UnknownExpr(DataType);

impl ExprNode for UnknownExpr {
    fn extension_kind(&self) -> &'static str {
        "vyre_cuda_tests.unknown_expr"
    }
    fn debug_identity(&self) -> &str {
        "unknown-expr"
    }
    fn result_type(&self) -> Option<DataType> {
        Some(self.0.clone())
    }
    fn cse_safe(&self) -> bool {
        true
    }
    fn stable_fingerprint(&self) -> [u8; 32] {
        [4; 32]
    }
    fn validate_extension(&self) -> Result<(), String> {
        Ok(())
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

pub fn unknown_node() -> Node {
    Node::Opaque(Arc::new(UnknownNode))
}

pub fn unknown_expr(ty: DataType) -> Expr {
    Expr::Opaque(Arc::new(UnknownExpr(ty)))
}
