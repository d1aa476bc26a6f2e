//! A call's answer: relayed to its client as JSON or as events, recorded once (metrics, span,
//! log entry), and, when the app is slow, handed to a task of its own that the client follows.

use super::*;

/// What a call leaves once, whichever way its answer came: the operation metrics, its span
/// (when traces are exported), and a `tools/call`'s log entry.
pub(super) struct Finish<'a> {
    pub(super) call: &'a Call<'a>,
    pub(super) app_id: &'a str,
    pub(super) tool: Option<(&'a str, &'a str)>,
    /// The call's trace, its span id and start: in a trace, the call is a span.
    pub(super) span: Option<(TraceContext, [u8; 8], SystemTime)>,
    pub(super) entry: Option<EntryWriter>,
    pub(super) finished: bool,
}

impl Finish<'_> {
    /// Records the call's outcome, answered under `status`; only the first time.
    pub(super) fn record(&mut self, outcome: &Result<RawJson, RpcErrorObject>, status: u16) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let (call, app_id, tool) = (self.call, self.app_id, self.tool);
        let elapsed = call.started.elapsed();
        let error = error_type(call.method, outcome);
        metrics::mcp_client_operation(call.method, tool.map(|t| t.1), error, app_id, elapsed);
        metrics::mcp_server_operation(call.method, tool.map(|t| t.0), error, &call.gw.id, elapsed);
        if let (Some((t, span_id, start)), true) = (&self.span, trace::exporting()) {
            self.export_span(t, *span_id, *start, error, elapsed);
        }
        if let Some(mut entry) = self.entry.take() {
            if let Some(marks) = call.content.as_ref().and_then(|c| c.marks()) {
                entry.content(&marks);
            }
            if let Some(decisions) = call.guards.as_ref().and_then(|g| g.decisions()) {
                entry.guards(&decisions);
            }
            let failed = error.is_error();
            call.mcp.reqlog.record(log_entry(entry, outcome, failed, status, elapsed));
        }
    }

    pub(super) fn export_span(
        &self,
        t: &TraceContext,
        span_id: [u8; 8],
        start: SystemTime,
        error: ErrorType,
        elapsed: Duration,
    ) {
        let (method, tool) = (self.call.method, self.tool);
        let mut attributes = vec![
            ("mcp.method.name", json!(method)),
            ("toolgate.app.id", json!(self.app_id)),
            ("toolgate.gateway.id", json!(self.call.gw.id)),
        ];
        if let Some((_, name)) = tool {
            attributes.push(("gen_ai.tool.name", json!(name)));
        }
        let mut buf = itoa::Buffer::new();
        let error_label = error.label(&mut buf);
        if !error_label.is_empty() {
            attributes.push(("error.type", json!(error_label)));
        }
        trace::record(Span {
            trace_id: t.trace_id,
            span_id,
            parent_id: Some(t.span_id),
            name: tool.map_or_else(|| method.to_string(), |(_, name)| format!("{method} {name}")),
            kind: SpanKind::Client,
            start,
            duration: elapsed,
            error: error.is_error(),
            attributes,
        });
    }
}

/// The app's answer for a session client that takes JSON only: its response. Notifications are
/// dropped and the app's requests refused (nothing could carry them to the client); a liveness
/// check needs no client: the gateway answers it.
pub(super) async fn json_only(
    call: &Call<'_>,
    app_id: &str,
    mcp_id: &str,
    mut stream: ReplyStream,
) -> Result<Response, UpstreamError> {
    let (mcp, org_id) = (call.mcp, &call.gw.org_id);
    let via = stream.via().cloned();
    loop {
        match stream.next().await {
            Some(Ok(Message::Response(r))) => return Ok(r),
            Some(Ok(Message::Request(r))) if r.method == "ping" => {
                Box::pin(mcp.answer_on(via.as_ref(), org_id, app_id, Response::success(r.id, json!({})))).await;
            }
            Some(Ok(Message::Request(r))) => {
                let caps = mcp.sessions.capabilities(mcp_id);
                // Without a stream there is always a reason to refuse.
                let e = refusal(&r.method, caps, false).unwrap_or_else(|| RpcErrorObject::method_not_found(&r.method));
                Box::pin(mcp.answer_on(via.as_ref(), org_id, app_id, Response::error(r.id, e))).await;
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e),
            None => return Err(UpstreamError::Closed),
        }
    }
}

