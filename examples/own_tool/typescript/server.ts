/**
 * Your own MCP tool with elicitd, in TypeScript, against `make run` (docs/typescript.md, "Your own
 * tool in ten minutes"). `my_files` needs the user's Demo Files account: elicitd connects it in the
 * browser the first time, and answers its token at once afterwards. The users sign in at Dev ID,
 * which signs their access tokens (ES256); `JwtVerifier` checks them for this server's URL.
 */

import { createServer } from "node:http";

import { Elicitd, ElicitdClient, ElicitationDeclined, JwtVerifier } from "@elicitd/client";
import { toNodeHandler } from "@modelcontextprotocol/node";
import { McpServer, createMcpHandler, requireBearerAuth, type CallToolResult } from "@modelcontextprotocol/server";

const ELICITD_URL = process.env["ELICITD_URL"] ?? "http://127.0.0.1:8000";
const ISSUER = `${ELICITD_URL}/dev/id`; // Dev ID: who signs the users' access tokens under `make run`
const PORT = Number(process.env["PORT"] ?? "9000");
const RESOURCE = `http://127.0.0.1:${PORT}/mcp`; // this server: the `aud` of the tokens it accepts

const elicitd = new Elicitd(new ElicitdClient(ELICITD_URL, process.env["ELICITD_API_KEY"] ?? ""), {
  stateKey: process.env["MCP_STATE_KEY"] ?? "", // the same on every replica; refused when missing
});

const text = (value: string): CallToolResult => ({ content: [{ type: "text", text: value }] });

function myFiles(): McpServer {
  const server = new McpServer({ name: "my-files", version: "1.0.0" }, { capabilities: { tools: {} } });
  server.registerTool(
    "my_files",
    { description: "List the files in the user's Demo Files account." },
    elicitd.tool(server, async (ctx) => {
      try {
        const token = await elicitd.requireToken(ctx, { provider: "demo-files", scopes: ["files:read"] });
        const answer = await fetch(`${ELICITD_URL}/dev/files/api/files`, {
          headers: { Authorization: `${token.token_type} ${token.access_token}` },
        });
        const { files } = (await answer.json()) as { files: { name: string }[] };
        return text(`${files.length} files: ${files.map((file) => file.name).join(", ")}`);
      } catch (error) {
        if (error instanceof ElicitationDeclined) return text("You chose not to connect Demo Files.");
        throw error; // pending, failed, …: elicitd.tool turns it into a readable tool error
      }
    }),
  );
  return server;
}

// Every request needs a valid bearer token for this server; the tools see its user in ctx.http.authInfo.
const mcp = createMcpHandler(myFiles);
const verifier = new JwtVerifier(ISSUER, { audience: RESOURCE });
const gate = requireBearerAuth({ verifier, expectedResource: new URL(RESOURCE) });
const handler = toNodeHandler({
  fetch: async (request) => {
    const authInfo = await gate(request);
    return authInfo instanceof Response ? authInfo : mcp.fetch(request, { authInfo });
  },
});

createServer((req, res) => void handler(req, res)).listen(PORT, "127.0.0.1", () => {
  console.log(`my-files MCP server on ${RESOURCE}`);
});
