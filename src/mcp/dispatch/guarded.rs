//! A `tools/call`'s external guards (`mcp/callout/`) in [`forward`]'s phases: asked about the
//! call once the rules let it through and its `Mcp-Param-*` headers agree with what the client
//! sent, so that a guard sees only calls the gateway would make, with the arguments the app
//! would get (after `tool_overrides`); and about the result as the call's reply is relayed
//! (`callout::guard_reply`). A gateway without guards pays one `is_empty` branch.

use super::*;
use crate::mcp::callout::{CallGuards, ToolFacts};

impl Call<'_> {
    /// Asks the request guards of a `tools/call` about `target`: the call's guards (kept for
    /// its result and its log entry) and the arguments a guard replaced, or the error the call
    /// is refused with (counted and logged here).
    pub(super) async fn guard_request(
        &self,
        ex: &Exchange<'_>,
        catalogue: &Catalogue,
        target: &Target<'_, '_>,
    ) -> Result<(Option<Arc<CallGuards>>, Option<Box<RawValue>>), RpcErrorObject> {
        let Some((exposed, function)) = target.tool.filter(|_| self.method == "tools/call") else {
            return Ok((None, None));
        };
        let principal = ex.ctx.filters.principal.as_deref();
        let names = (exposed, target.app_id, function);
        let request_id = self.request_id.as_str();
        let Some(guards) = CallGuards::for_call(self.mcp, self.gw, principal, names, request_id, self.content.clone())
        else {
            return Ok((None, None));
        };
        let arguments = target.named.as_ref().and_then(|n| n.get("arguments"));
        let schema = catalogue.tools.iter().find(|t| t["name"] == exposed).and_then(|t| t.get("inputSchema"));
        let facts = ToolFacts { schema, shape: target.shape };
        match guards.on_request(arguments, facts).await {
            Ok(replaced) => Ok((Some(guards), replaced)),
            Err(e) => {
                self.refused(&e);
                let mut entry =
                    EntryWriter::begin(self.gw, target.app_id, function, arguments.map_or("null", RawValue::get));
                entry.request_id(request_id);
                if let Some(d) = guards.decisions() {
                    entry.guards(&d);
                }
                let outcome = Err(RpcErrorObject::new(e.code, e.message.clone()));
                self.mcp.reqlog.record(log_entry(entry, &outcome, true, 200, self.started.elapsed()));
                Err(e)
            }
        }
    }
}

/// The `Mcp-Param-*` headers the app gets, made again from the arguments a guard replaced.
pub(super) fn param_headers_of(
    declared: &[modern::ParamHeader],
    arguments: &RawValue,
    to_app: &mut Vec<(HeaderName, HeaderValue)>,
) {
    if declared.is_empty() {
        return;
    }
    let value: Value = serde_json::from_str(arguments.get()).unwrap_or_default();
    to_app.clear();
    to_app.extend(modern::param_header_values(declared, &value));
}
