#!/usr/bin/env node
// The official TypeScript SDK as a client of a gateway with an external guard that masks e-mail
// addresses in results, denies one time zone, and denies a result it calls classified: run by
// tests/py/test_guards.py.
//
//   node ts_guard_client.mjs URL KEY DENIED_ZONE
//
// Prints one JSON line with what it saw; exits 1 with a message on the first failed check.
import { check, connect } from "./ts_common.mjs";

const [url, key, zone] = process.argv.slice(2);
if (!url || !key || !zone) {
  console.error("usage: ts_guard_client.mjs URL KEY DENIED_ZONE");
  process.exit(2);
}

/** The JSON-RPC error a call raises, as {code, message}; null when it succeeds. */
async function refusal(client, args) {
  try {
    await client.callTool({ name: "get_current_time", arguments: args });
  } catch (e) {
    return { code: e.code, message: e.message };
  }
  return null;
}

const { client, transport } = await connect(url, key, "toolgate-ts-guard");
const mail = await client.callTool({ name: "get_current_time", arguments: { format: "[mail dave@example.com]" } });
check(!mail.isError, "the masked call succeeds", mail);
const denied = await refusal(client, { format: "YYYY", timezone: zone });
check(denied, "the denied time zone is refused");
const classified = await refusal(client, { format: "[classified]" });
check(classified, "the classified result is refused");

await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ masked: mail.content[0].text, denied, classified }));
