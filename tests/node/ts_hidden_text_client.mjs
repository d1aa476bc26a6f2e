#!/usr/bin/env node
// The official TypeScript SDK as a client of a gateway in front of tests/py/hidden_text_server.py
// (run by tests/py/test_mcp_hidden_text.py).
//
//   node ts_hidden_text_client.mjs URL KEY
//
// Lists the gateway's tools and prompts and calls each tool (`hide_<class>` and `clean_tool`);
// prints one JSON line: the tools and prompts as listed, and per tool its result's text or its
// error's code, message and data.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, key] = process.argv.slice(2);
if (!url || !key) {
  console.error("usage: ts_hidden_text_client.mjs URL KEY");
  process.exit(2);
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { "X-API-Key": key } },
});
const client = new Client({ name: "toolgate-ts-hidden-text", version: "1.0.0" });
await client.connect(transport);

const tools = (await client.listTools()).tools;
const prompts = (await client.listPrompts()).prompts;
const classes = ["tag", "zero_width", "bidi", "ansi_escape", "control", "variation_selector", "private_use"];
const calls = {};
for (const name of [...classes.map((c) => `hide_${c}`), "clean_tool"]) {
  try {
    const r = await client.callTool({ name, arguments: { query: "q" } });
    calls[name] = { text: r.content?.[0]?.text };
  } catch (e) {
    calls[name] = { code: e.code, message: e.message, data: e.data };
  }
}

await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ tools, prompts, calls }));
