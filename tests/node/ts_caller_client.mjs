#!/usr/bin/env node
// The official TypeScript SDK as one member's client of a gateway whose app is connected by each
// user (run by tests/py/test_user_connections_leak.py).
//
//   node ts_caller_client.mjs URL KEY CALLER TAG N
//
// Calls the app's `record` tool N times with `{caller: CALLER, tag: TAG-i}`, two at a time, and
// prints one JSON line: per call its tag and either the text answered or the error's code and
// `data.url` (a member without a connection is refused: the caller asserts what it got).
import { check, connect } from "./ts_common.mjs";

const [url, key, caller, tag, n] = process.argv.slice(2);
check(url && key && caller && tag && n, "usage: ts_caller_client.mjs URL KEY CALLER TAG N");

const { client, transport } = await connect(url, key, `toolgate-ts-${caller}`);
const calls = [];
async function one(i) {
  const t = `${tag}-${i}`;
  try {
    const r = await client.callTool({ name: "record", arguments: { caller, tag: t } });
    calls.push({ tag: t, text: r.content?.[0]?.text ?? null, isError: Boolean(r.isError) });
  } catch (e) {
    calls.push({ tag: t, code: e.code ?? null, url: e.data?.url ?? null });
  }
}
for (let i = 0; i < Number(n); i += 2) {
  await Promise.all([one(i), i + 1 < Number(n) ? one(i + 1) : Promise.resolve()]);
}
await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ calls }));
