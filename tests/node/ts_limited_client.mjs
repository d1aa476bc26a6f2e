#!/usr/bin/env node
// The official TypeScript SDK as a client of a gateway that limits server-everything's `echo` to
// one call a minute per caller: run by tests/py/test_tool_limits.py. The second call must come
// back as a tool result marked isError (not a thrown error), its text and _meta saying the wait.
//
//   node ts_limited_client.mjs URL KEY
//
// Prints one JSON line with what it saw; exits 1 with a message on the first failed check.
import { check, connect } from "./ts_common.mjs";

const [url, key] = process.argv.slice(2);
if (!url || !key) {
  console.error("usage: ts_limited_client.mjs URL KEY");
  process.exit(2);
}

const { client, transport } = await connect(url, key, "toolgate-ts-limited");
const first = await client.callTool({ name: "echo", arguments: { message: "one" } });
check(!first.isError && first.content?.[0]?.text === "Echo: one", "the first call goes through", first);
const second = await client.callTool({ name: "echo", arguments: { message: "two" } });
check(second.isError === true, "the second call is a result marked isError", second);
const text = second.content?.[0]?.text ?? "";
check(/limited to 1 call a minute/.test(text), "its text names the limit", text);
check(second._meta?.tool === "echo" && second._meta?.limit === 1, "its _meta names the tool and the limit", second._meta);

await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ ok: true, text, meta: second._meta }));
