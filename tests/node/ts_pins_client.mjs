#!/usr/bin/env node
// The official TypeScript SDK as a client of a gateway under `tool_policy` (run by
// tests/py/test_tool_pins.py).
//
//   node ts_pins_client.mjs URL KEY TOOL held|served
//
// `held`: TOOL is not listed and calling it is the error -32011 naming it. `served`: TOOL is
// listed and calling it succeeds. Prints one JSON line with what it saw; exits 1 with a message
// on the first failed check.
import { check, connect } from "./ts_common.mjs";

const [url, key, tool, expect] = process.argv.slice(2);
if (!url || !key || !tool || !["held", "served"].includes(expect)) {
  console.error("usage: ts_pins_client.mjs URL KEY TOOL held|served");
  process.exit(2);
}

const { client, transport } = await connect(url, key, "toolgate-ts-pins");
const tools = (await client.listTools()).tools;
const names = tools.map((t) => t.name);
const listed = tools.find((t) => t.name === tool);
let called;
let error;
try {
  called = await client.callTool({ name: tool, arguments: { to: "ts@example.test", text: "x" } });
} catch (e) {
  error = e;
}
if (expect === "held") {
  check(!listed, `${tool} is not listed`, names);
  check(error && error.code === -32011, `calling ${tool} is -32011`, error && { code: error.code, message: error.message });
  check(error.message.includes(tool) && error.message.includes("awaits approval"), "the error names the tool", error.message);
} else {
  check(listed, `${tool} is listed`, names);
  check(!error && called && !called.isError, `calling ${tool} succeeds`, error ? error.message : called);
}
await transport.terminateSession();
console.log(JSON.stringify({ tools: names, description: listed?.description ?? null, error: error ? error.code : null }));