/// Relays the app's streamed answer to a session client that takes SSE, as events. Resumable
/// (event ids, a priming event, a buffer): a client whose connection drops comes back with
/// `Last-Event-ID` (`transport::get_stream`), and the call goes on meanwhile, since a dropped
/// connection is not a cancellation. A stream still going [`EARLY_STREAM`] after the call began
/// goes on alone, as a slow answer does ([`go_on_alone`]).
pub(super) async fn relay_events(
    done: &mut Finish<'_>,
    ex: &mut Exchange<'_>,
    mcp_id: &str,
    id: &Id,
    stream: ReplyStream,
) -> pingora::Result<()> {
    let resumable = done.call.mcp.call_streams.open(holder(ex, done.call.gw, mcp_id));
    ex.start_sse().await?;
    let connected = match &resumable {
        Some(rs) => ex.write(Some(rs.priming()), false).await.is_ok(),
        None => true,
    };
    let Some(rs) = resumable else {
        relay(done, Some(&mut *ex), mcp_id, id, stream, None, None).await?;
        return Ok(());
    };
    let hand_over_at = done.call.started + EARLY_STREAM;
    let client = connected.then_some(&mut *ex);
    match relay(done, client, mcp_id, id, stream, Some(&*rs), Some(hand_over_at)).await? {
        Relayed::Done => Ok(()),
        Relayed::Slow { rest, connected } => {
            go_on_alone(ex, done, id, Slow { pending: Pending::Stream(rest), stream: rs, connected }).await
        }
    }
}

/// How [`relay`] left a stream: relayed to its end, or still going at its hand-over time (the
/// rest, and whether the client still listens).
pub(super) enum Relayed {
    Done,
    Slow { rest: Box<ReplyStream>, connected: bool },
}

/// Relays the app's events: to `client` while it listens, and into the call's resumable stream
/// `rs`, if it has one (a call that went on alone has only the stream, which its client follows).
/// Records the call when its response goes by. With `hand_over_at`, a wait for the app's next
/// event that lasts past it stops the relay there and returns the rest (a read of the stream is
/// cancel-safe: what it had read is kept in the stream).
pub(super) async fn relay(
    done: &mut Finish<'_>,
    mut client: Option<&mut Exchange<'_>>,
    mcp_id: &str,
    id: &Id,
    mut stream: ReplyStream,
    rs: Option<&CallStream>,
    hand_over_at: Option<Instant>,
) -> pingora::Result<Relayed> {
    let (call, app_id) = (done.call, done.app_id);
    let (mcp, org_id) = (call.mcp, &call.gw.org_id);
    let via = stream.via().cloned();
    loop {
        let item = match hand_over_at {
            Some(at) => match crate::base::deadline::until(at.into(), stream.next()).await {
                Ok(item) => item,
                Err(_) => return Ok(Relayed::Slow { rest: Box::new(stream), connected: client.is_some() }),
            },
            None => stream.next().await,
        };
        let Some(item) = item else { break };
        let msg = match item {
            Ok(m) => m,
            Err(e) => Message::Response(rpc_errors::app_failure(id, app_id, &e, call.request_id.as_str())),
        };
        if let Message::Request(r) = &msg {
            let caps = mcp.sessions.capabilities(mcp_id);
            if let Some(e) = refusal(&r.method, caps, true) {
                Box::pin(mcp.answer_on(via.as_ref(), org_id, app_id, Response::error(r.id.clone(), e))).await;
                continue;
            }
            // Known before the client can see it, and answer it.
            mcp.remember_relayed(mcp_id, &r.id, app_id, org_id, via.as_ref());
        }
        let done_now = matches!(msg, Message::Response(_));
        // Recorded before it leaves: a client that has its answer finds the call's log entry,
        // whether the answer went to it directly or through the call's resumable stream.
        if let Message::Response(r) = &msg {
            done.record(&r.outcome, 200);
        }
        let bytes = msg.to_bytes();
        let event = match rs {
            Some(rs) => {
                let event = rs.push(&bytes);
                if done_now {
                    mcp.call_streams.finish(rs, &mcp.state.config().mcp.resumable);
                }
                event
            }
            None => sse_event(&bytes),
        };
        // The response is the last event: it leaves with the end of the stream, in one write
        // and one wake-up of the client instead of two.
        if let Some(ex) = client.as_deref_mut() {
            if ex.write(Some(event), done_now).await.is_err() {
                client = None;
            }
        }
        if client.is_none() && rs.is_none() {
            // The client went away and cannot resume: dropping the stream cancels the call
            // upstream.
            break;
        }
        if done_now {
            return Ok(Relayed::Done);
        }
    }
    if let Some(rs) = rs {
        mcp.call_streams.finish(rs, &mcp.state.config().mcp.resumable);
    }
    // Logged when the response went by; a stream that ended without one is an error.
    done.record(&Err(RpcErrorObject::internal("stream ended without a response")), 200);
    if let Some(ex) = client {
        ex.write(None, true).await?;
    }
    Ok(Relayed::Done)
}

