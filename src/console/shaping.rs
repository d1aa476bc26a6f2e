//! What a gateway does to its tools, on its page: the tool overrides (a tool's alias, the text
//! that replaces the app's, its fixed, default and hidden arguments), the per-tool limits (a
//! glob over the exposed names, whom a limit counts, its rates and concurrency) and the external
//! guards asked about its calls (URL, phases, tools, mode, failure, time-out; never a secret,
//! which the API does not show), read from the gateway as the API shows it
//! (`GET /v1/gateways/{id}`). A field the gateway does not have reads "none": the page shows
//! what is in force, and nothing is in force then.
//!
//! Every value is the API's and goes through [`escape`]: an override's text is the operator's,
//! but a name in it may be an app's.

use super::html::{self, escape};
use serde_json::Value;

/// The gateway's `tool_overrides`, one row per tool: "none" when it has none.
pub(super) fn overrides(gateway: &Value) -> String {
    let list = gateway["tool_overrides"].as_array().filter(|l| !l.is_empty());
    let Some(list) = list else {
        return "<h2>Tool overrides</h2><p class=\"empty\" id=\"tool-overrides-none\">None: clients see each app's \
                tools as the app defines them.</p>"
            .to_string();
    };
    let mut out = String::from(
        "<h2>Tool overrides</h2><p class=\"hint\">Clients list and call each tool by its shown name, with this \
         text; fixed arguments are always sent (a client may not send them), default ones fill a missing \
         argument, hidden ones are refused.</p><div class=\"scroll\"><table class=\"overrides\"><caption>Tool \
         overrides</caption><thead><tr><th scope=\"col\">Tool</th><th scope=\"col\">Shown as</th>\
         <th scope=\"col\">Title</th><th scope=\"col\">Description</th><th scope=\"col\">Arguments</th></tr></thead><tbody>",
    );
    for o in list {
        let tool = html::text(&o["tool"]);
        let alias = html::text(&o["name"]);
        out.push_str(&format!(
            "<tr><td class=\"id\"><code>{}</code></td><td class=\"id\">{}</td><td>{}</td><td class=\"text\">{}</td><td>{}</td></tr>",
            escape(&tool),
            if alias.is_empty() { "<span class=\"empty\">its own name</span>".to_string() } else { code(&alias) },
            replaced(&o["title"]),
            replaced(&o["description"]),
            arguments(o),
        ));
    }
    out.push_str("</tbody></table></div>");
    out
}

/// An override's replacement text, or a word saying the app's own text stays.
fn replaced(v: &Value) -> String {
    match v.as_str() {
        Some(s) => escape(s),
        None => "<span class=\"empty\">the app's</span>".to_string(),
    }
}

fn code(s: &str) -> String {
    format!("<code>{}</code>", escape(s))
}

/// An override's arguments as a list: `fixed name = value`, `default name = value`, `hidden name`.
fn arguments(o: &Value) -> String {
    let mut items = Vec::new();
    for (kind, key) in [("fixed", "fixed_arguments"), ("default", "default_arguments")] {
        for (name, value) in o[key].as_object().into_iter().flatten() {
            items.push(format!("<li>{kind} {} = {}</li>", code(name), code(&value.to_string())));
        }
    }
    for name in o["hidden_arguments"].as_array().into_iter().flatten() {
        items.push(format!("<li>hidden {}</li>", code(&html::text(name))));
    }
    if items.is_empty() {
        return "<span class=\"empty\">as the app defines them</span>".to_string();
    }
    format!("<ul class=\"args\">{}</ul>", items.concat())
}

