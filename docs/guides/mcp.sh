# Shell helpers of the guides in docs/guides/ (bash; needs curl and jq). Source it from the
# repository's root: `. docs/guides/mcp.sh`. TG is toolgate's address, KEY an owner's API key.
TG=${TG:-http://localhost:8080}

# api METHOD PATH [JSON]: the management API with $KEY; prints the answer's body.
api() {
  curl -s -X "$1" "$TG$2" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' ${3:+-d "$3"}
}

# mcp METHOD [PARAMS]: one MCP request to the gateway $GW with the key $GW_KEY, in the stateless
# protocol revision (2026-07-28: no session to open); prints the JSON-RPC answer.
mcp() {
  local params=${2:-'{}'} name
  name=$(jq -r '.name // empty' <<<"$params")
  curl -s "$TG/gateway/$GW/mcp" -H "X-API-Key: $GW_KEY" \
    -H 'Content-Type: application/json' -H 'Accept: application/json' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H "Mcp-Method: $1" ${name:+-H "Mcp-Name: $name"} \
    -d "$(jq -c --arg method "$1" '{jsonrpc: "2.0", id: 1, method: $method, params: (. + {_meta: {
          "io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {}}})}' <<<"$params")"
}
