"""The admin MCP server: operators' reads and actions as MCP tools, under the admin roles (``elicitd admin mcp``)."""
