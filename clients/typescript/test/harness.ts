/**
 * A real MCP server built on the official TypeScript SDK (both protocol revisions on one URL: the
 * 2026-07-28 per-request handler, and sessionful streamable HTTP for 2025-11-25), an OAuth resource
 * server verifying the users' JWT access tokens, with tools backed by this package; and the SDK's
 * own client talking to it. The end-to-end tests get elicitd, the test OAuth server and a browser
 * from the Python test that runs them (tests/mcp/test_mcp_typescript.py), through the environment.
 */

import { randomUUID } from "node:crypto";
import { createServer, type Server as HttpServer } from "node:http";
import type { AddressInfo } from "node:net";

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { toWebRequest } from "@modelcontextprotocol/node";
import {
  McpServer,
  WebStandardStreamableHTTPServerTransport,
  createMcpHandler,
  isLegacyRequest,
  requireBearerAuth,
  type AuthInfo,
} from "@modelcontextprotocol/server";

import { JwtVerifier } from "../src/index.js";

export interface Environment {
  elicitdUrl: string;
  apiKey: string;
  issuer: string;
  provider: string;
  filesUrl: string;
  audience: string;
  browserUrl: string;
  webhookSecret: string;
}

/** The end-to-end environment, or undefined when these tests run on their own (they then skip). */
export function environment(): Environment | undefined {
  const e = process.env;
  const names = ["ELICITD_URL", "ELICITD_API_KEY", "TEST_ISSUER", "TEST_PROVIDER", "TEST_FILES_URL", "TEST_AUDIENCE", "TEST_BROWSER_URL", "TEST_WEBHOOK_SECRET"];
  if (!names.every((name) => e[name])) return undefined;
  return {
    elicitdUrl: e["ELICITD_URL"]!,
    apiKey: e["ELICITD_API_KEY"]!,
    issuer: e["TEST_ISSUER"]!,
    provider: e["TEST_PROVIDER"]!,
    filesUrl: e["TEST_FILES_URL"]!,
    audience: e["TEST_AUDIENCE"]!,
    browserUrl: e["TEST_BROWSER_URL"]!,
    webhookSecret: e["TEST_WEBHOOK_SECRET"]!,
  };
}

// ---- the users' access tokens --------------------------------------------------------------------------
/** A JWT access token for `sub`, minted by the test issuer for this MCP server's audience. */
export async function userToken(env: Environment, sub: string): Promise<string> {
  const response = await fetch(`${env.issuer}/__control/mint`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ sub, client_id: "example-mcp", audience: env.audience, format: "jwt" }),
  });
  const body = (await response.json()) as { access_token: string };
  return body.access_token;
}

/** The users' tokens as any server verifies them with this package: the issuer's JWKS, iss, aud, exp. */
function verifier(env: Environment): JwtVerifier {
  return new JwtVerifier(env.issuer, { audience: env.audience, jwksUrl: `${env.issuer}/jwks` });
}

// ---- the MCP server ------------------------------------------------------------------------------------
export interface Served {
  url: string;
  close: () => Promise<void>;
}

/** Serve `tools` (registered on every server instance) on both revisions; bearer tokens required. */
export async function serve(env: Environment, tools: (server: McpServer) => void): Promise<Served> {
  const factory = (): McpServer => {
    const server = new McpServer({ name: "elicitd-ts-example", version: "1.0.0" }, { capabilities: { tools: {} } });
    tools(server);
    return server;
  };
  const modern = createMcpHandler(factory, { legacy: "reject" });
  const sessions = new Map<string, WebStandardStreamableHTTPServerTransport>();
  const legacy = async (request: Request, authInfo: AuthInfo): Promise<Response> => {
    const id = request.headers.get("mcp-session-id");
    let transport = id ? sessions.get(id) : undefined;
    if (!transport) {
      const created: WebStandardStreamableHTTPServerTransport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (sessionId) => void sessions.set(sessionId, created),
      });
      await factory().connect(created);
      transport = created;
    }
    return transport.handleRequest(request, { authInfo });
  };
  const gate = requireBearerAuth({ verifier: verifier(env) });
  const http: HttpServer = createServer((req, res) => {
    void (async () => {
      const request = await toWebRequest(req as Parameters<typeof toWebRequest>[0]);
      const authInfo = await gate(request);
      let response: Response;
      if (authInfo instanceof Response) {
        response = authInfo;
      } else if (await isLegacyRequest(request)) {
        response = await legacy(request, authInfo);
      } else {
        response = await modern.fetch(request, { authInfo });
      }
      const headers: Record<string, string> = {};
      response.headers.forEach((value, name) => (headers[name] = value));
      res.writeHead(response.status, headers);
      if (response.body) for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) res.write(chunk);
      res.end();
    })().catch((error: unknown) => {
      res.writeHead(500);
      res.end(String(error));
    });
  });
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    close: async () => {
      await modern.close();
      for (const transport of sessions.values()) await transport.close();
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

// ---- the MCP client ------------------------------------------------------------------------------------
export type Mode = "2026-07-28" | "2025-11-25";
export type ElicitParams = Record<string, unknown> & { mode?: string; message: string };
export type ElicitAnswer = { action: "accept" | "decline" | "cancel"; content?: Record<string, string | number | boolean | string[]> };

export async function connect(
  url: string,
  token: string,
  mode: Mode,
  onElicit: (params: ElicitParams) => Promise<ElicitAnswer>,
  onNotification?: (method: string, params: Record<string, unknown>) => void,
): Promise<Client> {
  const client = new Client(
    { name: "elicitd-ts-tests", version: "1.0.0" },
    {
      capabilities: { elicitation: { form: {}, url: {} } },
      ...(mode === "2026-07-28" ? { versionNegotiation: { mode: { pin: "2026-07-28" } } } : {}),
    },
  );
  client.setRequestHandler("elicitation/create", async (request) => onElicit(request.params as ElicitParams));
  if (onNotification) {
    client.setNotificationHandler("notifications/elicitation/complete", async (notification) =>
      onNotification(notification.method, notification.params as Record<string, unknown>),
    );
  }
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  return client;
}

/** The person at the MCP client, in a real browser: opens the URL and logs in as `user`. */
export async function openInBrowser(env: Environment, url: string, user: string): Promise<void> {
  const response = await fetch(`${env.browserUrl}/open`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ url, user }),
  });
  if (!response.ok) throw new Error(`the browser could not open ${url}: ${response.status}`);
}

export function textOf(result: unknown): string {
  const content = (result as { content?: { type: string; text?: string }[] }).content ?? [];
  return content.map((block) => block.text ?? "").join("");
}
