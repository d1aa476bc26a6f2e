#!/usr/bin/env node
// The upstream that `@modelcontextprotocol/conformance server` scenarios expect: the test tools,
// resources and prompts named in the suite's scenario descriptions (the npm package ships no
// reference server). Written with the official TypeScript SDK's low-level `Server` and its
// Streamable HTTP transport, stateful (one server per session), on node:http.
//
//   PORT=0 node conformance/fixture.mjs      # port 0: the OS picks; tests read it from /proc
//
// Requests whose Host or Origin is not a localhost name get 403 (DNS-rebinding protection, as the
// `dns-rebinding-protection` scenario requires of a localhost server).
import http from "node:http";
import * as z from "zod/v4";
import { randomUUID } from "node:crypto";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import {
  CallToolRequestSchema,
  CompleteRequestSchema,
  CreateMessageResultSchema,
  ElicitResultSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  ReadResourceRequestSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

const PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";
// Any result object: the answers to the fixture's questions are read leniently.
const ANY_RESULT = z.object({}).passthrough();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const noArgs = { type: "object", properties: {} };
const text = (t) => ({ content: [{ type: "text", text: t }] });

const ELICIT_DEFAULTS = {
  type: "object",
  properties: {
    name: { type: "string", description: "User name", default: "John Doe" },
    age: { type: "integer", description: "User age", default: 30 },
    score: { type: "number", description: "User score", default: 95.5 },
    status: { type: "string", description: "User status", enum: ["active", "inactive", "pending"], default: "active" },
    verified: { type: "boolean", description: "Verification status", default: true },
  },
  required: [],
};
const ELICIT_ENUMS = {
  type: "object",
  properties: {
    untitledSingle: { type: "string", description: "Select one option", enum: ["option1", "option2", "option3"] },
    titledSingle: {
      type: "string",
      description: "Select one option with titles",
      oneOf: [
        { const: "value1", title: "First Option" },
        { const: "value2", title: "Second Option" },
        { const: "value3", title: "Third Option" },
      ],
    },
    legacyEnum: {
      type: "string",
      description: "Select one option (legacy)",
      enum: ["opt1", "opt2", "opt3"],
      enumNames: ["Option One", "Option Two", "Option Three"],
    },
    untitledMulti: {
      type: "array",
      description: "Select multiple options",
      minItems: 1,
      maxItems: 3,
      items: { type: "string", enum: ["option1", "option2", "option3"] },
    },
    titledMulti: {
      type: "array",
      description: "Select multiple options with titles",
      minItems: 1,
      maxItems: 3,
      items: {
        anyOf: [
          { const: "value1", title: "First Choice" },
          { const: "value2", title: "Second Choice" },
          { const: "value3", title: "Third Choice" },
        ],
      },
    },
  },
  required: [],
};

const TOOLS = [
  { name: "test_simple_text", description: "Tests simple text content response", inputSchema: noArgs },
  { name: "test_image_content", description: "Tests image content response", inputSchema: noArgs },
  { name: "test_audio_content", description: "Tests audio content response", inputSchema: noArgs },
  { name: "test_embedded_resource", description: "Tests embedded resource content response", inputSchema: noArgs },
  { name: "test_multiple_content_types", description: "Tests text, image and resource content", inputSchema: noArgs },
  { name: "test_tool_with_logging", description: "Emits log messages while running", inputSchema: noArgs },
  { name: "test_tool_with_progress", description: "Reports progress notifications", inputSchema: noArgs },
  { name: "test_error_handling", description: "Always fails", inputSchema: noArgs },
  { name: "test_reconnection", description: "Closes its SSE stream mid-call (SEP-1699)", inputSchema: noArgs },
  {
    name: "test_sampling",
    description: "Asks the client for an LLM completion",
    inputSchema: { type: "object", properties: { prompt: { type: "string" } }, required: ["prompt"] },
  },
  {
    name: "test_elicitation",
    description: "Asks the user for input",
    inputSchema: { type: "object", properties: { message: { type: "string" } }, required: ["message"] },
  },
  { name: "test_elicitation_sep1034_defaults", description: "Elicitation with defaults", inputSchema: noArgs },
  { name: "test_elicitation_sep1330_enums", description: "Elicitation with enum schemas", inputSchema: noArgs },
  // The 2026-07-28 scenarios' tools, in handshake-era terms: the app asks the client with a
  // server->client request, which toolgate turns into an input-required result for a stateless
  // client. `params._meta["toolgate.dev/inputKey"]` names the key the client answers under.
  { name: "test_missing_capability", description: "Needs sampling, which the caller may not declare", inputSchema: noArgs },
  { name: "test_streaming_elicitation", description: "Asks the user mid-call", inputSchema: noArgs },
  { name: "test_logging_tool", description: "Emits log messages while running", inputSchema: noArgs },
  { name: "test_trigger_tool_change", description: "Announces a change of the tool list", inputSchema: noArgs },
  { name: "test_trigger_prompt_change", description: "Announces a change of the prompt list", inputSchema: noArgs },
  ...[
    "elicitation",
    "sampling",
    "list_roots",
    "request_state",
    "multiple_inputs",
    "multi_round",
    "tampered_state",
    "capabilities",
  ].map((n) => ({ name: `test_input_required_result_${n}`, description: `Input-required flow: ${n}`, inputSchema: noArgs })),
  {
    name: "test_param_headers",
    description: "Declares an Mcp-Param header for its region argument",
    inputSchema: { type: "object", properties: { region: { type: "string", "x-mcp-header": "Region" } }, required: ["region"] },
  },
  {
    name: "json_schema_2020_12_tool",
    description: "Tool with JSON Schema 2020-12 features (SEP-1613)",
    inputSchema: {
      $schema: "https://json-schema.org/draft/2020-12/schema",
      type: "object",
      $defs: { address: { type: "object", properties: { street: { type: "string" }, city: { type: "string" } } } },
      properties: { name: { type: "string" }, address: { $ref: "#/$defs/address" } },
      additionalProperties: false,
    },
  },
];

const RESOURCES = {
  "test://static-text": {
    meta: { name: "static-text", title: "Static Text Resource", mimeType: "text/plain" },
    contents: [{ uri: "test://static-text", mimeType: "text/plain", text: "This is the content of the static text resource." }],
  },
  "test://static-binary": {
    meta: { name: "static-binary", title: "Static Binary Resource", mimeType: "image/png" },
    contents: [{ uri: "test://static-binary", mimeType: "image/png", blob: PNG }],
  },
  "test://watched-resource": {
    meta: { name: "watched-resource", title: "Watched Resource", mimeType: "text/plain" },
    contents: [{ uri: "test://watched-resource", mimeType: "text/plain", text: "Watched resource content" }],
  },
};

const PROMPTS = [
  { name: "test_input_required_result_prompt", description: "Asks the user for context first" },
  { name: "test_simple_prompt", title: "Simple Test Prompt", description: "A simple prompt without arguments" },
  {
    name: "test_prompt_with_arguments",
    title: "Prompt With Arguments",
    description: "A prompt with required arguments",
    arguments: [
      { name: "arg1", description: "First test argument", required: true },
      { name: "arg2", description: "Second test argument", required: true },
    ],
  },
  {
    name: "test_prompt_with_embedded_resource",
    title: "Prompt With Embedded Resource",
    description: "A prompt that includes an embedded resource",
    arguments: [{ name: "resourceUri", description: "URI of the resource to embed", required: true }],
  },
  { name: "test_prompt_with_image", title: "Prompt With Image", description: "A prompt that includes image content" },
];

const transports = new Map();

function makeServer() {
  const server = new Server(
    { name: "toolgate-conformance-fixture", version: "1.0.0" },
    {
      capabilities: {
        tools: { listChanged: true },
        resources: { subscribe: true, listChanged: true },
        prompts: { listChanged: true },
        logging: {},
        completions: {},
      },
    },
  );
  const log = (level, data) =>
    server.notification({ method: "notifications/message", params: { level, logger: "fixture", data } }).catch(() => {});

  // A question to the client, naming the key a stateless client answers it under at toolgate.
  const ask = (extra, key, method, params) =>
    extra.sendRequest({ method, params: { ...params, _meta: { "toolgate.dev/inputKey": key } } }, ANY_RESULT);

  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const args = req.params.arguments ?? {};
    switch (req.params.name) {
      case "test_simple_text":
        return text("This is a simple text response for testing.");
      case "test_missing_capability": {
        const r = await extra.sendRequest(
          { method: "sampling/createMessage", params: { messages: [{ role: "user", content: { type: "text", text: "hi" } }], maxTokens: 10 } },
          CreateMessageResultSchema,
        );
        return text(`sampled: ${r.content?.text}`);
      }
      case "test_streaming_elicitation":
      case "test_input_required_result_elicitation":
      case "test_input_required_result_tampered_state": {
        const r = await ask(extra, "user_name", "elicitation/create", {
          message: "What is your name?",
          requestedSchema: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
        });
        return text(`Hello, ${r.content?.name ?? "unknown"}! (${r.action})`);
      }
      case "test_input_required_result_sampling": {
        const r = await ask(extra, "capital_question", "sampling/createMessage", {
          messages: [{ role: "user", content: { type: "text", text: "What is the capital of France?" } }],
          maxTokens: 100,
        });
        return text(`LLM said: ${r.content?.text}`);
      }
      case "test_input_required_result_list_roots": {
        const r = await ask(extra, "client_roots", "roots/list", {});
        return text(`Roots: ${(r.roots ?? []).map((x) => x.uri).join(", ")}`);
      }
      case "test_input_required_result_request_state": {
        const r = await ask(extra, "confirm", "elicitation/create", {
          message: "Please confirm",
          requestedSchema: { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] },
        });
        return text(`state-ok: confirmed=${r.content?.ok}`);
      }
      case "test_input_required_result_multiple_inputs": {
        const [who, capital, roots] = await Promise.all([
          ask(extra, "user_name", "elicitation/create", {
            message: "What is your name?",
            requestedSchema: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
          }),
          ask(extra, "capital_question", "sampling/createMessage", {
            messages: [{ role: "user", content: { type: "text", text: "What is the capital of France?" } }],
            maxTokens: 100,
          }),
          ask(extra, "client_roots", "roots/list", {}),
        ]);
        return text(`name=${who.content?.name} capital=${capital.content?.text} roots=${(roots.roots ?? []).length}`);
      }
      case "test_input_required_result_multi_round": {
        const first = await ask(extra, "step1", "elicitation/create", {
          message: "What is your name?",
          requestedSchema: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
        });
        const second = await ask(extra, "step2", "elicitation/create", {
          message: `Hello ${first.content?.name}, what is your favourite colour?`,
          requestedSchema: { type: "object", properties: { color: { type: "string" } }, required: ["color"] },
        });
        return text(`${first.content?.name} likes ${second.content?.color}`);
      }
      case "test_input_required_result_capabilities": {
        // A stateless client's capabilities, which toolgate passes on in the call's _meta.
        const caps = req.params._meta?.["toolgate.dev/clientCapabilities"] ?? server.getClientCapabilities() ?? {};
        if (caps.elicitation) {
          const r = await ask(extra, "user_name", "elicitation/create", {
            message: "What is your name?",
            requestedSchema: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
          });
          return text(`Hello ${r.content?.name}`);
        }
        if (caps.sampling) {
          const r = await ask(extra, "capital_question", "sampling/createMessage", {
            messages: [{ role: "user", content: { type: "text", text: "What is the capital of France?" } }],
            maxTokens: 100,
          });
          return text(`LLM said: ${r.content?.text}`);
        }
        return text("no capability to ask with");
      }
      case "test_logging_tool":
        for (const data of ["started", "working", "done"]) {
          await extra.sendNotification({ method: "notifications/message", params: { level: "info", data } });
        }
        return text("logged three messages");
      case "test_trigger_tool_change":
        await server.sendToolListChanged();
        return text("tool list changed");
      case "test_trigger_prompt_change":
        await server.sendPromptListChanged();
        return text("prompt list changed");
      case "test_param_headers":
        return text(`region ${args.region}`);
      case "test_image_content":
        return { content: [{ type: "image", data: PNG, mimeType: "image/png" }] };
      case "test_audio_content":
        return { content: [{ type: "audio", data: WAV, mimeType: "audio/wav" }] };
      case "test_embedded_resource":
        return {
          content: [
            {
              type: "resource",
              resource: { uri: "test://embedded-resource", mimeType: "text/plain", text: "This is an embedded resource content." },
            },
          ],
        };
      case "test_multiple_content_types":
        return {
          content: [
            { type: "text", text: "Multiple content types test:" },
            { type: "image", data: PNG, mimeType: "image/png" },
            {
              type: "resource",
              resource: {
                uri: "test://mixed-content-resource",
                mimeType: "application/json",
                text: JSON.stringify({ test: "data", value: 123 }),
              },
            },
          ],
        };
      case "test_tool_with_logging":
        for (const data of ["Tool execution started", "Tool processing data", "Tool execution completed"]) {
          await extra.sendNotification({ method: "notifications/message", params: { level: "info", data } });
          await sleep(50);
        }
        return text("Tool with logging executed successfully");
      case "test_tool_with_progress": {
        const progressToken = extra._meta?.progressToken ?? 0;
        for (const progress of [0, 50, 100]) {
          await extra.sendNotification({
            method: "notifications/progress",
            params: { progressToken, progress, total: 100, message: `Completed step ${progress} of 100` },
          });
          await sleep(50);
        }
        return text(String(progressToken));
      }
      case "test_error_handling":
        return { isError: true, content: [{ type: "text", text: "This tool intentionally returns an error for testing" }] };
      case "test_reconnection": {
        const t = extra.sessionId && transports.get(extra.sessionId);
        if (t && extra.requestId !== undefined) t.closeSSEStream(extra.requestId);
        await sleep(100);
        return text("Reconnection test completed successfully.");
      }
      case "test_sampling": {
        try {
          const r = await extra.sendRequest(
            {
              method: "sampling/createMessage",
              params: { messages: [{ role: "user", content: { type: "text", text: args.prompt } }], maxTokens: 100 },
            },
            CreateMessageResultSchema,
          );
          return text(`LLM response: ${r.content?.text ?? "No response"}`);
        } catch (e) {
          return text(`Sampling not supported or error: ${e.message}`);
        }
      }
      case "test_elicitation":
      case "test_elicitation_sep1034_defaults":
      case "test_elicitation_sep1330_enums": {
        const [message, requestedSchema] =
          req.params.name === "test_elicitation"
            ? [args.message, { type: "object", properties: { response: { type: "string", description: "User's response" } }, required: ["response"] }]
            : req.params.name === "test_elicitation_sep1034_defaults"
              ? ["Please review and update the form fields with defaults", ELICIT_DEFAULTS]
              : ["Please select options from the enum fields", ELICIT_ENUMS];
        try {
          const r = await extra.sendRequest(
            { method: "elicitation/create", params: { mode: "form", message, requestedSchema } },
            ElicitResultSchema,
          );
          return text(`Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
        } catch (e) {
          return text(`Elicitation not supported or error: ${e.message}`);
        }
      }
      case "json_schema_2020_12_tool":
        return text(`JSON Schema 2020-12 tool called with: ${JSON.stringify(args)}`);
      default:
        throw Object.assign(new Error(`Unknown tool: ${req.params.name}`), { code: -32602 });
    }
  });

  server.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: Object.entries(RESOURCES).map(([uri, r]) => ({ uri, ...r.meta })),
  }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [
      { uriTemplate: "test://template/{id}/data", name: "template", title: "Resource Template", mimeType: "application/json" },
    ],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => {
    const uri = req.params.uri;
    if (RESOURCES[uri]) return { contents: RESOURCES[uri].contents };
    const m = /^test:\/\/template\/([^/]+)\/data$/.exec(uri);
    if (m) {
      const id = m[1];
      return { contents: [{ uri, mimeType: "application/json", text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }] };
    }
    throw Object.assign(new Error(`Resource not found: ${uri}`), { code: -32002 });
  });
  server.setRequestHandler(SubscribeRequestSchema, async (req) => {
    log("info", `Subscribed to resource: ${req.params.uri}`);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (req) => {
    log("info", `Unsubscribed from resource: ${req.params.uri}`);
    return {};
  });

  server.setRequestHandler(ListPromptsRequestSchema, async () => ({ prompts: PROMPTS }));
  server.setRequestHandler(GetPromptRequestSchema, async (req, extra) => {
    const a = req.params.arguments ?? {};
    const user = (content) => ({ role: "user", content });
    switch (req.params.name) {
      case "test_simple_prompt":
        return { messages: [user({ type: "text", text: "This is a simple prompt for testing." })] };
      case "test_prompt_with_arguments":
        return { messages: [user({ type: "text", text: `Prompt with arguments: arg1='${a.arg1}', arg2='${a.arg2}'` })] };
      case "test_prompt_with_embedded_resource":
        return {
          messages: [
            user({ type: "resource", resource: { uri: a.resourceUri, mimeType: "text/plain", text: "Embedded resource content for testing." } }),
            user({ type: "text", text: "Please process the embedded resource above." }),
          ],
        };
      case "test_input_required_result_prompt": {
        const r = await ask(extra, "prompt_context", "elicitation/create", {
          message: "What context should the prompt use?",
          requestedSchema: { type: "object", properties: { context: { type: "string" } }, required: ["context"] },
        });
        return { messages: [user({ type: "text", text: `Prompt with context: ${r.content?.context}` })] };
      }
      case "test_prompt_with_image":
        return {
          messages: [user({ type: "image", data: PNG, mimeType: "image/png" }), user({ type: "text", text: "Please analyze the image above." })],
        };
      default:
        throw Object.assign(new Error(`Unknown prompt: ${req.params.name}`), { code: -32602 });
    }
  });

  server.setRequestHandler(SetLevelRequestSchema, async (req) => {
    log("info", `Log level set to: ${req.params.level}`);
    return {};
  });
  server.setRequestHandler(CompleteRequestSchema, async () => ({ completion: { values: [], total: 0, hasMore: false } }));
  return server;
}

function eventStore() {
  const events = new Map();
  return {
    async storeEvent(streamId, message) {
      const id = `${streamId}::${String(events.size).padStart(8, "0")}`;
      events.set(id, { streamId, message });
      return id;
    },
    async replayEventsAfter(lastEventId, { send }) {
      const streamId = lastEventId.split("::")[0];
      for (const [id, e] of events) {
        if (e.streamId === streamId && id > lastEventId && Object.keys(e.message).length > 0) await send(id, e.message);
      }
      return streamId;
    },
  };
}

const LOCAL = new Set(["localhost", "127.0.0.1", "[::1]", "::1"]);
function hostname(hostPort) {
  if (!hostPort) return "";
  if (hostPort.startsWith("[")) return hostPort.slice(0, hostPort.indexOf("]") + 1);
  return hostPort.split(":")[0];
}
function localOnly(req) {
  if (!LOCAL.has(hostname(req.headers.host))) return false;
  const origin = req.headers.origin;
  if (!origin) return true;
  try {
    return LOCAL.has(new URL(origin).hostname) || LOCAL.has(`[${new URL(origin).hostname}]`);
  } catch {
    return false;
  }
}

function jsonError(res, status, code, message) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id: null }));
}

const httpServer = http.createServer(async (req, res) => {
  try {
    if (!localOnly(req)) return jsonError(res, 403, -32000, "Forbidden: Host/Origin is not localhost");
    if (new URL(req.url, "http://localhost").pathname !== "/mcp") return jsonError(res, 404, -32000, "Not found");
    let body;
    if (req.method === "POST") {
      const chunks = [];
      for await (const c of req) chunks.push(c);
      try {
        body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch {
        return jsonError(res, 400, -32700, "Parse error");
      }
    }
    const sid = req.headers["mcp-session-id"];
    let transport = sid ? transports.get(sid) : undefined;
    if (!transport) {
      if (sid) return jsonError(res, 404, -32001, "Session not found");
      if (req.method !== "POST" || body?.method !== "initialize") {
        return jsonError(res, 400, -32000, "Bad Request: No valid session ID provided");
      }
      const server = makeServer();
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: eventStore(),
        retryInterval: 500,
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      transport.onclose = () => {
        if (transport.sessionId) transports.delete(transport.sessionId);
        server.close().catch(() => {});
      };
      await server.connect(transport);
    }
    await transport.handleRequest(req, res, body);
  } catch (e) {
    console.error("fixture error:", e);
    if (!res.headersSent) jsonError(res, 500, -32603, "Internal server error");
  }
});

httpServer.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  console.error(`conformance fixture listening on ${JSON.stringify(httpServer.address())}`);
});
