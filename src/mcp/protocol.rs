//! The MCP protocol facts every part agrees on, in one place: the versions toolgate speaks, to
//! clients and to apps alike (DESIGN Decision 6). A leaf: it imports nothing, so the
//! configuration may read it to validate an app's `protocol_version`.

/// Protocol versions toolgate speaks, newest first. A client asking for one of these gets it
/// echoed, any other gets the newest; an upstream answering with one of these is accepted.
pub const VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The newest version: offered to apps in `initialize`, given to clients that ask for an unknown one.
pub const LATEST: &str = VERSIONS[0];
