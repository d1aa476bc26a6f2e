//! A gateway's catalogue: the tools, prompts, resources and resource templates of its connected
//! apps, filtered by `allowed_tools` and named per DESIGN Decision 5, with the map back from an
//! exposed name to (app, upstream name).

use crate::mcp::apps::AppClients;
use crate::mcp::upstream::ListMethod;
use crate::model::Gateway;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::time::Instant;

/// Longest tool name every major LLM client accepts.
const MAX_NAME: usize = 64;

/// Where an exposed name leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub app_id: String,
    pub name: String,
}

#[derive(Debug, Default)]
pub struct Catalogue {
    pub tools: Vec<Value>,
    pub prompts: Vec<Value>,
    pub resources: Vec<Value>,
    pub templates: Vec<Value>,
    tool_targets: HashMap<String, Target>,
    prompt_targets: HashMap<String, Target>,
    /// Resource URI -> app.
    resource_apps: HashMap<String, String>,
    /// (URI template prefix before the first `{`, app).
    template_apps: Vec<(String, String)>,
    /// App id -> why it is missing from the catalogue.
    pub failures: HashMap<String, String>,
    pub built: Option<Instant>,
}

fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// The name a client sees for `name` of `app_id` (Decision 5).
pub fn exposed_name(app_id: &str, name: &str, separator: &str, single_app: bool) -> String {
    let full = if single_app { name.to_string() } else { format!("{app_id}{separator}{name}") };
    if valid_name(&full) {
        return full;
    }
    // Keep what is legal, then shorten with a hash of the full name so it stays unique.
    let cleaned: String =
        full.chars().map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '_' }).collect();
    let hash = hex::encode(&Sha256::digest(full.as_bytes())[..4]);
    let keep = cleaned.len().min(MAX_NAME - 1 - hash.len());
    format!("{}_{hash}", &cleaned[..keep])
}

impl Catalogue {
    /// Asks every connected app of the gateway for its lists. A failing app drops out (its
    /// reason is kept in `failures`); the others stay.
    pub async fn build(apps: &AppClients, gw: &Gateway) -> Catalogue {
        let mut c = Catalogue::default();
        let single = gw.servers.len() == 1;
        let sep = &gw.configuration.tool_name_separator;
        for app_id in &gw.servers {
            let allowed = gw.allowed_tools.get(app_id);
            let tools = match apps.list(&gw.org_id, app_id, ListMethod::Tools).await {
                Ok(t) => t,
                Err(e) => {
                    let reason = match e {
                        crate::mcp::apps::AppError::Upstream { error, .. } => error.to_string(),
                        other => other.to_string(),
                    };
                    c.failures.insert(app_id.clone(), reason);
                    continue;
                }
            };
            for tool in tools.iter() {
                let Some(name) = tool.get("name").and_then(Value::as_str) else { continue };
                if allowed.is_some_and(|a| !a.allows(name)) {
                    continue;
                }
                let exposed = exposed_name(app_id, name, sep, single);
                let mut t = tool.clone();
                t["name"] = Value::String(exposed.clone());
                c.tools.push(t);
                c.tool_targets.insert(exposed, Target { app_id: app_id.clone(), name: name.to_string() });
            }
            if let Ok(prompts) = apps.list(&gw.org_id, app_id, ListMethod::Prompts).await {
                for p in prompts.iter() {
                    let Some(name) = p.get("name").and_then(Value::as_str) else { continue };
                    let exposed = exposed_name(app_id, name, sep, single);
                    let mut p = p.clone();
                    p["name"] = Value::String(exposed.clone());
                    c.prompts.push(p);
                    c.prompt_targets.insert(exposed, Target { app_id: app_id.clone(), name: name.to_string() });
                }
            }
            if let Ok(resources) = apps.list(&gw.org_id, app_id, ListMethod::Resources).await {
                for r in resources.iter() {
                    if let Some(uri) = r.get("uri").and_then(Value::as_str) {
                        c.resource_apps.entry(uri.to_string()).or_insert_with(|| app_id.clone());
                        c.resources.push(r.clone());
                    }
                }
            }
            if let Ok(templates) = apps.list(&gw.org_id, app_id, ListMethod::ResourceTemplates).await {
                for t in templates.iter() {
                    if let Some(tpl) = t.get("uriTemplate").and_then(Value::as_str) {
                        let prefix = tpl.split('{').next().unwrap_or_default().to_string();
                        c.template_apps.push((prefix, app_id.clone()));
                        c.templates.push(t.clone());
                    }
                }
            }
        }
        c.built = Some(Instant::now());
        c
    }

    pub fn tool(&self, exposed: &str) -> Option<&Target> {
        self.tool_targets.get(exposed)
    }

    pub fn prompt(&self, exposed: &str) -> Option<&Target> {
        self.prompt_targets.get(exposed)
    }

    /// The app serving a resource URI: a listed resource, else the longest matching template.
    pub fn resource_app(&self, uri: &str) -> Option<&str> {
        if let Some(app) = self.resource_apps.get(uri) {
            return Some(app);
        }
        self.template_apps
            .iter()
            .filter(|(prefix, _)| !prefix.is_empty() && uri.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, app)| app.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_decision_5() {
        assert_eq!(exposed_name("time", "get_current_time", "__", true), "get_current_time");
        assert_eq!(exposed_name("time", "get_current_time", "__", false), "time__get_current_time");
        let long = exposed_name("an-app-with-a-long-id", &"x".repeat(80), "__", false);
        assert!(valid_name(&long), "{long}");
        assert_ne!(long, exposed_name("an-app-with-a-long-id", &"x".repeat(81), "__", false));
        let odd = exposed_name("a", "has space/slash", "__", false);
        assert!(valid_name(&odd), "{odd}");
    }
}
