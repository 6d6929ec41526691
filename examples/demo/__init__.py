"""``make demo``: an MCP host calls a tool that needs the user's Demo Files account (see host.py)."""