/// How long a session client that takes SSE waits for a plain JSON answer before its answer
/// becomes a resumable stream.
pub(super) const EARLY_STREAM: Duration = Duration::from_millis(250);

/// The parked call a continuation names (`state`), given the client's answers: the call and the
/// app's questions still unanswered. Boxed, as continuations are rare: a call that is not one
/// carries 8 bytes for it through every wait of `forward` instead of the call itself.
pub(super) async fn resume_parked(
    mcp: &McpRuntime,
    state: &str,
    binding: &parked::Binding,
    app_id: &str,
    given: Option<&HashMap<String, &RawValue>>,
) -> Result<Box<(parked::Parked, Vec<parked::Pending>)>, RpcErrorObject> {
    let mut p = stateless::resume(mcp, state, binding)?;
    if p.app_id != app_id {
        return Err(RpcErrorObject::invalid_params("requestState belongs to another call"));
    }
    let unanswered = stateless::deliver_answers(mcp, &mut p, given).await?;
    Ok(Box::new((p, unanswered)))
}

/// Waits for the app's answer to `call`; once it takes longer than EARLY_STREAM, answers the
/// session client with a resumable stream (a priming event with an id), so a long call survives
/// a dropped connection, and leaves the call to [`go_on_alone`]. Quick answers stay plain JSON;
/// so does a slow one when no more streams can be buffered.
pub(super) async fn await_or_stream_early(
    mcp: &McpRuntime,
    ex: &mut Exchange<'_>,
    gw: &Gateway,
    mcp_id: &str,
    mut call: AppCall,
) -> pingora::Result<Requested> {
    tokio::select! {
        r = &mut call => Ok(Requested::Answered(r)),
        // Pingora's timer, as every per-call wait (see `crate::base::deadline`).
        _ = pingora::time::sleep(EARLY_STREAM) => {
            let Some(stream) = mcp.call_streams.open(holder(ex, gw, mcp_id)) else {
                return Ok(Requested::Answered(call.await));
            };
            ex.start_sse().await?;
            let connected = ex.write(Some(stream.priming()), false).await.is_ok();
            Ok(Requested::Slow(Slow { pending: Pending::Call(call), stream, connected }))
        }
    }
}

