//! The tool playground on a gateway's page: pick a tool, fill a form made from its input schema,
//! and call it through the gateway as the signed-in user. The console calls on the server side
//! (`server::gateway_calls`): the call takes the path a client's call takes (the rate limit,
//! the gateway's quotas and rules, the log entry), with the user's web session as the caller;
//! the MCP endpoint itself never reads the console's cookie. Trying tools takes `gateways:write`
//! (a viewer reads the gateway, a developer tries its tools); the call is then decided by the
//! gateway as any call is.

use super::html::{self, escape};
use super::{field, seg, Ctx};
use crate::edge::error::ApiError;
use crate::identity::signin::Page;
use crate::server::gateway_calls::{GatewayAnswer, GatewayCall};
use serde_json::{json, Map, Value};
use toolgate_filters::Scope;

/// The prefix of a form field that holds an argument (`arg.<name>`).
const ARG: &str = "arg.";

/// Sends one MCP request to the gateway as the signed-in user.
async fn send(
    ctx: &Ctx<'_>,
    gateway: &str,
    method: &str,
    name: Option<&str>,
    params: Value,
) -> Result<GatewayAnswer, ApiError> {
    if !ctx.can(Scope::GatewaysWrite) {
        return Err(ApiError::InsufficientScope(Scope::GatewaysWrite.as_str()));
    }
    let calls = ctx
        .server
        .gateway_calls
        .get()
        .ok_or_else(|| ApiError::Unavailable("the gateways are not served here".into()))?;
    let call = GatewayCall {
        principal: ctx.principal.clone(),
        client_ip: ctx.client_ip,
        gateway_id: gateway,
        method,
        name,
        params,
    };
    calls.call(call).await
}

/// The gateway's tools as its `tools/list` gives them to this user (empty when it answered an
/// error, which is then shown).
async fn tools(ctx: &Ctx<'_>, gateway: &str) -> Result<Result<Vec<Value>, String>, ApiError> {
    let answer = send(ctx, gateway, "tools/list", None, json!({})).await?;
    if let Some(e) = answer.body.get("error") {
        return Ok(Err(format!("{} {}", html::text(&e["code"]), html::text(&e["message"]))));
    }
    Ok(Ok(answer.body["result"]["tools"].as_array().cloned().unwrap_or_default()))
}

/// The playground's section of the gateway's page; `chosen`: the tool picked (`?tool=`).
pub(super) async fn section(ctx: &Ctx<'_>, gateway: &str) -> Result<String, ApiError> {
    let mut out = String::from(
        "<section class=\"playground\" aria-labelledby=\"playground\"><h2 id=\"playground\">Try a tool</h2>",
    );
    if !ctx.can(Scope::GatewaysWrite) {
        out.push_str("<p class=\"hint\">Trying tools takes the <code>gateways:write</code> scope, which your role does not hold.</p></section>");
        return Ok(out);
    }
    let tools = match tools(ctx, gateway).await? {
        Ok(tools) => tools,
        Err(e) => {
            out.push_str(&format!(
                "<p class=\"error\" role=\"alert\">The gateway's tools could not be listed: {}</p></section>",
                escape(&e)
            ));
            return Ok(out);
        }
    };
    if tools.is_empty() {
        out.push_str("<p class=\"empty\">This gateway serves no tools.</p></section>");
        return Ok(out);
    }
    let names: Vec<String> = tools.iter().map(|t| html::text(&t["name"])).collect();
    let picked = ctx.query("tool").filter(|t| names.iter().any(|n| n.as_str() == *t));
    let chosen = picked.unwrap_or(names[0].as_str()).to_string();
    let options: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), n.as_str())).collect();
    out.push_str(&format!(
        "<form method=\"get\" action=\"{}#playground\">{}<button type=\"submit\">Pick</button></form>",
        ctx.href(&format!("/gateways/{}", seg(gateway))),
        html::select("Tool", "tool", &options, Some(chosen.as_str()))
    ));
    let tool = tools.iter().find(|t| t["name"] == chosen.as_str()).cloned().unwrap_or(Value::Null);
    if let Some(d) = tool["description"].as_str() {
        out.push_str(&format!("<p class=\"hint\">{}</p>", escape(d)));
    }
    out.push_str(&html::form_open(ctx, &format!("/gateways/{}/call", seg(gateway)), "call"));
    out.push_str(&format!("<input type=\"hidden\" name=\"tool\" value=\"{}\">", escape(&chosen)));
    out.push_str(&schema_fields(&tool["inputSchema"]));
    out.push_str(&format!("<button type=\"submit\">Call {}</button></form></section>", escape(&chosen)));
    Ok(out)
}