/// The gateway's `tool_limits`, one row per limit: "none" when it has none (or the field is not
/// in its answer).
pub(super) fn limits(gateway: &Value) -> String {
    let list = gateway["tool_limits"].as_array().filter(|l| !l.is_empty());
    let Some(list) = list else {
        return "<h2>Tool limits</h2><p class=\"empty\" id=\"tool-limits-none\">None: a tool's calls are bounded by \
                the key's and the organisation's limits only.</p>"
            .to_string();
    };
    let mut out = String::from(
        "<h2>Tool limits</h2><p class=\"hint\">A call past a limit is answered with an error result saying when to \
         try again, and its log entry is marked <span class=\"badge refused\">limited</span>.</p>\
         <div class=\"scroll\"><table class=\"limits\"><caption>Tool limits</caption><thead><tr>\
         <th scope=\"col\">Tools</th><th scope=\"col\">Counted per</th><th scope=\"col\">Per minute</th>\
         <th scope=\"col\">Per hour</th><th scope=\"col\">Per day</th><th scope=\"col\">Concurrent</th></tr></thead><tbody>",
    );
    for l in list {
        out.push_str(&format!(
            "<tr><td class=\"id\">{}</td><td class=\"id\">{}</td>",
            code(&html::text(&l["tool"])),
            {
                let per = html::text(&l["per"]);
                escape(if per.is_empty() { "caller" } else { &per })
            }
        ));
        for key in ["requests_per_minute", "requests_per_hour", "requests_per_day", "concurrent"] {
            let v = html::text(&l[key]);
            let shown = if v.is_empty() { "<span class=\"empty\">—</span>".to_string() } else { escape(&v) };
            out.push_str(&format!("<td class=\"id\">{shown}</td>"));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
    out
}

/// The gateway's external guards (`guards`), one row per guard in the order they are asked:
/// "none" when it has none.
pub(super) fn guards(gateway: &Value) -> String {
    let list = gateway["guards"].as_array().filter(|l| !l.is_empty());
    let Some(list) = list else {
        return "<h2>External guards</h2><p class=\"empty\" id=\"guards-none\">None: no service outside toolgate \
                is asked about this gateway's calls.</p>"
            .to_string();
    };
    let mut out = String::from(
        "<h2>External guards</h2><p class=\"hint\">Each guard is asked, in this order, before a call reaches its \
         app (<code>request</code>) and before its result reaches the client (<code>response</code>); a call's \
         log entry shows what each decided.</p><div class=\"scroll\"><table class=\"guards\"><caption>External \
         guards</caption><thead><tr><th scope=\"col\">URL</th><th scope=\"col\">On</th><th scope=\"col\">Tools</th>\
         <th scope=\"col\">Mode</th><th scope=\"col\">If it cannot answer</th><th scope=\"col\">Time-out</th>\
         </tr></thead><tbody>",
    );
    for g in list {
        let on: Vec<String> = g["on"].as_array().into_iter().flatten().map(html::text).collect();
        let failure = html::text(&g["failure"]);
        out.push_str(&format!(
            "<tr><td class=\"id\">{}</td><td class=\"id\">{}</td><td class=\"id\">{}</td><td class=\"id\">{}</td>\
             <td>{}</td><td class=\"id\">{} ms</td></tr>",
            code(&html::text(&g["url"])),
            escape(&on.join(", ")),
            code(&html::text(&g["tools"])),
            escape(&html::text(&g["mode"])),
            escape(if failure == "open" { "open: the call goes on" } else { "closed: the call is refused" }),
            escape(&html::text(&g["timeout_ms"])),
        ));
    }
    out.push_str("</tbody></table></div>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_gateway_without_overrides_or_limits_reads_none() {
        let g = json!({ "id": "gw_1", "tool_overrides": [] });
        assert!(overrides(&g).contains("id=\"tool-overrides-none\""));
        assert!(limits(&g).contains("id=\"tool-limits-none\""), "no tool_limits field: none");
        assert!(limits(&json!({ "tool_limits": null })).contains("tool-limits-none"));
    }

    #[test]
    fn overrides_show_the_alias_text_and_arguments_escaped() {
        let g = json!({ "tool_overrides": [{
            "tool": "time__get_current_time", "name": "now<b>", "description": "Says <script>",
            "fixed_arguments": { "timezone": "UTC" }, "default_arguments": { "format": "YYYY" },
            "hidden_arguments": ["secret"],
        }]});
        let html = overrides(&g);
        assert!(html.contains("<code>time__get_current_time</code>"), "{html}");
        assert!(html.contains("<code>now&lt;b&gt;</code>") && html.contains("Says &lt;script&gt;"), "{html}");
        assert!(html.contains("<li>fixed <code>timezone</code> = <code>&quot;UTC&quot;</code></li>"), "{html}");
        assert!(html.contains("<li>default <code>format</code> = <code>&quot;YYYY&quot;</code></li>"), "{html}");
        assert!(html.contains("<li>hidden <code>secret</code></li>"), "{html}");
        assert!(html.contains("<td><span class=\"empty\">the app's</span></td>"), "no title: the app's stays: {html}");
        assert!(!html.contains("<script>") && !html.contains("<b>"));
    }

    #[test]
    fn limits_show_each_rate_and_a_dash_for_none() {
        let g = json!({ "tool_limits": [
            { "tool": "crm__*", "per": "user", "requests_per_minute": 5, "concurrent": 2 },
            { "tool": "<x>", "requests_per_day": 1000 },
        ]});
        let html = limits(&g);
        assert!(html.contains("<code>crm__*</code></td><td class=\"id\">user</td><td class=\"id\">5</td>"), "{html}");
        assert!(html.contains("<td class=\"id\">2</td></tr>"), "{html}");
        assert!(html.contains("<code>&lt;x&gt;</code></td><td class=\"id\">caller</td>"), "{html}");
        assert!(html.contains("<td class=\"id\">1000</td>"), "{html}");
    }

    #[test]
    fn guards_show_each_guard_escaped_and_none_without() {
        assert!(guards(&json!({ "id": "gw_1" })).contains("id=\"guards-none\""));
        assert!(guards(&json!({ "guards": [] })).contains("guards-none"));
        let g = json!({ "guards": [
            { "id": "grd_1", "url": "https://dlp.example/check?a=<b>", "on": ["request", "response"], "tools": "crm__*",
              "timeout_ms": 2000, "failure": "closed", "mode": "enforce" },
            { "id": "grd_2", "url": "https://log.example/", "on": ["response"], "tools": "*",
              "timeout_ms": 500, "failure": "open", "mode": "log" },
        ]});
        let html = guards(&g);
        assert!(html.contains("<code>https://dlp.example/check?a=&lt;b&gt;</code>"), "{html}");
        assert!(
            html.contains("request, response</td><td class=\"id\"><code>crm__*</code></td><td class=\"id\">enforce"),
            "{html}"
        );
        assert!(html.contains("closed: the call is refused</td><td class=\"id\">2000 ms"), "{html}");
        assert!(html.contains(">log</td>") && html.contains("open: the call goes on"), "{html}");
        assert!(!html.contains("<b>"), "{html}");
    }
}