/// A slow call goes on in a task of its own, which writes its answer into the call's resumable
/// stream; the client's connection follows that stream as a resumed one does
/// ([`Following`]), and on HTTP/1 goes on alone (`Exchange::stream_on`). So a call
/// in flight holds only itself, its stream and the bare connection, not the request's state,
/// Pingora's session and the connection's task (BENCHMARKS.md, "Scale on one instance"). The
/// caller's `concurrent` slot stays with the call until it is answered: it is a request in
/// flight, unlike an open GET stream.
pub(super) async fn go_on_alone(
    ex: &mut Exchange<'_>,
    done: &mut Finish<'_>,
    id: &Id,
    slow: Slow,
) -> pingora::Result<()> {
    let Slow { pending, stream, connected } = slow;
    let alone = Alone::of(done, id);
    let held = (ex.ctx.filters.concurrency.take(), GoingOnAlone::new());
    // What the client was written so far: every event the stream has.
    let seen = stream.last_seq();
    let rs = Arc::clone(&stream);
    tokio::spawn(async move {
        alone.answer(pending, &rs).await;
        drop(held);
    });
    if connected {
        ex.stream_on(Following { cs: stream, seen, _slot: None }).await;
    }
    Ok(())
}

/// Calls going on alone now ([`calls_going_on_alone`]).
pub(super) static GOING_ON_ALONE: AtomicUsize = AtomicUsize::new(0);

/// How many calls go on alone now. A shutdown waits for them as for open connections: a call
/// whose client dropped (to resume later) still ends, and is logged, within the grace period, as
/// it did when its request held it.
pub(crate) fn calls_going_on_alone() -> usize {
    GOING_ON_ALONE.load(Ordering::Relaxed)
}

/// Counts a call in [`GOING_ON_ALONE`] for as long as it lives, however its task ends.
pub(super) struct GoingOnAlone;

impl GoingOnAlone {
    pub(super) fn new() -> GoingOnAlone {
        GOING_ON_ALONE.fetch_add(1, Ordering::Relaxed);
        GoingOnAlone
    }
}

