//! The YAML configuration loader: `Config::parse` (what `toolgate --config` and `check-config`
//! run on a file's text) — serde_yaml with `deny_unknown_fields`, then validation.
//!
//! Property beyond "no panic": a refused file is refused with the field named (`field: message`,
//! never an empty field), as the README promises.
//!
//! Fields naming files (`tls_ca_file`, `jwt.keys[].pem_file`, `jwks_file`) are read at load; an
//! input naming a device or a kernel file (`/dev/zero` would be read for ever, as it would be if
//! an operator wrote it) is skipped: the configuration is the operator's, not an attacker's.

use super::{Features, Outcome};
use toolgate::config::{Config, ConfigError};

pub fn run(data: &[u8]) -> Features {
    let mut out = Outcome::new();
    let Ok(text) = std::str::from_utf8(data) else {
        out.add("not-utf8");
        return out.finish();
    };
    if ["/dev", "/proc", "/sys"].iter().any(|p| text.contains(p)) {
        out.add("skipped");
        return out.finish();
    }
    match Config::parse(text) {
        Ok(c) => {
            out.add("ok");
            out.add_count(c.apps.len());
            out.add_count(c.api_keys.len() + c.users.len() + c.organizations.len());
            out.add(c.environment.as_str());
            out.add(if c.jwt.is_some() { "jwt" } else { "no-jwt" });
        }
        Err(ConfigError::Invalid { field, message }) => {
            assert!(!field.is_empty(), "a refusal must name the field: {message}");
            out.add("invalid");
            // The field path without indices, and the message without the offending value:
            // a new pair is a new branch of the loader.
            out.add_field(&field, super::YAML);
            out.separate();
            // serde_yaml starts its message with the path again, the input's own map keys in
            // it unquoted: read from the last `: ` before the first quoted value.
            let head = message.find(['`', '"']).unwrap_or(message.len());
            out.add_text(&message[message[..head].rfind(": ").map_or(0, |i| i + 2)..]);
        }
        Err(e) => out.add_text(&e.to_string()),
    }
    out.finish()
}
