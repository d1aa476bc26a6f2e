// What the TypeScript SDK clients of the tests share: a check that stops the script with a
// message, and a client connected to a gateway with an `X-API-Key`.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

export function check(cond, what, detail) {
  if (!cond) {
    console.error(`FAILED: ${what}${detail === undefined ? "" : `: ${JSON.stringify(detail)}`}`);
    process.exit(1);
  }
}

/** A connected client of the gateway at `url`, and its transport. */
export async function connect(url, key, name) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { "X-API-Key": key } },
  });
  const client = new Client({ name, version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}
