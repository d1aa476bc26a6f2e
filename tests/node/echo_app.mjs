#!/usr/bin/env node
// An app on the official TypeScript SDK's low-level `Server` that runs what it received and says
// so (tests/py/test_mcp_differential.py): its tools `echo` and `slow` answer with the name and
// the arguments the SDK read from the request (the SDK's own transport parses the body:
// JavaScript's JSON.parse keeps the last of a member written twice); its prompts `greeting` and
// `secret` and its resources `echo://public` and `echo://secret` with their own name. Every call
// is also appended as one JSON line to the file named by its first argument.
//
//   PORT=0 node echo_app.mjs RAN_FILE     # port 0: the OS picks; tests read it from /proc
import http from "node:http";
import fs from "node:fs";
import { randomUUID } from "node:crypto";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import {
  CallToolRequestSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListToolsRequestSchema,
  ReadResourceRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

const RAN = process.argv[2];
const ran = (kind, name, args) => {
  const line = JSON.stringify({ kind, name, arguments: args ?? null });
  fs.appendFileSync(RAN, line + "\n");
  return line;
};
const text = (t) => ({ type: "text", text: t });

function makeServer() {
  const server = new Server(
    { name: "echo-typescript", version: "1.0.0" },
    { capabilities: { tools: {}, prompts: {}, resources: {} } },
  );
  const schema = { type: "object", properties: { repo: { type: "string" } } };
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: ["echo", "slow"].map((name) => ({ name, description: `Says what it ran (${name}).`, inputSchema: schema })),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (req) => ({
    content: [text(ran("tool", req.params.name, req.params.arguments))],
  }));
  server.setRequestHandler(ListPromptsRequestSchema, async () => ({
    prompts: ["greeting", "secret"].map((name) => ({ name, description: name })),
  }));
  server.setRequestHandler(GetPromptRequestSchema, async (req) => ({
    messages: [{ role: "user", content: text(ran("prompt", req.params.name, req.params.arguments)) }],
  }));
  server.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: ["echo://public", "echo://secret"].map((uri) => ({ uri, name: uri.slice(7) })),
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => ({
    contents: [{ uri: req.params.uri, text: ran("resource", req.params.uri, null) }],
  }));
  return server;
}

const transports = new Map();
const httpServer = http.createServer(async (req, res) => {
  try {
    const sid = req.headers["mcp-session-id"];
    let transport = sid ? transports.get(sid) : undefined;
    if (!transport) {
      if (sid) {
        res.writeHead(404, { "content-type": "application/json" });
        return res.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32001, message: "Session not found" } }));
      }
      const server = makeServer();
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      transport.onclose = () => {
        if (transport.sessionId) transports.delete(transport.sessionId);
      };
      await server.connect(transport);
    }
    // No parsed body: the SDK's transport reads and parses the request itself.
    await transport.handleRequest(req, res);
  } catch (e) {
    console.error("echo app error:", e);
    if (!res.headersSent) res.writeHead(500).end();
  }
});

httpServer.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  console.error(`echo app listening on ${JSON.stringify(httpServer.address())}`);
});
