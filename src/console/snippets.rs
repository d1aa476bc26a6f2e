//! Client set-up for a gateway: the one source of every snippet that connects a client (the
//! console's gateway page, the page that shows a new gateway's key once, and README.md's
//! "Connect a client", which a unit test below checks block by block against [`render`]).
//!
//! Each snippet is what the client's own documentation asks for: Claude Code's
//! `claude mcp add --transport http`, Cursor's `mcp.json` (`mcpServers`), VS Code's `mcp.json`
//! (`servers`, each with `type: "http"`), Claude Desktop through the `mcp-remote` bridge, the MCP
//! Inspector's CLI, and the Python (2.x) and TypeScript SDKs, whose snippets tests run as shown
//! against a live gateway (tests/py/test_console_snippets.py).

use serde_json::json;

/// One client's set-up.
pub(crate) struct Snippet {
    /// Stable id: the HTML id of its `<code>` (`setup-<id>`) and README.md's marker
    /// (`<!-- client: <id> -->`).
    pub(crate) id: &'static str,
    /// The client, as a heading.
    pub(crate) title: &'static str,
    /// Where it goes, in a few words (HTML-free text).
    pub(crate) place: &'static str,
    /// The text to paste.
    pub(crate) text: String,
}

/// The name a client's configuration gives the gateway: its name in lower case, each run of
/// other characters than ASCII letters and digits one `-` (a JSON key and a shell word as is).
fn slug(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = out.trim_matches('-');
    if out.is_empty() {
        "toolgate".to_string()
    } else {
        out.to_string()
    }
}

/// `s` as a double-quoted string literal, valid in JSON, Python and JavaScript alike.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// A JSON document as the clients' documentation shows one: two-space indent.
fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// Every client's set-up for a gateway at `endpoint` named `name`, with `key` (the real key on
/// the page that shows it once, else a placeholder) in each.
pub(crate) fn render(endpoint: &str, name: &str, key: &str) -> Vec<Snippet> {
    let slug = slug(name);
    let header = format!("X-API-Key: {key}");
    let python = format!(
        "import asyncio\n\nimport httpx2\nfrom mcp.client import Client\nfrom mcp.client.streamable_http import streamable_http_client\n\n\n\
         async def main() -> None:\n    \
         async with httpx2.AsyncClient(headers={{\"X-API-Key\": {key}}}) as http:\n        \
         async with Client(streamable_http_client({endpoint}, http_client=http)) as client:\n            \
         tools = await client.list_tools()\n            \
         print(\"python sdk:\", [tool.name for tool in tools.tools])\n\n\nasyncio.run(main())\n",
        key = quoted(key),
        endpoint = quoted(endpoint),
    );
    let typescript = format!(
        "import {{ Client }} from \"@modelcontextprotocol/sdk/client/index.js\";\n\
         import {{ StreamableHTTPClientTransport }} from \"@modelcontextprotocol/sdk/client/streamableHttp.js\";\n\n\
         const transport = new StreamableHTTPClientTransport(new URL({endpoint}), {{\n  \
         requestInit: {{ headers: {{ \"X-API-Key\": {key} }} }},\n}});\n\
         const client = new Client({{ name: \"my-app\", version: \"1.0.0\" }});\n\
         await client.connect(transport);\n\
         const {{ tools }} = await client.listTools();\n\
         console.log(\"typescript sdk:\", tools.map((tool) => tool.name));\n\
         await client.close();\n",
        key = quoted(key),
        endpoint = quoted(endpoint),
    );
    vec![
        Snippet {
            id: "claude-code",
            title: "Claude Code",
            place: "in a terminal (--scope user before the name: for every project)",
            text: format!("claude mcp add --transport http {slug} {endpoint} --header \"{header}\""),
        },
        Snippet {
            id: "cursor",
            title: "Cursor",
            place: "~/.cursor/mcp.json, or .cursor/mcp.json in a project",
            text: pretty(&json!({ "mcpServers": { slug.clone(): { "url": endpoint, "headers": { "X-API-Key": key } } } })),
        },
        Snippet {
            id: "vscode",
            title: "VS Code",
            place: ".vscode/mcp.json (Copilot's agent mode)",
            text: pretty(&json!({
                "servers": { slug.clone(): { "type": "http", "url": endpoint, "headers": { "X-API-Key": key } } }
            })),
        },
        Snippet {
            id: "claude-desktop",
            title: "Claude Desktop",
            place: "claude_desktop_config.json (the mcp-remote bridge, on Node)",
            text: pretty(&json!({ "mcpServers": { slug.clone(): {
                "command": "npx",
                "args": ["-y", "mcp-remote", endpoint, "--header", format!("X-API-Key:{key}")]
            } } })),
        },
        Snippet {
            id: "inspector",
            title: "MCP Inspector",
            place: "in a terminal, on Node 22: lists the tools",
            text: format!(
                "npx @modelcontextprotocol/inspector --cli {endpoint} --transport http \\\n  --header \"{header}\" --method tools/list"
            ),
        },
        Snippet {
            id: "python",
            title: "Python SDK",
            place: "pip install \"mcp==2.3.0\", then python3 this file",
            text: python,
        },
        Snippet {
            id: "typescript",
            title: "TypeScript SDK",
            place: "npm install @modelcontextprotocol/sdk, then node this file as a .mjs",
            text: typescript,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The endpoint and key README.md's blocks are rendered with (the reader's placeholders).
    const README_ENDPOINT: &str = "http://localhost:8080/gateway/gw_.../mcp";
    /// See [`README_ENDPOINT`].
    const README_KEY: &str = "ag_...";
    /// The name README.md's blocks give the server in the client's configuration.
    const README_NAME: &str = "toolgate";

    /// README.md's fenced block after `<!-- client: <id> -->`, as the reader copies it.
    fn readme_block(readme: &str, id: &str) -> Option<String> {
        let marker = format!("<!-- client: {id} -->\n```");
        let at = readme.find(&marker)? + marker.len();
        let body = &readme[at..];
        let body = &body[body.find('\n')? + 1..];
        Some(body[..body.find("```")?].to_string())
    }

    /// README.md shows every client's set-up as the console renders it: one source, so a fix
    /// to a snippet reaches the README and the pages at once.
    #[test]
    fn the_readme_shows_each_client_set_up_as_the_console_renders_it() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
        let readme = std::fs::read_to_string(path).unwrap();
        for s in render(README_ENDPOINT, README_NAME, README_KEY) {
            let Some(block) = readme_block(&readme, s.id) else {
                panic!("README.md has no block after <!-- client: {} -->", s.id)
            };
            assert_eq!(block.trim_end(), s.text.trim_end(), "README.md's {} block", s.id);
        }
    }

    #[test]
    fn a_gateway_name_becomes_a_client_side_name() {
        assert_eq!(slug("My tools (prod)"), "my-tools-prod");
        assert_eq!(slug("  "), "toolgate");
        assert_eq!(slug("Émile"), "mile");
    }

    /// A key or endpoint with a quote stays one string in every language.
    #[test]
    fn values_are_quoted_not_pasted() {
        let all = render("http://h/\"x", "n", "k\"ey");
        let python = &all.iter().find(|s| s.id == "python").unwrap().text;
        assert!(python.contains(r#""k\"ey""#), "{python}");
        for s in all.iter().filter(|s| matches!(s.id, "cursor" | "vscode" | "claude-desktop")) {
            serde_json::from_str::<serde_json::Value>(&s.text).unwrap();
        }
    }
}
