"""An MCP app of the stateless revision (2026-07-28) that implements the tasks extension
(`io.modelcontextprotocol/tasks`, SEP-2663), for `test_mcp_tasks.py`: the official Python SDK's
`MCPServer` with an `Extension` (the SDK's pluggable extension interface; the SDK ships no tasks
server of its own), under uvicorn on a port the OS picks.

It serves the fixtures the conformance suite's tasks scenarios name: `greet` (never a task),
`slow_compute` (a task when the client declared the extension), `failing_job` (a task that
ends in a tool error; the extension is required), `protocol_error_job` (a task that fails),
`confirm_delete` and `multi_input` (tasks that wait for the client's answers, one and two),
`test_tool_with_task` (an input-required round first, then a task). For `test_mcp_content.py`,
tools that hide a sample of a class of hidden text (`content_server.SAMPLES`) in what they send:
`hidden_report` (a task whose status message and result carry it), `chatty` (a progress message
and a log message on the call's stream, then a result), `announce` (a log message and a resource
update on the session's GET stream, sent by no call).

Tasks live in memory; their ids are random. The app answers `tasks/get`, `tasks/update` and
`tasks/cancel` only to a request that declared the extension (-32021 otherwise), and -32602 for
an id it does not know.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from datetime import datetime, timezone
from typing import Any

from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.server import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult, RequestParams

from app_runner import serve_on_a_free_port
from content_server import SAMPLES

TASKS = "io.modelcontextprotocol/tasks"
TTL_MS = 300_000
POLL_MS = 200

# Which tools may become tasks, and which need the extension.
SUPPORT = {"slow_compute": "optional", "confirm_delete": "optional", "multi_input": "optional",
           "failing_job": "required", "protocol_error_job": "optional", "test_tool_with_task": "required",
           "hidden_report": "optional"}


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def text_result(text: str, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def elicit(message: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"confirm": {"type": "boolean"}, "name": {"type": "string"}}}
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}


class Task:
    def __init__(self) -> None:
        self.id = "task-" + secrets.token_hex(12)
        self.status = "working"
        self.created = self.updated = now()
        self.result: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.message: str | None = None
        self.asked: dict[str, dict[str, Any]] = {}
        self.answers: dict[str, Any] = {}
        self.answered = asyncio.Event()
        self.runner: asyncio.Task | None = None

    def terminal(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")

    def set(self, status: str) -> None:
        self.status, self.updated = status, now()

    def created_result(self) -> dict[str, Any]:
        return {"resultType": "task", **self.state()}

    def state(self) -> dict[str, Any]:
        d = {"taskId": self.id, "status": self.status, "createdAt": self.created, "lastUpdatedAt": self.updated,
             "ttlMs": TTL_MS, "pollIntervalMs": POLL_MS}
        if self.message is not None:
            d["statusMessage"] = self.message
        return d

    def detailed(self) -> dict[str, Any]:
        d = self.state()
        if self.status == "completed" and self.result is not None:
            d["result"] = self.result
        if self.status == "failed" and self.error is not None:
            d["error"] = self.error
        if self.status == "input_required":
            d["inputRequests"] = dict(self.asked)
        return d

    async def ask(self, questions: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Parks the task until every question is answered (`tasks/update`, possibly in parts)."""
        self.asked = dict(questions)
        self.set("input_required")
        while self.asked:
            self.answered.clear()
            await self.answered.wait()
        self.set("working")
        return {k: self.answers[k] for k in questions}


TABLE: dict[str, Task] = {}


async def work(name: str, arguments: dict[str, Any], task: Task, gathered: Any = None) -> None:
    try:
        if name == "slow_compute":
            await asyncio.sleep(float(arguments.get("seconds", 1)))
            task.result = text_result(f"computed {arguments.get('label', '')}")
        elif name == "failing_job":
            await asyncio.sleep(1)
            task.result = text_result("the job failed", is_error=True)
        elif name == "protocol_error_job":
            await asyncio.sleep(0.2)
            task.error = {"code": -32603, "message": "the job crashed"}
            task.set("failed")
            return
        elif name == "confirm_delete":
            answers = await task.ask({"confirm": elicit(f"Delete {arguments.get('filename')}?")})
            action = (answers["confirm"] or {}).get("action")
            task.result = text_result(f"deleted {arguments.get('filename')}" if action == "accept" else "kept")
        elif name == "multi_input":
            answers = await task.ask({"first": elicit("First?"), "second": elicit("Second?")})
            names = [((a or {}).get("content") or {}).get("name") for a in answers.values()]
            task.result = text_result("got " + ", ".join(str(n) for n in names))
        elif name == "hidden_report":
            s = SAMPLES[arguments.get("cls", "tag")]
            task.message = f"half{s}way"
            task.result = {**text_result(f"before{s}after"), "structuredContent": {"note": f"x{s}y"}}
        elif name == "test_tool_with_task":
            content = (gathered or {}).get("content") or {}
            task.result = text_result(f"Hello, {content.get('name')}! (gathered before the task)")
        task.set("completed")
    except asyncio.CancelledError:
        task.set("cancelled")


class TaskParams(RequestParams):
    taskId: str  # noqa: N815 (the wire name)


class UpdateParams(TaskParams):
    inputResponses: dict[str, Any] = {}  # noqa: N815


