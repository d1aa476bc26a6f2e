#!/usr/bin/env node
// The official TypeScript SDK as a client of a gateway that shapes server-everything's `get-sum`
// as `add-ten` (its `b` fixed at 10): run by tests/py/test_tool_overrides.py.
//
//   node ts_shaped_client.mjs URL KEY
//
// Prints one JSON line with what it saw; exits 1 with a message on the first failed check.
import { check, connect } from "./ts_common.mjs";

const [url, key] = process.argv.slice(2);
if (!url || !key) {
  console.error("usage: ts_shaped_client.mjs URL KEY");
  process.exit(2);
}

const { client, transport } = await connect(url, key, "toolgate-ts-shaped");
const tools = (await client.listTools()).tools;
const add = tools.find((t) => t.name === "add-ten");
check(add, "listTools has add-ten", tools.map((t) => t.name));
check(!tools.some((t) => t.name === "get-sum"), "the app's name is not listed");
check(JSON.stringify(Object.keys(add.inputSchema.properties)) === '["a"]', "b is gone from the schema", add.inputSchema);

const sum = await client.callTool({ name: "add-ten", arguments: { a: 2 } });
check(!sum.isError && sum.content?.[0]?.text === "The sum of 2 and 10 is 12.", "add-ten adds ten", sum);

let fixed;
try {
  await client.callTool({ name: "add-ten", arguments: { a: 2, b: 1 } });
} catch (e) {
  fixed = e;
}
check(fixed && fixed.code === -32602 && /`b`/.test(fixed.message), "a fixed argument sent is -32602", fixed && { code: fixed.code, message: fixed.message });

await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ ok: true, tools: tools.map((t) => t.name), sum: sum.content[0].text }));
