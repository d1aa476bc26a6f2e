//! A `tools/call`'s external guards (`mcp/callout/`) in [`forward`]'s phases: asked about the
//! call once the rules let it through and its `Mcp-Param-*` headers agree with what the client
//! sent, so that a guard sees only calls the gateway would make, with the arguments the app
//! would get (after `tool_overrides`); and about the result as the call's reply is relayed
//! (`callout::guard_reply`). A gateway without guards pays one `is_empty` branch.

use super::*;
use crate::mcp::callout::{CallGuards, ToolFacts};

impl Call<'_> {
    /// What a call needs just before it goes to its app, once the rules let it through: the
    /// context of the app's request (the client's era, the `Mcp-Param-*` headers checked and
    /// made), the content checks of the answer, and the external guards asked (the arguments
    /// they replaced); or the error the call is refused with.
    pub(super) async fn before_app(
        &mut self,
        ex: &Exchange<'_>,
        catalogue: &Catalogue,
        target: &Target<'_, '_>,
        id: &Id,
    ) -> Result<(CallContext, Option<Box<RawValue>>), RpcErrorObject> {
        let client_era = if self.caller.stateless() { ClientEra::Stateless } else { ClientEra::Handshake };
        let mut call_ctx =
            CallContext { client_request_id: id.clone(), headers: vec![], client_era, caller_upstream: None };
        self.param_headers(target, ex.headers(), &mut call_ctx.headers)?;
        self.content = ContentCheck::for_call(self.gw, self.method, target.tool.map(|t| t.0));
        // Entered only when the gateway has guards: the wait would put its future (a kilobyte
        // and more) into every call's.
        let replaced = if self.gw.guards.is_empty() { None } else { self.guard_request(ex, catalogue, target).await? };
        // Token exchange: an app that exchanges is called on the caller's own upstream.
        call_ctx.caller_upstream =
            crate::mcp::token_exchange::caller_upstream(self.mcp, ex, &self.gw.org_id, target.app_id).await?;
        Ok((call_ctx, replaced))
    }

    /// Asks the request guards of a `tools/call` about `target`, keeping them (for its result
    /// and its log entry): the arguments a guard replaced, or the error the call is refused with
    /// (counted and logged here).
    async fn guard_request(
        &mut self,
        ex: &Exchange<'_>,
        catalogue: &Catalogue,
        target: &Target<'_, '_>,
    ) -> Result<Option<Box<RawValue>>, RpcErrorObject> {
        let Some((exposed, function)) = target.tool.filter(|_| self.method == "tools/call") else {
            return Ok(None);
        };
        let principal = ex.ctx.filters.principal.as_deref();
        let names = (exposed, target.app_id, function);
        let request_id = self.request_id.as_str();
        let guards = CallGuards::for_call(self.mcp, self.gw, principal, names, request_id, self.content.clone());
        let Some(guards) = guards.map(Arc::new) else {
            return Ok(None);
        };
        let arguments = target.named.as_ref().and_then(|n| n.get("arguments"));
        let schema = catalogue.tools.iter().find(|t| t["name"] == exposed).and_then(|t| t.get("inputSchema"));
        let facts = ToolFacts { schema, shape: target.shape };
        let decided = guards.on_request(arguments, facts).await;
        self.guards = Some(Arc::clone(&guards));
        match decided {
            Ok(replaced) => Ok(replaced),
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

/// A call's arguments as a guard replaced them, with the `Mcp-Param-*` headers the app gets
/// made again from them.
pub(super) fn replace_arguments<'p>(
    target: &mut Target<'_, 'p>,
    replaced: Option<&'p RawValue>,
    to_app: &mut Vec<(HeaderName, HeaderValue)>,
) {
    let (Some(args), Some(named)) = (replaced, target.named.as_mut()) else { return };
    named.set("arguments", args);
    if target.declared.is_empty() {
        return;
    }
    let value: Value = serde_json::from_str(args.get()).unwrap_or_default();
    to_app.clear();
    to_app.extend(modern::param_header_values(target.declared, &value));
}
