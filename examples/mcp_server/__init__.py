"""An MCP server whose tools use elicitd: a third-party API call with the user's token, a deploy
that asks consent first, and a paid report. See ``examples/mcp_server/README.md``."""
