//! Hidden text in the apps' definitions (tools, prompts, resources, resource templates), checked
//! when a catalogue is built, never per call: every string value at any depth (descriptions,
//! titles, annotations, and the whole input and output schemas: descriptions, titles, `enum`,
//! `const`, `default` and `examples` values) is stripped of it (`base::hidden_text`). What
//! identifies something cannot be stripped without changing what the app is called with, so
//! hidden text in an object key (a property name) or in a `name`, `uri` or `uriTemplate` value
//! withholds the definition whatever the gateway's policy; under `block`, any hidden text does.

use crate::base::hidden_text::{self, Hit};
use crate::data::model::DescriptionPolicy;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;

/// Keys whose string value identifies what it belongs to.
const IDENTIFIERS: [&str; 3] = ["name", "uri", "uriTemplate"];

/// What a catalogue lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Tool,
    Prompt,
    Resource,
    ResourceTemplate,
}

impl Kind {
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Prompt => "prompt",
            Kind::Resource => "resource",
            Kind::ResourceTemplate => "resource template",
        }
    }
}

/// Hidden text found in one string of a definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Where, as a path into the definition (`inputSchema.properties.q.description`), built
    /// from stripped keys so that it carries no hidden text itself.
    pub field: String,
    /// The text is a key or an identifier, which is never stripped.
    pub identifier: bool,
    #[serde(flatten)]
    pub hit: Hit,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.identifier { " (an identifier)" } else { "" };
        write!(f, "its {}{what} contains {}", self.field, self.hit)
    }
}

/// A definition the catalogue does not list, and why: what a refused call of it names. It
/// serialises and reads back, so a pending change can carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Withheld {
    pub kind: Kind,
    /// The name at the gateway (a resource's URI, stripped).
    pub name: String,
    pub findings: Vec<Finding>,
}

impl fmt::Display for Withheld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} `{}` is withheld: ", self.kind.as_str(), self.name)?;
        match self.findings.first() {
            Some(first) => write!(f, "{first}")?,
            None => f.write_str("it carries hidden text")?,
        }
        match self.findings.len() {
            0 | 1 => Ok(()),
            n => write!(f, " (and {} more findings)", n - 1),
        }
    }
}

/// Checks one definition: its hidden text is stripped in place, and the findings come back as
/// `Ok` when it may be listed (empty: it was clean) or `Err` when it is withheld.
pub(crate) fn check(def: &mut Value, policy: DescriptionPolicy) -> Result<Vec<Finding>, Vec<Finding>> {
    let mut findings = Vec::new();
    let mut path = Vec::new();
    walk(def, &mut path, false, &mut findings);
    let withhold = match policy {
        DescriptionPolicy::Strip => findings.iter().any(|f| f.identifier),
        DescriptionPolicy::Block => !findings.is_empty(),
    };
    if withhold {
        Err(findings)
    } else {
        Ok(findings)
    }
}

/// One step of a path into a definition.
enum Step<'a> {
    Key(Cow<'a, str>),
    Index(usize),
}

fn field(path: &[Step<'_>]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            Step::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Step::Index(i) => {
                s.push('[');
                s.push_str(itoa::Buffer::new().format(*i));
                s.push(']');
            }
        }
    }
    s
}

