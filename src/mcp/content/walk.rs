//! One walk over a JSON value an app sent: every string a model reads stripped of hidden text
//! (`base::hidden_text`, the same code as the definitions) and of secrets (`mcp::redact`), while
//! what identifies something (object keys, ids, URIs, types, everything under `_meta`) is only
//! looked at: hidden text there cannot be removed without changing what the client is given a
//! handle on, so it blocks the answer.

use crate::base::hidden_text::{self, Hit};
use crate::mcp::redact;
use serde_json::Value;

/// Members whose string value identifies something rather than being read as text.
const IDENTIFIERS: [&str; 10] =
    ["uri", "id", "type", "mimeType", "role", "taskId", "progressToken", "requestId", "cursor", "nextCursor"];

/// What the walk may change.
#[derive(Clone, Copy)]
pub(super) struct Rewrite {
    /// Hidden text is looked for (a policy other than `off`).
    pub hidden: bool,
    /// Hidden text is removed (`strip`).
    pub strip: bool,
    /// Secrets are looked for.
    pub redact: bool,
    /// Secrets are replaced (not `log`).
    pub replace: bool,
}

/// What one walk found.
#[derive(Default)]
pub(super) struct Found {
    /// Hidden text in text the model reads: the hit and where (`content[0].text`).
    pub hidden: Vec<(Hit, String)>,
    /// Hidden text in an identifier.
    pub identifier: Vec<(Hit, String)>,
    /// Secrets by kind.
    pub secrets: Vec<(&'static str, usize)>,
    /// Something was rewritten: the value must be written anew.
    pub changed: bool,
}

impl Found {
    pub(super) fn any(&self) -> bool {
        !self.hidden.is_empty() || !self.identifier.is_empty() || !self.secrets.is_empty()
    }

    fn secret(&mut self, kind: &'static str, n: usize) {
        match self.secrets.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, count)) => *count += n,
            None => self.secrets.push((kind, n)),
        }
    }
}

/// Walks `v` (at `path`), rewriting as `rw` says.
pub(super) fn walk(v: &mut Value, path: &mut String, identifier: bool, rw: Rewrite, found: &mut Found) {
    match v {
        Value::String(s) => text(s, path, identifier, rw, found),
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push('[');
                path.push_str(itoa::Buffer::new().format(i));
                path.push(']');
                walk(item, path, identifier, rw, found);
                path.truncate(len);
            }
        }
        Value::Object(members) => {
            for (key, item) in members.iter_mut() {
                let len = path.len();
                let (clean, hits) = hidden_text::strip(key);
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&clean);
                if rw.hidden {
                    found.identifier.extend(hits.into_iter().map(|h| (h, path.clone())));
                }
                let ident = identifier || key == "_meta" || IDENTIFIERS.contains(&key.as_str());
                walk(item, path, ident, rw, found);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

fn text(s: &mut String, path: &str, identifier: bool, rw: Rewrite, found: &mut Found) {
    if rw.hidden {
        let (clean, hits) = hidden_text::strip(s);
        if !hits.is_empty() {
            let at = if identifier { &mut found.identifier } else { &mut found.hidden };
            at.extend(hits.into_iter().map(|h| (h, path.to_string())));
            if rw.strip && !identifier {
                *s = clean.into_owned();
                found.changed = true;
            }
        }
    }
    if rw.redact && !identifier {
        let (clean, kinds) = redact::redact(s);
        if kinds.is_empty() {
            return;
        }
        for (kind, n) in kinds {
            found.secret(kind, n);
        }
        if rw.replace {
            *s = clean.into_owned();
            found.changed = true;
        }
    }
}
