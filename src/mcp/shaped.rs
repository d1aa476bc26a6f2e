//! Shaped tools: a gateway's `tool_overrides` (`docs/governance.md`, "Shaped tools"). An
//! override renames a tool, replaces its title and description, and fixes, defaults or hides
//! some of its arguments. The catalogue shows the shaped definition and keeps a [`Shape`] beside
//! the tool's target, built once per catalogue, so that a call of a gateway without overrides
//! pays one `Option` check and a shaped call reads its arguments once.
//!
//! What the app's definition is stays the app's: pins judge the app's definition as the app
//! sends it (a change of it still waits for approval), and the override, the admin's own text,
//! is a protected change of the gateway (`api/gateway_guards.rs`).

use crate::data::model::ToolOverride;
use crate::mcp::jsonrpc::RpcErrorObject;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// What an override does to the calls of one tool.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Shape {
    /// The tool's name at the gateway before the rename, when it is renamed: rules decide a
    /// call under this name too, so that a rename does not lift a rule that named it.
    pub renamed_from: Option<String>,
    fixed: Map<String, Value>,
    defaults: Map<String, Value>,
    hidden: Vec<String>,
}

impl Shape {
    /// The shape of `o`; `renamed` when its alias is the tool's name in the catalogue.
    pub fn of(o: &ToolOverride, renamed: bool) -> Shape {
        Shape {
            renamed_from: renamed.then(|| o.tool.clone()),
            fixed: o.fixed_arguments.clone(),
            defaults: o.default_arguments.clone(),
            hidden: o.hidden_arguments.clone(),
        }
    }

    /// The arguments the override sets (what an external guard's replacement must keep).
    pub(crate) fn fixed(&self) -> &Map<String, Value> {
        &self.fixed
    }

    /// The call's arguments as the app gets them: `None` when the override leaves them as sent;
    /// else the fixed values put in, the defaults where the call has none. A call that sends a
    /// fixed or hidden argument, or arguments that are not an object, is invalid (-32602).
    pub fn arguments(&self, given: Option<&RawValue>) -> Result<Option<Box<RawValue>>, RpcErrorObject> {
        if self.fixed.is_empty() && self.defaults.is_empty() && self.hidden.is_empty() {
            return Ok(None);
        }
        let mut args = match given.map(|a| serde_json::from_str::<Value>(a.get())) {
            None | Some(Ok(Value::Null)) => Map::new(),
            Some(Ok(Value::Object(m))) => m,
            Some(_) => return Err(RpcErrorObject::invalid_params("params.arguments must be an object")),
        };
        if let Some(k) = args.keys().find(|k| self.fixed.contains_key(k.as_str()) || self.hidden.contains(k)) {
            let why = if self.fixed.contains_key(k.as_str()) { "is set by the gateway" } else { "is not taken" };
            return Err(RpcErrorObject::invalid_params(format!("argument `{k}` {why}: leave it out"))
                .with_data(json!({ "argument": k })));
        }
        for (k, v) in &self.fixed {
            args.insert(k.clone(), v.clone());
        }
        for (k, v) in &self.defaults {
            args.entry(k.clone()).or_insert_with(|| v.clone());
        }
        serde_json::value::to_raw_value(&args)
            .map(Some)
            .map_err(|e| RpcErrorObject::internal(format!("cannot write the shaped arguments: {e}")))
    }
}

/// `def`, a tool's definition, as `o` shows it under `name`: its text replaced, its fixed and
/// hidden arguments gone from the input schema, its defaulted ones not required and carrying
/// the gateway's default.
pub(crate) fn definition(def: &mut Value, o: &ToolOverride, name: &str) {
    def["name"] = Value::String(name.to_string());
    if let Some(t) = &o.title {
        def["title"] = Value::String(t.clone());
    }
    if let Some(d) = &o.description {
        def["description"] = Value::String(d.clone());
    }
    let Some(schema) = def.get_mut("inputSchema").and_then(Value::as_object_mut) else { return };
    let gone = |k: &str| o.fixed_arguments.contains_key(k) || o.hidden_arguments.iter().any(|h| h == k);
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        props.retain(|k, _| !gone(k));
        for (k, v) in &o.default_arguments {
            if let Some(p) = props.get_mut(k).and_then(Value::as_object_mut) {
                p.insert("default".into(), v.clone());
            }
        }
    }
    if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|r| r.as_str().is_none_or(|r| !gone(r) && !o.default_arguments.contains_key(r)));
    }
}

