"""A stdio MCP server whose tool descriptions are the hidden-text corpus
(`tests/fixtures/hidden_text/corpus.json`; the Rust integration test `security_hidden_text.rs`).

Built on the official Python SDK's `MCPServer`. For each honest text a tool `honest_<name>`
whose description is that text, for each hostile text a tool `hostile_<name>` whose description
is that text: a gateway under `description_policy: block` lists the honest tools with their
descriptions byte for byte and withholds every hostile one.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcp.server.mcpserver import MCPServer

CORPUS = json.loads(
    (Path(__file__).resolve().parent.parent / "fixtures" / "hidden_text" / "corpus.json").read_text(encoding="utf-8")
)

server = MCPServer("text-corpus")


def add_tool(name: str, text: str) -> None:
    def tool(query: str = "") -> str:
        return f"{name}: {query}"

    server.add_tool(tool, name=name, description=text)


for entry in CORPUS["honest"]:
    add_tool(f"honest_{entry['name']}", entry["text"])
for entry in CORPUS["hostile"]:
    add_tool(f"hostile_{entry['name']}", entry["text"])


if __name__ == "__main__":
    server.run("stdio")
