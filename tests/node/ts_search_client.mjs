#!/usr/bin/env node
// The official TypeScript SDK as a client of a gateway in search mode (`discovery: search`) over
// server-everything: run by tests/py/test_mcp_search.py. It lists (only `search_tools`),
// searches, waits for the SDK's own list-changed handling to fetch the list again, and calls the
// found tool by its own definition.
//
//   node ts_search_client.mjs URL KEY
//
// Prints one JSON line with what it saw; exits 1 with a message on the first failed check.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { check } from "./ts_common.mjs";

const [url, key] = process.argv.slice(2);
if (!url || !key) {
  console.error("usage: ts_search_client.mjs URL KEY");
  process.exit(2);
}

let changed;
const refetched = new Promise((resolve) => {
  changed = resolve;
});
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { "X-API-Key": key } },
});
const client = new Client(
  { name: "toolgate-ts-search", version: "1.0.0" },
  {
    listChanged: {
      tools: {
        debounceMs: 0,
        onChanged: (error, tools) => {
          if (!error && tools?.some((t) => t.name === "get-sum")) changed(tools);
        },
      },
    },
  },
);
await client.connect(transport);

const before = (await client.listTools()).tools.map((t) => t.name);
check(before.length === 1 && before[0] === "search_tools", "the list is search_tools alone", before);

const found = await client.callTool({ name: "search_tools", arguments: { query: "sum two numbers", limit: 3 } });
check(!found.isError && found.structuredContent?.tools?.[0]?.name === "get-sum", "the search finds get-sum", found);

// The SDK fetched the list again on its own, told by notifications/tools/list_changed.
const tools = await refetched;
const sumTool = tools.find((t) => t.name === "get-sum");
check(JSON.stringify(Object.keys(sumTool.inputSchema.properties).sort()) === '["a","b"]', "get-sum's own schema", sumTool);
check(sumTool.annotations?.destructiveHint === false, "get-sum's own annotations", sumTool.annotations);

const sum = await client.callTool({ name: "get-sum", arguments: { a: 6, b: 7 } });
check(!sum.isError && sum.content?.[0]?.text === "The sum of 6 and 7 is 13.", "get-sum adds", sum);

await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ ok: true, before, changed: tools.map((t) => t.name), sum: sum.content[0].text }));
