#!/usr/bin/env node
// The official TypeScript SDK as a client of a toolgate gateway (run by tests/py/test_mcp_ts_sdk.py).
//
//   node ts_client.mjs URL KEY [TIME_TOOL]
//
// TIME_TOOL is the exposed name of the built-in time tool (`get_current_time` on a single-app
// gateway, `time__get_current_time` beside other apps). Prints one JSON line with what it saw;
// exits 1 with a message on the first failed check.
import { check, connect } from "./ts_common.mjs";

const [url, key, timeTool = "get_current_time"] = process.argv.slice(2);
if (!url || !key) {
  console.error("usage: ts_client.mjs URL KEY [TIME_TOOL]");
  process.exit(2);
}

const { client, transport } = await connect(url, key, "toolgate-ts-test");
check(transport.sessionId, "gateway gave a session id");
check(client.getServerVersion()?.name === "toolgate", "serverInfo.name is toolgate", client.getServerVersion());
check(client.getServerCapabilities()?.tools?.listChanged === true, "tools.listChanged", client.getServerCapabilities());

const tools = await client.listTools();
const names = tools.tools.map((t) => t.name);
const time = tools.tools.find((t) => t.name === timeTool);
check(time, `listTools has ${timeTool}`, names);
check(time.inputSchema?.properties?.format && time.inputSchema?.properties?.timezone, "time tool input schema", time);

const ok = await client.callTool({
  name: timeTool,
  arguments: { format: "YYYY-MM-DD HH:mm", timezone: "America/New_York" },
});
check(!ok.isError, "get_current_time succeeds", ok);
check(/^\d{4}-\d\d-\d\d \d\d:\d\d$/.test(ok.content?.[0]?.text ?? ""), "formatted as YYYY-MM-DD HH:mm", ok.content);
check(ok.structuredContent?.timezone === "America/New_York", "structuredContent.timezone", ok.structuredContent);

const badZone = await client.callTool({ name: timeTool, arguments: { format: "YYYY", timezone: "Nowhere/Land" } });
check(badZone.isError === true, "unknown zone is an isError result", badZone);

let unknown;
try {
  await client.callTool({ name: "no_such_tool", arguments: {} });
} catch (e) {
  unknown = e;
}
check(unknown && unknown.code === -32602, "unknown tool is -32602", unknown && { code: unknown.code, message: unknown.message });
check(/Unknown tool: no_such_tool/.test(unknown.message), "unknown tool message", unknown.message);

await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ ok: true, tools: names, time: ok.content[0].text }));