/// The form's fields for an input schema's properties: a text field for a string, a list for
/// an `enum`, a number field, a yes/no list for a boolean, and a JSON text area for an object,
/// an array or anything else.
fn schema_fields(schema: &Value) -> String {
    let required: Vec<&str> = schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let Some(props) = schema["properties"].as_object() else {
        return "<p class=\"hint\">This tool takes no arguments.</p>".into();
    };
    let mut out = String::new();
    for (name, p) in props {
        let must = required.contains(&name.as_str());
        let label = format!("{}{}", escape(name), if must { " (required)" } else { "" });
        let input = format!("{ARG}{name}");
        let req = if must { " required" } else { "" };
        let hint = p["description"].as_str().map(|d| format!("<small>{}</small>", escape(d))).unwrap_or_default();
        let control = match (p["type"].as_str(), p["enum"].as_array()) {
            (_, Some(values)) => {
                let mut s = format!("<select name=\"{}\"{req}><option value=\"\"></option>", escape(&input));
                for v in values {
                    let v = html::text(v);
                    s.push_str(&format!("<option value=\"{0}\">{0}</option>", escape(&v)));
                }
                s + "</select>"
            }
            (Some("string"), None) => format!("<input name=\"{}\" type=\"text\"{req}>", escape(&input)),
            (Some("integer"), None) => format!("<input name=\"{}\" type=\"number\" step=\"1\"{req}>", escape(&input)),
            (Some("number"), None) => format!("<input name=\"{}\" type=\"number\" step=\"any\"{req}>", escape(&input)),
            (Some("boolean"), None) => format!(
                "<select name=\"{}\"{req}><option value=\"\"></option><option value=\"true\">true</option><option value=\"false\">false</option></select>",
                escape(&input)
            ),
            _ => format!("<textarea name=\"{}\" rows=\"3\" placeholder=\"JSON\"{req}></textarea>", escape(&input)),
        };
        out.push_str(&format!("<label>{label} {control}{hint}</label>"));
    }
    out
}

/// A form's arguments typed by the tool's schema; an empty field is left out. A value that is
/// not of its type is a 400 naming the field.
fn arguments(schema: &Value, fields: &[(String, String)]) -> Result<Map<String, Value>, ApiError> {
    let props = schema["properties"].as_object().cloned().unwrap_or_default();
    let mut args = Map::new();
    for (key, raw) in fields {
        let Some(name) = key.strip_prefix(ARG) else { continue };
        let raw = raw.trim();
        if raw.is_empty() {
            continue;
        }
        let p = props.get(name).unwrap_or(&Value::Null);
        let bad = |what: &str| ApiError::validation(name, format!("{name}: not {what}"));
        let value = if let Some(values) = p["enum"].as_array() {
            values.iter().find(|v| html::text(v) == raw).cloned().ok_or_else(|| bad("one of the listed values"))?
        } else {
            match p["type"].as_str() {
                Some("string") => Value::String(raw.to_string()),
                Some("integer") => json!(raw.parse::<i64>().map_err(|_| bad("a whole number"))?),
                Some("number") => {
                    let n = raw.parse::<f64>().ok().filter(|n| n.is_finite()).ok_or_else(|| bad("a number"))?;
                    json!(n)
                }
                Some("boolean") => json!(raw.parse::<bool>().map_err(|_| bad("true or false"))?),
                _ => serde_json::from_str(raw).map_err(|_| bad("JSON"))?,
            }
        };
        args.insert(name.to_string(), value);
    }
    Ok(args)
}

/// `POST /gateways/{id}/call`: the tool called with the form's arguments; the answer is the
/// result's page, with a link to the call's log entry.
pub(super) async fn call(ctx: &Ctx<'_>, gateway: &str, fields: &[(String, String)]) -> Result<Page, ApiError> {
    let tool = field(fields, "tool");
    if tool.is_empty() {
        return Err(ApiError::validation("tool", "required"));
    }
    let listed = tools(ctx, gateway).await?.unwrap_or_default();
    let schema = listed.iter().find(|t| t["name"] == tool).map_or(Value::Null, |t| t["inputSchema"].clone());
    let args = Value::Object(arguments(&schema, fields)?);
    let answer = send(ctx, gateway, "tools/call", Some(tool), json!({ "arguments": args.clone() })).await?;
    let entry = log_entry(ctx, gateway, &answer.request_id).await;
    let body = result_page(ctx, gateway, tool, &args, &answer, entry.as_deref());
    Ok(ctx.page(&format!("Called {tool}"), "/gateways", &body))
}

/// The id of the call's log entry, found by its request id among the gateway's latest (a call
/// refused before it reached an app has none).
async fn log_entry(ctx: &Ctx<'_>, gateway: &str, request_id: &str) -> Option<String> {
    if !ctx.can(Scope::LogsRead) {
        return None;
    }
    let got = ctx.get(&format!("/logs?gateway_id={}&limit=20", super::encode(gateway))).await.ok()?;
    let logs = got["logs"].as_array()?;
    logs.iter().find(|l| l["request_id"] == request_id).map(|l| html::text(&l["id"]))
}