fn found(hits: Vec<Hit>, path: &[Step<'_>], identifier: bool, findings: &mut Vec<Finding>) {
    if hits.is_empty() {
        return;
    }
    let field = field(path);
    findings.extend(hits.into_iter().map(|hit| Finding { field: field.clone(), identifier, hit }));
}

fn walk<'a>(value: &'a mut Value, path: &mut Vec<Step<'a>>, identifier: bool, findings: &mut Vec<Finding>) {
    match value {
        Value::String(s) => {
            let (clean, hits) = hidden_text::strip(s);
            if let Cow::Owned(clean) = clean {
                found(hits, path, identifier, findings);
                if !identifier {
                    *s = clean;
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                path.push(Step::Index(i));
                walk(item, path, false, findings);
                path.pop();
            }
        }
        Value::Object(map) => walk_object(map, path, findings),
        _ => {}
    }
}

fn walk_object<'a>(map: &'a mut Map<String, Value>, path: &mut Vec<Step<'a>>, findings: &mut Vec<Finding>) {
    for (key, item) in map.iter_mut() {
        let (clean, hits) = hidden_text::strip(key);
        path.push(Step::Key(clean));
        found(hits, path, true, findings);
        walk(item, path, IDENTIFIERS.contains(&key.as_str()), findings);
        path.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_clean_definition_is_untouched() {
        let mut def = json!({"name": "search", "description": "Search the web ❤️", "inputSchema": {
            "type": "object", "properties": {"q": {"type": "string", "enum": ["a", "b"]}}}});
        let before = def.clone();
        assert_eq!(check(&mut def, DescriptionPolicy::Strip), Ok(vec![]));
        assert_eq!(def, before);
    }

    #[test]
    fn strip_cleans_every_string_value_and_names_where() {
        let mut def = json!({"name": "search", "title": "Se\u{200B}arch", "description": "Find.\u{E0041}\u{E0042}",
            "inputSchema": {"type": "object", "properties": {"q": {"type": "string",
                "description": "The \u{1B}[8mhidden\u{1B}[0m query", "enum": ["a\u{202E}b"]}}},
            "annotations": {"title": "t\u{7}"}});
        let findings = check(&mut def, DescriptionPolicy::Strip).unwrap();
        assert_eq!(def["title"], "Search");
        assert_eq!(def["description"], "Find.");
        assert_eq!(def["inputSchema"]["properties"]["q"]["description"], "The hidden query");
        assert_eq!(def["inputSchema"]["properties"]["q"]["enum"][0], "ab");
        assert_eq!(def["annotations"]["title"], "t");
        let fields: Vec<_> = findings.iter().map(|f| (f.field.as_str(), f.hit.class.as_str())).collect();
        assert_eq!(
            fields,
            [
                ("title", "zero_width"),
                ("description", "tag"),
                ("inputSchema.properties.q.description", "ansi_escape"),
                ("inputSchema.properties.q.enum[0]", "bidi"),
                ("annotations.title", "control"),
            ]
        );
        assert!(findings.iter().all(|f| !f.identifier));
    }

    #[test]
    fn block_withholds_and_names_the_first_finding() {
        let mut def = json!({"name": "send", "description": "Send.\u{E0049}\u{E0047}"});
        let findings = check(&mut def, DescriptionPolicy::Block).unwrap_err();
        let w = Withheld { kind: Kind::Tool, name: "send".into(), findings };
        assert_eq!(
            w.to_string(),
            "tool `send` is withheld: its description contains a Unicode tag character (U+E0049) at character 5, 2 in all"
        );
        let data = serde_json::to_value(&w).unwrap();
        assert_eq!(serde_json::from_value::<Withheld>(data.clone()).unwrap(), w, "it reads back");
        assert_eq!(
            data["findings"][0],
            json!({"field": "description", "identifier": false, "class": "tag", "code_point": "U+E0049", "at": 5, "count": 2})
        );
    }

    #[test]
    fn hidden_text_in_an_identifier_withholds_even_under_strip() {
        let mut def = json!({"name": "p", "arguments": [{"name": "ci\u{200D}ty", "description": "x"}]});
        let findings = check(&mut def, DescriptionPolicy::Strip).unwrap_err();
        assert_eq!(findings[0].field, "arguments[0].name");
        assert!(findings[0].identifier);
        assert_eq!(def["arguments"][0]["name"], "ci\u{200D}ty", "an identifier is never rewritten");
        // A property name: the path shows it stripped, so the message carries no hidden text.
        let mut def = json!({"inputSchema": {"properties": {"q\u{E0041}": {"type": "string"}}}});
        let findings = check(&mut def, DescriptionPolicy::Strip).unwrap_err();
        assert_eq!(findings[0].field, "inputSchema.properties.q");
        assert!(findings[0]
            .to_string()
            .starts_with("its inputSchema.properties.q (an identifier) contains a Unicode tag"));
    }
}