def known(ctx, params: TaskParams) -> Task:
    require_client_extension(ctx, TASKS)
    task = TABLE.get(params.taskId)
    if task is None:
        raise MCPError(code=-32602, message=f"unknown task {params.taskId}")
    return task


async def tasks_get(ctx, params: TaskParams) -> dict[str, Any]:
    return known(ctx, params).detailed()


async def tasks_update(ctx, params: UpdateParams) -> dict[str, Any]:
    task = known(ctx, params)
    for key, answer in params.inputResponses.items():
        if key in task.asked:
            del task.asked[key]
            task.answers[key] = answer
    task.answered.set()
    return {}


async def tasks_cancel(ctx, params: TaskParams) -> dict[str, Any]:
    task = known(ctx, params)
    if not task.terminal() and task.runner is not None:
        task.runner.cancel()
        task.set("cancelled")
    return {}


def declared(ctx) -> bool:
    caps = ctx.session.client_capabilities
    return bool(caps and caps.extensions and TASKS in caps.extensions)


class Tasks(Extension):
    identifier = TASKS

    def methods(self):
        return [MethodBinding("tasks/get", TaskParams, tasks_get),
                MethodBinding("tasks/update", UpdateParams, tasks_update),
                MethodBinding("tasks/cancel", TaskParams, tasks_cancel)]

    async def intercept_tool_call(self, params, ctx, call_next):
        support = SUPPORT.get(params.name)
        if support is None:
            return await call_next(ctx)
        if support == "required":
            require_client_extension(ctx, TASKS)
        elif not declared(ctx):
            return await call_next(ctx)
        gathered = None
        if params.name == "test_tool_with_task":
            answers = params.input_responses or {}
            if "user_name" not in answers:
                return await call_next(ctx)
            answer = answers["user_name"]
            gathered = answer.model_dump(by_alias=True) if hasattr(answer, "model_dump") else answer
        task = Task()
        TABLE[task.id] = task
        task.runner = asyncio.get_running_loop().create_task(work(params.name, params.arguments or {}, task, gathered))
        return task.created_result()


server = MCPServer("tasks-app", extensions=[Tasks()])


@server.tool()
def greet(name: str) -> str:
    """Greets `name` (never a task)."""
    return f"Hello, {name}!"


@server.tool()
async def slow_compute(seconds: float = 1, label: str = "") -> str:
    """Sleeps `seconds`, then answers (a task when the client declared the tasks extension)."""
    await asyncio.sleep(seconds)
    return f"computed {label}"


@server.tool()
def failing_job() -> str:
    """Fails (as a task only: the extension is required)."""
    return "unreachable"


@server.tool()
def protocol_error_job() -> str:
    """Crashes (as a task)."""
    raise MCPError(code=-32603, message="the job crashed")


@server.tool()
def confirm_delete(filename: str) -> str:
    """Asks the client to confirm (as a task)."""
    return f"would delete {filename} (ran without the tasks extension)"


@server.tool()
def multi_input() -> str:
    """Asks the client two questions at once (as a task)."""
    return "ran without the tasks extension"


@server.tool()
def test_tool_with_task(ctx: Context) -> str | InputRequiredResult:
    """Asks for a name first (an input-required result), then runs as a task."""
    ask = ElicitRequest(params=ElicitRequestFormParams(
        message="What is your name?",
        requested_schema={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    ))
    return InputRequiredResult(input_requests={"user_name": ask})


@server.tool()
def hidden_report(cls: str) -> str:
    """A report whose status message and result hide a sample of `cls` (as a task)."""
    return "ran without the tasks extension"


@server.tool()
async def chatty(cls: str, ctx: Context) -> str:
    """Reports progress and logs, each message hiding a sample of `cls`, then answers."""
    s = SAMPLES[cls]
    await ctx.report_progress(1, 2, f"half{s}way")
    await ctx.log("info", f"log{s}line")
    return "done"


@server.tool()
async def announce(cls: str, ctx: Context) -> str:
    """Sends on the session's GET stream (related to no call) a log message and an update of
    `res://doc` both hiding a sample of `cls`, then an update of `res://doc` (honest)."""
    s = SAMPLES[cls]
    await ctx.session.send_log_message("info", f"stream{s}log")
    await ctx.session.send_resource_updated(f"res://doc{s}")
    await ctx.session.send_resource_updated("res://doc")
    return "announced"


def task_name_header_checked(app):
    """SEP-2663 extends `Mcp-Name` to the tasks methods (it carries `params.taskId`); the SDK checks
    it for tools, prompts and resources only, so this app checks it for tasks itself: -32020
    under 400 when the header and the body disagree."""

    async def checked(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if isinstance(request, dict) and request.get("method") in ("tasks/get", "tasks/update", "tasks/cancel"):
            header = dict(scope["headers"]).get(b"mcp-name", b"").decode().strip()
            if header != str((request.get("params") or {}).get("taskId")):
                error = {"jsonrpc": "2.0", "id": request.get("id"),
                         "error": {"code": -32020, "message": "Mcp-Name does not match params.taskId"}}
                payload = json.dumps(error).encode()
                await send({"type": "http.response.start", "status": 400,
                            "headers": [(b"content-type", b"application/json")]})
                return await send({"type": "http.response.body", "body": payload})
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await app(scope, replay, send)

    return checked


if __name__ == "__main__":
    serve_on_a_free_port(server, wrap=task_name_header_checked)