fn result_page(
    ctx: &Ctx<'_>,
    gateway: &str,
    tool: &str,
    args: &Value,
    a: &GatewayAnswer,
    entry: Option<&str>,
) -> String {
    let back = ctx.href(&format!("/gateways/{}?tool={}#playground", seg(gateway), super::encode(tool)));
    let mut out = format!(
        "<dl><dt>Gateway</dt><dd><span class=\"id\">{}</span></dd><dt>Tool</dt><dd><span class=\"id\">{}</span></dd>\
         <dt>Request</dt><dd><span class=\"id\" id=\"request-id\">{}</span></dd><dt>HTTP status</dt><dd>{}</dd></dl>\
         <h2>Arguments</h2>{}",
        escape(gateway),
        escape(tool),
        escape(&a.request_id),
        a.status,
        html::copyable("call-arguments", &serde_json::to_string_pretty(args).unwrap_or_default()),
    );
    let result = &a.body["result"];
    if let Some(e) = a.body.get("error") {
        out.push_str(&format!(
            "<p class=\"error\" role=\"alert\" id=\"call-error\"><strong>Refused</strong> <code>{}</code>: {}</p>",
            escape(&html::text(&e["code"])),
            escape(&html::text(&e["message"]))
        ));
    } else if result["isError"] == true {
        out.push_str("<p class=\"error\" role=\"alert\" id=\"call-error\">The tool answered an error.</p>");
    } else {
        out.push_str("<p class=\"notice\" role=\"status\" id=\"call-ok\">The tool answered.</p>");
    }
    for (i, c) in result["content"].as_array().into_iter().flatten().enumerate() {
        if let Some(text) = c["text"].as_str() {
            out.push_str(&html::copyable(&format!("call-text-{i}"), text));
        }
    }
    out.push_str("<details><summary>The whole answer</summary>");
    out.push_str(&html::copyable("call-answer", &serde_json::to_string_pretty(&a.body).unwrap_or_default()));
    out.push_str("</details><p>");
    if let Some(id) = entry {
        out.push_str(&format!(
            "<a id=\"call-log\" href=\"{}\">Its log entry</a> · ",
            ctx.href(&format!("/logs/{}", seg(id)))
        ));
    }
    out.push_str(&format!("<a href=\"{back}\">Call again</a></p>"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_form_has_a_control_per_type_and_a_json_area_for_the_rest() {
        let schema = json!({ "type": "object", "required": ["s"], "properties": {
            "s": {"type": "string"}, "n": {"type": "number"}, "i": {"type": "integer"}, "b": {"type": "boolean"},
            "e": {"type": "string", "enum": ["a", "b"]}, "o": {"type": "object"}, "l": {"type": "array"} } });
        let form = schema_fields(&schema);
        assert!(form.contains("name=\"arg.s\" type=\"text\" required"), "{form}");
        assert!(form.contains("name=\"arg.n\" type=\"number\" step=\"any\""), "{form}");
        assert!(form.contains("name=\"arg.i\" type=\"number\" step=\"1\""), "{form}");
        assert!(form.contains("<select name=\"arg.b\""), "{form}");
        assert!(form.contains("<option value=\"a\">a</option>"), "{form}");
        assert!(form.contains("<textarea name=\"arg.o\"") && form.contains("<textarea name=\"arg.l\""), "{form}");
    }

    #[test]
    fn arguments_are_typed_by_the_schema_and_a_wrong_one_names_its_field() {
        let schema = json!({ "properties": {
            "s": {"type": "string"}, "n": {"type": "number"}, "b": {"type": "boolean"}, "o": {"type": "object"},
            "e": {"enum": [1, 2]} } });
        let got = arguments(
            &schema,
            &fields(&[
                ("arg.s", "42"),
                ("arg.n", "1.5"),
                ("arg.b", "true"),
                ("arg.o", "{\"k\":1}"),
                ("arg.e", "2"),
                ("tool", "x"),
                ("arg.x", ""),
            ]),
        )
        .unwrap();
        assert_eq!(Value::Object(got), json!({"s": "42", "n": 1.5, "b": true, "o": {"k": 1}, "e": 2}));
        let e = arguments(&schema, &fields(&[("arg.n", "many")])).unwrap_err();
        assert!(e.to_string().contains('n'), "{e}");
        assert!(arguments(&schema, &fields(&[("arg.o", "{")])).is_err());
        assert!(arguments(&schema, &fields(&[("arg.e", "3")])).is_err());
    }
}