impl Drop for GoingOnAlone {
    fn drop(&mut self) {
        GOING_ON_ALONE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a call that goes on alone needs of its request: [`Finish`]'s borrows, owned.
pub(super) struct Alone {
    pub(super) mcp: Arc<McpRuntime>,
    pub(super) gw: Arc<Gateway>,
    pub(super) mcp_id: String,
    pub(super) method: String,
    pub(super) started: Instant,
    pub(super) app_id: String,
    pub(super) tool: Option<(String, String)>,
    pub(super) span: Option<(TraceContext, [u8; 8], SystemTime)>,
    pub(super) entry: Option<EntryWriter>,
    pub(super) id: Id,
    pub(super) request_id: RequestId,
    pub(super) content: Option<Arc<ContentCheck>>,
    pub(super) guards: Option<Arc<crate::mcp::callout::CallGuards>>,
}

impl Alone {
    /// Takes what `done` would record with (it records nothing after this).
    pub(super) fn of(done: &mut Finish<'_>, id: &Id) -> Alone {
        done.finished = true;
        let (call, app_id, tool) = (done.call, done.app_id, done.tool);
        let Caller::Session(mcp_id) = call.caller else { unreachable!("only a session's calls stream resumably") };
        Alone {
            mcp: Arc::clone(call.mcp),
            gw: Arc::clone(call.gw),
            mcp_id: mcp_id.to_owned(),
            method: call.method.to_owned(),
            started: call.started,
            app_id: app_id.to_owned(),
            tool: tool.map(|(at_gateway, at_app)| (at_gateway.to_owned(), at_app.to_owned())),
            span: done.span.take(),
            entry: done.entry.take(),
            id: id.clone(),
            request_id: call.request_id,
            content: call.content.clone(),
            guards: call.guards.clone(),
        }
    }

    /// Waits for the app's answer (or the rest of its events) and writes it into `rs`; the call
    /// is recorded once, as in [`finish`].
    pub(super) async fn answer(self, pending: Pending, rs: &CallStream) {
        let reply = match pending {
            Pending::Call(call) => call.await,
            Pending::Stream(rest) => Ok(UpstreamReply::Stream(*rest)),
        };
        let Alone { mcp, gw, mcp_id, method, started, app_id, tool, span, entry, id, request_id, content, guards } =
            self;
        let caller = Caller::Session(&mcp_id);
        let call = Call { mcp: &mcp, gw: &gw, caller, method: &method, started, request_id, content, guards };
        let tool = tool.as_ref().map(|(at_gateway, at_app)| (at_gateway.as_str(), at_app.as_str()));
        let mut done = Finish { call: &call, app_id: &app_id, tool, span, entry, finished: false };
        match reply {
            Ok(UpstreamReply::Response(r)) => {
                done.record(&r.outcome, 200);
                rs.push(&Message::Response(r.with_id(id)).to_bytes());
            }
            Ok(UpstreamReply::Stream(stream)) => {
                // Without a client to write to, nothing in it fails. Boxed: the wait for the
                // app's answer, which most of these calls spend their time in, does not carry
                // the relay's state.
                let _ = Box::pin(relay(&mut done, None, &mcp_id, &id, stream, Some(rs), None)).await;
            }
            Err(e) => {
                // A refusal comes at once, never this late: no caller is kept for an elicitation.
                let r = call.failure(&app_id, &id, &e, None, None);
                done.record(&r.outcome, 502);
                rs.push(&Message::Response(r).to_bytes());
            }
        }
        mcp.call_streams.finish(rs, &mcp.state.config().mcp.resumable);
    }
}

/// What went wrong with a call, if anything: a JSON-RPC error, or a tool result with `isError`.
pub(super) fn error_type(method: &str, outcome: &Result<RawJson, RpcErrorObject>) -> ErrorType {
    // Only `isError` is read; the rest of the result is skipped, not built.
    #[derive(serde::Deserialize)]
    struct ToolResult {
        #[serde(rename = "isError", default)]
        is_error: Option<bool>,
    }
    match outcome {
        Err(e) => ErrorType::Code(e.code),
        Ok(r)
            if method == "tools/call"
                && may_name_is_error(r.get())
                && r.read::<ToolResult>().is_ok_and(|r| r.is_error == Some(true)) =>
        {
            ErrorType::ToolError
        }
        Ok(_) => ErrorType::None,
    }
}

/// Whether a result's text can have an `isError` member at all. Most have none, and a search of
/// the text is cheaper than reading it. A member name is spelled either as it is or with `\u`
/// escapes (JSON's other escapes make no letters), so a text with neither cannot have one.
pub(super) fn may_name_is_error(text: &str) -> bool {
    text.contains("isError") || text.contains("\\u")
}

/// Whose call stream: the session's, its credential's and its organisation's (the principal the
/// filter chain found; every session request has one).
pub(super) fn holder<'a>(ex: &'a Exchange<'_>, gw: &'a Gateway, mcp_id: &'a str) -> Holder<'a> {
    let key_id = ex.ctx.filters.principal.as_deref().map_or("", |p| p.key_id.as_str());
    Holder { org_id: &gw.org_id, key_id, session_id: Some(mcp_id) }
}

/// Ends a call's log entry with its outcome: `failed` when it was an error (see
/// [`error_type`]); a JSON-RPC error gets the HTTP status that says where it came from.
pub(super) fn log_entry(
    entry: EntryWriter,
    outcome: &Result<RawJson, RpcErrorObject>,
    failed: bool,
    transport_status: u16,
    elapsed: Duration,
) -> LogRecord {
    match outcome {
        Ok(result) => entry.finish(elapsed, failed, 200, Answer::Result(result)),
        Err(e) => {
            let status = RpcCode::logged_status(e.code, transport_status);
            let detail = e.detail.as_deref().map(String::as_str);
            entry.finish(elapsed, true, status, Answer::Error { code: e.code, message: &e.message, detail })
        }
    }
}