/// Why `value` does not fit the JSON Schema `schema` of one argument, as far as its `type`,
/// `enum` and `const` say (what an override's fixed and default values are checked against).
pub(crate) fn misfit(schema: &Value, value: &Value) -> Option<String> {
    let fits = |t: &str| match t {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "null" => value.is_null(),
        _ => true,
    };
    match schema.get("type") {
        Some(Value::String(t)) if !fits(t) => return Some(format!("must be of type {t}, as the tool's schema says")),
        Some(Value::Array(ts)) if !ts.iter().filter_map(Value::as_str).any(fits) => {
            return Some(format!("must be of a type of {}, as the tool's schema says", Value::Array(ts.clone())));
        }
        _ => {}
    }
    if let Some(Value::Array(allowed)) = schema.get("enum") {
        if !allowed.contains(value) {
            return Some(format!("must be one of {}, as the tool's schema says", Value::Array(allowed.clone())));
        }
    }
    match schema.get("const") {
        Some(c) if c != value => Some(format!("must be {c}, as the tool's schema says")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn over(v: Value) -> ToolOverride {
        serde_json::from_value(v).expect("an override")
    }

    #[test]
    fn the_definition_is_shaped() {
        let mut def = json!({"name": "echo", "description": "Echoes", "inputSchema": {"type": "object",
            "properties": {"message": {"type": "string"}, "loud": {"type": "boolean"}, "lang": {"type": "string"}},
            "required": ["message", "lang"]}});
        let o = over(json!({"tool": "echo", "name": "say", "title": "Say", "description": "Says it",
            "fixed_arguments": {"loud": true}, "default_arguments": {"lang": "en"}, "hidden_arguments": []}));
        definition(&mut def, &o, "say");
        assert_eq!(
            def,
            json!({"name": "say", "title": "Say", "description": "Says it", "inputSchema": {"type": "object",
                "properties": {"message": {"type": "string"}, "lang": {"type": "string", "default": "en"}},
                "required": ["message"]}})
        );
    }

    #[test]
    fn arguments_are_fixed_defaulted_and_refused() {
        let o = over(json!({"tool": "t", "fixed_arguments": {"a": 1}, "default_arguments": {"b": 2},
            "hidden_arguments": ["c"]}));
        let s = Shape::of(&o, false);
        let raw = |t: &str| RawValue::from_string(t.to_string()).unwrap();
        let got = |t: Option<&str>| {
            let given = t.map(raw);
            s.arguments(given.as_deref()).map(|a| serde_json::from_str::<Value>(a.unwrap().get()).unwrap())
        };
        assert_eq!(got(None).unwrap(), json!({"a": 1, "b": 2}));
        assert_eq!(got(Some(r#"{"b": 5, "d": 0}"#)).unwrap(), json!({"a": 1, "b": 5, "d": 0}));
        for sent in [r#"{"a": 2}"#, r#"{"c": 0}"#, "[1]"] {
            assert_eq!(got(Some(sent)).unwrap_err().code, -32602, "{sent}");
        }
        let plain = Shape::of(&over(json!({"tool": "t", "name": "u"})), true);
        assert!(plain.arguments(Some(&raw("{}"))).unwrap().is_none(), "nothing to shape: the text is sent as it came");
        assert_eq!(plain.renamed_from.as_deref(), Some("t"));
    }

    #[test]
    fn values_are_checked_against_the_schema() {
        assert!(misfit(&json!({"type": "integer"}), &json!(3)).is_none());
        assert!(misfit(&json!({"type": "integer"}), &json!("3")).is_some());
        assert!(misfit(&json!({"type": ["string", "null"]}), &json!(null)).is_none());
        assert!(misfit(&json!({"type": "string", "enum": ["a", "b"]}), &json!("c")).is_some());
        assert!(misfit(&json!({}), &json!({"any": 1})).is_none());
    }
}
