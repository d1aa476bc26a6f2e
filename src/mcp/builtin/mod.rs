//! Built-in apps: MCP tool servers that live inside the gateway process.
//!
//! A built-in app has no transport, no session and no process: `tools/list` and `tools/call`
//! are plain function calls, so it is the cheapest possible app and the one that keeps working
//! when every upstream is down (useful for health checks and demos). Apps are looked up by the
//! name used in the YAML (`builtin: time`) with [`by_name`]; [`NAMES`] lets the config loader
//! reject an unknown name at start-up.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

pub(crate) mod time;

/// Why a built-in could not run a call. Problems with the *arguments* are not errors here: MCP
/// (2025-11-25) wants them reported as a tool result with `isError: true` so that the model can
/// correct itself, and the apps do so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuiltinError {
    /// The app has no tool of that name. The gateway answers JSON-RPC -32602
    /// `Unknown tool: NAME` (see [`crate::mcp::jsonrpc::RpcErrorObject::unknown_tool`]).
    #[error("Unknown tool: {0}")]
    UnknownTool(String),
}

impl BuiltinError {
    /// The JSON-RPC error object this maps to at the edge.
    pub(crate) fn to_error_object(&self) -> crate::mcp::jsonrpc::RpcErrorObject {
        use crate::mcp::jsonrpc::RpcErrorObject;
        match self {
            BuiltinError::UnknownTool(name) => RpcErrorObject::unknown_tool(name),
        }
    }
}

/// An in-process MCP tool server.
#[async_trait]
pub trait BuiltinApp: Send + Sync + 'static {
    /// The name used in configuration (`builtin: NAME`).
    fn name(&self) -> &'static str;

    /// MCP `Tool` objects (`name`, `title`, `description`, `inputSchema`, `outputSchema`,
    /// `annotations`), exactly as `tools/list` returns them upstream-side.
    fn tools(&self) -> Vec<Value>;

    /// Runs one tool; returns a `CallToolResult` object (`content`, optionally
    /// `structuredContent` and `isError`).
    async fn call(&self, name: &str, arguments: Value) -> Result<Value, BuiltinError>;
}

/// The built-in app configured as `builtin: NAME`, or `None` for an unknown name.
pub(crate) fn by_name(name: &str) -> Option<Arc<dyn BuiltinApp>> {
    match name {
        time::NAME => Some(Arc::new(time::TimeApp::new())),
        _ => None,
    }
}

/// A `CallToolResult` that reports a tool-level failure (`isError: true`) with one text block.
pub(crate) fn error_result(message: impl Into<String>) -> Value {
    serde_json::json!({
        "content": [{ "type": "text", "text": message.into() }],
        "isError": true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_knows_every_name() {
        let app = by_name(time::NAME).expect("the time app resolves");
        assert_eq!(app.name(), time::NAME);
        assert!(!app.tools().is_empty());
        assert!(by_name("nope").is_none());
    }

    #[test]
    fn unknown_tool_maps_to_invalid_params() {
        let e = BuiltinError::UnknownTool("x".into()).to_error_object();
        assert_eq!(e.code, crate::mcp::jsonrpc::INVALID_PARAMS);
        assert_eq!(e.message, "Unknown tool: x");
    }
}
