//! The params of a named call, read without building a tree; what a shaped tool's override
//! makes of its arguments and what the rules are told of the call; and the continuation of a
//! parked one.

use super::*;

/// The `uri` of a resource request's params; empty when absent (no resource has that uri).
pub(super) fn resource_uri(params: Option<&RawJson>) -> Cow<'_, str> {
    #[derive(serde::Deserialize)]
    struct Uri<'a> {
        #[serde(borrow, default)]
        uri: Option<Cow<'a, str>>,
    }
    params.and_then(|p| p.read::<Uri>().ok()).and_then(|u| u.uri).unwrap_or_default()
}

/// The params of a `tools/call` or `prompts/get`, read without building a tree: `name`, and every
/// other member (`arguments`, `_meta`, ...) as its text, relayed to the app unchanged.
pub(super) struct NamedParams<'a> {
    pub(super) name: Option<Cow<'a, str>>,
    pub(super) others: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> NamedParams<'a> {
    pub(super) fn get(&self, key: &str) -> Option<&RawValue> {
        self.others.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// Sets the member `key` to `value` (a shaped call's arguments), added when absent.
    pub(super) fn set(&mut self, key: &'a str, value: &'a RawValue) {
        match self.others.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.others.push((Cow::Borrowed(key), value)),
        }
    }

    /// The same params naming the app's own tool or prompt. For a stateless caller
    /// (`for_handshake_app`), as a handshake-era app takes them: without the continuation
    /// (`inputResponses`, `requestState`), which is toolgate's, and with `_meta` translated
    /// (`modern::translate_meta`); the other members are copied as their text.
    pub(super) fn renamed(&self, name: &str, for_handshake_app: bool) -> RawJson {
        struct Renamed<'a>(&'a str, &'a [(Cow<'a, str>, &'a RawValue)], Option<&'a RawJson>);
        impl serde::Serialize for Renamed<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("name", self.0)?;
                for (k, v) in self.1 {
                    m.serialize_entry(k, v)?;
                }
                if let Some(meta) = self.2 {
                    m.serialize_entry("_meta", meta)?;
                }
                m.end()
            }
        }
        if !for_handshake_app {
            return RawJson::from_value(&Renamed(name, &self.others, None));
        }
        let mut meta = None;
        let kept: Vec<_> = self
            .others
            .iter()
            .filter(|(k, v)| match k.as_ref() {
                "inputResponses" | "requestState" => false,
                "_meta" => {
                    meta = modern::translate_meta(v);
                    false
                }
                _ => true,
            })
            .cloned()
            .collect();
        RawJson::from_value(&Renamed(name, &kept, meta.as_ref()))
    }
}

impl<'de> serde::Deserialize<'de> for NamedParams<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let RawMembers(mut others) = RawMembers::deserialize(d)?;
        let name = match others.iter().position(|(k, _)| k == "name") {
            Some(i) => {
                let (_, v) = others.remove(i);
                Some(serde_json::from_str::<Text>(v.get()).map_err(serde::de::Error::custom)?.0)
            }
            None => None,
        };
        Ok(NamedParams { name, others })
    }
}

impl Call<'_> {
    /// A shaped tool's arguments (`Shape::arguments`): `None` when the call goes as sent. A
    /// call that sends what the override fixes or hides is refused (counted and logged).
    pub(super) fn shaped_arguments(&self, target: &Target<'_, '_>) -> Result<Option<Box<RawValue>>, RpcErrorObject> {
        let (Some(shape), Some(named)) = (target.shape, target.named.as_ref()) else { return Ok(None) };
        let args = named.get("arguments");
        shape.arguments(args).inspect_err(|e| {
            self.refused(e);
            if let Some((_, function)) = target.tool {
                self.log_refused(target.app_id, function, args, e, 200);
            }
        })
    }

    /// What the rules decide of a call: a `tools/call`, and the `prompts/get` and
    /// `resources/read` that rules name in their `methods`.
    pub(super) fn facts<'t>(&self, target: &'t Target<'_, '_>) -> Option<CallFacts<'t>> {
        let app = target.app_id;
        match (self.method, target.tool, target.uri.as_deref()) {
            ("tools/call", Some((tool, function)), _) => {
                let renamed_from = target.shape.and_then(|s| s.renamed_from.as_deref()).unwrap_or_default();
                Some(CallFacts::tool(tool, app, function).renamed(renamed_from))
            }
            ("prompts/get", Some((prompt, function)), _) => Some(CallFacts {
                method: RuleMethod::PromptsGet,
                tool: "",
                app,
                function,
                prompt,
                uri: "",
                renamed_from: "",
            }),
            ("resources/read", _, Some(uri)) => Some(CallFacts {
                method: RuleMethod::ResourcesRead,
                tool: "",
                app,
                function: "",
                prompt: "",
                uri,
                renamed_from: "",
            }),
            _ => None,
        }
    }
}

/// What a stateless retry carries besides the call: the client's answers to the app's
/// questions, and toolgate's state naming the call they continue.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct Continuation<'a> {
    #[serde(default)]
    pub(super) request_state: Option<String>,
    #[serde(borrow, default)]
    pub(super) input_responses: Option<HashMap<String, &'a RawValue>>,
}

/// A JSON string, borrowed from the input unless it had escapes (serde's `Cow<str>` borrows
/// only when marked `borrow`).
#[derive(serde::Deserialize)]
pub(super) struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
