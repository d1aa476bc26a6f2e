#!/usr/bin/env node
// The official TypeScript SDK as a client that answers sampling requests, through a toolgate
// gateway (run by tests/py/test_mcp_server_requests.py).
//
//   node ts_sampling_client.mjs URL KEY TOOL
//
// Declares the `sampling` capability, answers every `sampling/createMessage` with a canned
// message, calls TOOL (an app tool that asks the client for a sampling) with `{prompt}`, and
// prints one JSON line: the prompts it was asked and the tool's result.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CreateMessageRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, key, tool] = process.argv.slice(2);
if (!url || !key || !tool) {
  console.error("usage: ts_sampling_client.mjs URL KEY TOOL");
  process.exit(2);
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { "X-API-Key": key } },
});
const client = new Client({ name: "toolgate-ts-sampling", version: "1.0.0" }, { capabilities: { sampling: {} } });
const asked = [];
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  asked.push(request.params.messages.map((m) => m.content?.text ?? "").join("\n"));
  return { role: "assistant", content: { type: "text", text: "sampled by the TypeScript SDK" }, model: "ts-model" };
});
await client.connect(transport);
const result = await client.callTool({ name: tool, arguments: { prompt: "hello from TypeScript" } });
await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ asked, result }));
