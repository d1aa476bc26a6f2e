#!/usr/bin/env node
// The official TypeScript SDK as a client of a gateway in front of tests/py/content_server.py
// (run by tests/py/test_mcp_content.py).
//
//   node ts_content_client.mjs URL KEY CLASS
//
// Calls `hide_result`, `tool_error` and `rpc_error` with CLASS, `honest`, reads
// `res://hide/CLASS` and gets `say_CLASS`; prints one JSON line with each answer as it arrived
// (a result, or an error's code, message and data).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, key, cls] = process.argv.slice(2);
if (!url || !key || !cls) {
  console.error("usage: ts_content_client.mjs URL KEY CLASS");
  process.exit(2);
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { "X-API-Key": key } },
});
const client = new Client({ name: "toolgate-ts-content", version: "1.0.0" });
await client.connect(transport);

async function answer(ask) {
  try {
    return { result: await ask() };
  } catch (e) {
    return { code: e.code, message: e.message, data: e.data };
  }
}

const out = {
  hide_result: await answer(() => client.callTool({ name: "hide_result", arguments: { cls } })),
  tool_error: await answer(() => client.callTool({ name: "tool_error", arguments: { cls } })),
  rpc_error: await answer(() => client.callTool({ name: "rpc_error", arguments: { cls } })),
  honest: await answer(() => client.callTool({ name: "honest", arguments: {} })),
  resource: await answer(() => client.readResource({ uri: `res://hide/${cls}` })),
  prompt: await answer(() => client.getPrompt({ name: `say_${cls}` })),
};

await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));
