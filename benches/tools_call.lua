-- wrk script for benches/load.sh: POSTs MCP `tools/call` of the `echo` tool on an open session.
--
-- Environment:
--   MCP_SESSION  Mcp-Session-Id of a session opened (initialize + notifications/initialized) beforehand
--   MCP_API_KEY  X-API-Key (toolgate only; empty or unset for the direct and plain-hop targets)
--   MCP_VERSION  MCP-Protocol-Version (default 2025-06-18)
--   MCP_MESSAGE  the echoed text (default "hello")
--   MCP_TOOL     the tool's name as the gateway shows it (default "echo"; `fast__echo` on a gateway
--                of several apps, benches/scale.py's `wide`)
--   MCP_STATELESS=1  MCP 2026-07-28 instead: no session; MCP-Protocol-Version 2026-07-28, Mcp-Method
--                and Mcp-Name headers, and the per-request `_meta` envelope in the params
--   MCP_INITIALIZE=1  `initialize` instead, without a session: each answer is a new session (the
--                cost of a client's first contact; load.sh's `initialize` rows)
--
-- Each request carries a fresh JSON-RPC id (thread number * 1e9 + counter): MCP forbids reusing an
-- id within a session, and server-everything routes answers by id, so a constant id would mix up
-- concurrent calls. Building the request per call costs wrk the same on every target.
--
-- `done` prints one machine-readable line that load.sh parses:
--   RESULT requests=N duration_us=N rps=N p50_us=N p99_us=N mean_us=N non2xx=N socket_errors=N

local threads = {}
local counter = 0
local base = 0
local headers = {}
local prefix = '{"jsonrpc":"2.0","id":'
local suffix = ''

function setup(thread)
   thread:set("tnum", #threads + 1)
   table.insert(threads, thread)
end

function init(args)
   base = (tonumber(wrk.thread:get("tnum")) or 1) * 1000000000
   headers["Content-Type"] = "application/json"
   headers["Accept"] = "application/json, text/event-stream"
   headers["MCP-Protocol-Version"] = os.getenv("MCP_VERSION") or "2025-06-18"
   headers["Mcp-Session-Id"] = os.getenv("MCP_SESSION") or ""
   local key = os.getenv("MCP_API_KEY") or ""
   if key ~= "" then
      headers["X-API-Key"] = key
   end
   local message = os.getenv("MCP_MESSAGE") or "hello"
   local tool = os.getenv("MCP_TOOL") or "echo"
   suffix = ',"method":"tools/call","params":{"name":"' .. tool .. '","arguments":{"message":"' .. message .. '"}}}'
   if os.getenv("MCP_STATELESS") == "1" then
      headers["Mcp-Session-Id"] = nil
      headers["MCP-Protocol-Version"] = "2026-07-28"
      headers["Mcp-Method"] = "tools/call"
      headers["Mcp-Name"] = tool
      suffix = ',"method":"tools/call","params":{"name":"' .. tool .. '","arguments":{"message":"' .. message .. '"},'
         .. '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
         .. '"io.modelcontextprotocol/clientCapabilities":{}}}}'
   end
   if os.getenv("MCP_INITIALIZE") == "1" then
      headers["Mcp-Session-Id"] = nil
      headers["MCP-Protocol-Version"] = nil
      suffix = ',"method":"initialize","params":{"protocolVersion":"' .. (os.getenv("MCP_VERSION") or "2025-06-18")
         .. '","capabilities":{},"clientInfo":{"name":"toolgate-load","version":"1"}}}'
   end
end

function request()
   counter = counter + 1
   return wrk.format("POST", nil, headers, prefix .. (base + counter) .. suffix)
end

function done(summary, latency, requests)
   local e = summary.errors
   local secs = summary.duration / 1e6
   io.write(string.format(
      "RESULT requests=%d duration_us=%d rps=%.1f p50_us=%.1f p99_us=%.1f mean_us=%.1f non2xx=%d socket_errors=%d\n",
      summary.requests, summary.duration, summary.requests / secs,
      latency:percentile(50), latency:percentile(99), latency.mean,
      e.status, e.connect + e.read + e.write + e.timeout))
end
