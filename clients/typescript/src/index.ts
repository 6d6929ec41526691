export * from "./auth.js";
export * from "./client.js";
export * from "./errors.js";
export * from "./events.js";
export * from "./forms.js";
export * from "./handlers.js";
export * from "./mcp.js";
export * from "./webhooks.js";
