/**
 * End to end: a real MCP server on the official TypeScript SDK using this package, the SDK's own
 * client on protocol revisions 2026-07-28 and 2025-11-25, a real elicitd, the test OAuth server
 * (the users' issuer and the provider) and Chromium doing what the person does in the browser.
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";

import type { McpServer } from "@modelcontextprotocol/server";

import { Elicitd, ElicitdClient, NotConnected, form, verifyEvent, type ElicitdEvent } from "../src/index.js";
import { connect, environment, openInBrowser, serve, textOf, userToken, type ElicitAnswer, type ElicitParams, type Mode } from "./harness.js";

const env = environment();
const MODES: Mode[] = ["2026-07-28", "2025-11-25"];
const FILES = "2 files: notes.txt, report.pdf";

const PLAN = form(
  {
    type: "object",
    properties: {
      tier: { type: "string", title: "Plan", oneOf: [{ const: "free", title: "Free" }, { const: "pro", title: "Pro" }] },
      seats: { type: "integer", title: "Seats", minimum: 1, maximum: 50, default: 1 },
      email: { type: "string", title: "Email", format: "email" },
      regions: { type: "array", title: "Regions", items: { type: "string", enum: ["eu", "us"] }, minItems: 1 },
    },
    required: ["tier", "email", "regions"],
  },
  { message: "Choose a plan." },
);

function tools(elicitd: Elicitd, environment: NonNullable<typeof env>) {
  return (server: McpServer): void => {
    server.registerTool(
      "list_files",
      { description: "List the user's files at the provider." },
      elicitd.tool(server, async (ctx) => {
        const token = await elicitd.requireToken(ctx, { provider: environment.provider, scopes: ["files:read"] });
        const answer = await fetch(environment.filesUrl, { headers: { Authorization: `${token.token_type} ${token.access_token}` } });
        const body = (await answer.json()) as { files: { name: string }[] };
        return { content: [{ type: "text", text: `${body.files.length} files: ${body.files.map((f) => f.name).join(", ")}` }] };
      }),
    );
    server.registerTool(
      "deploy",
      { description: "Deploy after the user approved it." },
      elicitd.tool(server, async (ctx) => {
        const consent = await elicitd.requireConsent(ctx, { title: "Deploy web to prod", description: "Replace the running version." });
        return { content: [{ type: "text", text: `deployed (${String(consent.result["receipt_id"])})` }] };
      }),
    );
    server.registerTool(
      "plan",
      { description: "Choose a plan (form mode)." },
      elicitd.tool(server, async (ctx) => {
        const answer = await elicitd.requireInput(ctx, PLAN);
        if (answer.action !== "accept") return { content: [{ type: "text", text: answer.action }] };
        const { tier, seats, email, regions } = answer.data;
        return { content: [{ type: "text", text: `${String(tier)}|${String(seats)}|${String(email)}|${(regions as string[]).join(",")}` }] };
      }),
    );
    server.registerTool(
      "leaky",
      { description: "Asks for a password in a form, which the helper refuses." },
      elicitd.tool(server, async (ctx) => {
        await elicitd.requireInput(ctx, { type: "object", properties: { password: { type: "string" } } });
        return { content: [{ type: "text", text: "asked" }] };
      }),
    );
  };
}

describe("with elicitd, the test OAuth server and a browser", { skip: env === undefined && "run through tests/mcp/test_mcp_typescript.py" }, () => {
  const e = env!;
  const api = new ElicitdClient(e?.elicitdUrl ?? "http://127.0.0.1:1", e?.apiKey ?? "none");
  const elicitd = new Elicitd(api, { stateKey: "shared-by-every-replica-of-this-server", waitSeconds: 5 });
  const erroring = new Elicitd(api, { stateKey: "another-server-and-another-state-key", legacy: "error" });
  const servers: { url: string; close: () => Promise<void> }[] = [];
  let url = "";
  let errorUrl = "";

  before(async () => {
    servers.push(await serve(e, tools(elicitd, e)), await serve(e, tools(erroring, e)));
    url = servers[0]!.url;
    errorUrl = servers[1]!.url;
  });
  after(async () => {
    await elicitd.close();
    await erroring.close();
    for (const served of servers) await served.close();
  });

  for (const mode of MODES) {
    test(`requireToken connects the account through the browser, then needs nobody (${mode})`, async () => {
      const user = `ts${randomUUID().slice(0, 8)}`;
      const seen: string[] = [];
      const client = await connect(url, await userToken(e, user), mode, async (params) => {
        seen.push(String(params["url"]));
        await openInBrowser(e, String(params["url"]), user);
        return { action: "accept" };
      });
      try {
        assert.equal(textOf(await client.callTool({ name: "list_files", arguments: {} })), FILES);
        assert.equal(seen.length, 1);
        assert.ok(seen[0]!.startsWith(`${e.elicitdUrl}/f/fl_`), seen[0]);
        assert.equal(textOf(await client.callTool({ name: "list_files", arguments: {} })), FILES);
        assert.equal(seen.length, 1); // connected: nobody asked again
      } finally {
        await client.close();
      }
      // The same connection through the API client and through RFC 8693 token exchange.
      const proof = await userToken(e, user);
      const token = await api.token(e.provider, { iss: e.issuer, sub: user }, { scopes: ["files:read"], subjectToken: proof });
      assert.equal(token.account_id, `acct-${user}`);
      const exchanged = await api.exchangeToken({ subjectToken: proof, audience: e.provider, scope: ["files:read"] });
      assert.equal(exchanged.access_token, token.access_token);
      assert.equal(exchanged.issued_token_type, "urn:ietf:params:oauth:token-type:access_token");
    });
  }

  test("requireToken reconnects by itself when the provider dropped the grant (2026-07-28)", async () => {
    const control = async (path: string, body: unknown) => {
      const response = await fetch(`${e.issuer}/__control/${path}`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
      assert.ok(response.ok, path);
    };
    const user = `ts${randomUUID().slice(0, 8)}`;
    const seen: string[] = [];
    // Tokens of 30 s are due at once (the token endpoint refreshes within 60 s of expiry).
    await control("config", { access_token_ttl: 30 });
    const client = await connect(url, await userToken(e, user), "2026-07-28", async (params) => {
      seen.push(String(params["url"]));
      await openInBrowser(e, String(params["url"]), user);
      return { action: "accept" };
    });
    try {
      assert.equal(textOf(await client.callTool({ name: "list_files", arguments: {} })), FILES);
      const proof = await userToken(e, user);
      const before = await api.token(e.provider, { iss: e.issuer, sub: user }, { scopes: ["files:read"], subjectToken: proof });
      await control("fail-next-refresh", { error: "invalid_grant" });
      // The next token call refreshes, the provider refuses: 409 reauthorization_required, and the
      // helper starts the reconnect instead of failing the call.
      assert.equal(textOf(await client.callTool({ name: "list_files", arguments: {} })), FILES);
      assert.equal(seen.length, 2);
      const after = await api.token(e.provider, { iss: e.issuer, sub: user }, { scopes: ["files:read"], subjectToken: proof });
      assert.equal(after.connection_id, before.connection_id);
    } finally {
      await client.close();
      await control("config", { access_token_ttl: 3600 });
    }
  });

  test("2025-11-25 with -32042: the event stream's completion becomes notifications/elicitation/complete", async () => {
    const user = `ts${randomUUID().slice(0, 8)}`;
    const completed: string[] = [];
    let arrived: () => void = () => undefined;
    const notified = new Promise<void>((resolve) => (arrived = resolve));
    const client = await connect(
      errorUrl,
      await userToken(e, user),
      "2025-11-25",
      async () => assert.fail("nothing is pushed with legacy: 'error'"),
      (_method, params) => {
        completed.push(String(params["elicitationId"]));
        arrived();
      },
    );
    try {
      const refused = await client.callTool({ name: "list_files", arguments: {} }).then(
        () => assert.fail("expected -32042"),
        (error: unknown) => error as { code: number; data?: { elicitations?: { url: string; elicitationId: string }[] } },
      );
      assert.equal(refused.code, -32042);
      const elicitation = refused.data!.elicitations![0]!;
      await openInBrowser(e, elicitation.url, user);
      await notified;
      assert.deepEqual(completed, [elicitation.elicitationId]);
      assert.equal(textOf(await client.callTool({ name: "list_files", arguments: {} })), FILES);
    } finally {
      await client.close();
    }
  });

  for (const mode of MODES) {
    test(`requireConsent: a decline is a normal tool result (${mode})`, async () => {
      const client = await connect(url, await userToken(e, `ts${randomUUID().slice(0, 8)}`), mode, async () => ({ action: "decline" }));
      try {
        const result = await client.callTool({ name: "deploy", arguments: {} });
        assert.equal(result.isError, true);
        assert.equal(textOf(result), "The user did not approve this action.");
      } finally {
        await client.close();
      }
    });

    test(`requireInput checks the answer and asks again with the reasons (${mode})`, async () => {
      const asked: ElicitParams[] = [];
      // On 2025-11-25 the SDK's client checks an answer against the schema itself before sending it,
      // so only the 2026-07-28 client can deliver an invalid one for the server to refuse.
      const invalid: ElicitAnswer[] = mode === "2026-07-28" ? [{ action: "accept", content: { tier: "gold", email: "nobody", regions: [] } }] : [];
      const answers: ElicitAnswer[] = [...invalid, { action: "accept", content: { tier: "pro", email: "ada@example.com", regions: ["eu", "us"] } }];
      const client = await connect(url, await userToken(e, `ts${randomUUID().slice(0, 8)}`), mode, async (params) => {
        asked.push(params);
        return answers.shift()!;
      });
      try {
        assert.equal(textOf(await client.callTool({ name: "plan", arguments: {} })), "pro|1|ada@example.com|eu,us");
        const retry = "Choose a plan.\n\nPlease correct your answer: Plan must be one of the offered choices; Email must be an email address; Regions needs at least 1 choices.";
        assert.deepEqual(
          asked.map((p) => p.message),
          mode === "2026-07-28" ? ["Choose a plan.", retry] : ["Choose a plan."],
        );
        assert.equal((asked[0]!["requestedSchema"] as { properties: Record<string, unknown> }).properties["seats"] !== undefined, true);
        const leaky = await client.callTool({ name: "leaky", arguments: {} });
        assert.equal(leaky.isError, true);
        assert.match(textOf(leaky), /Field 'password' looks like a password\..*requireApiKey/);
        assert.equal(asked.length, mode === "2026-07-28" ? 2 : 1);
      } finally {
        await client.close();
      }
    });
  }

  test("the event stream: every event once, signed like webhooks, resumable by Last-Event-ID", async () => {
    const subject = { iss: e.issuer, sub: `ts${randomUUID().slice(0, 8)}` };
    const subjectToken = await userToken(e, subject.sub);
    const got: ElicitdEvent[] = [];
    const abort = new AbortController();
    let connected: () => void = () => undefined;
    const open = new Promise<void>((resolve) => (connected = resolve));
    const stream = api.events({ onConnected: () => connected(), signal: abort.signal });
    const reading = (async () => {
      for await (const event of stream) got.push(event);
    })();
    const flows: string[] = [];
    try {
      await open;
      for (const step of ["one", "two"]) {
        const created = await api.createFlow(subject, "external", { url: `https://app.example.com/${step}/${randomUUID()}`, subjectToken });
        await api.complete(created.flow.id, { step });
        flows.push(created.flow.id);
      }
      while (got.filter((event) => flows.includes(String(event.data["flow_id"]))).length < 2) await new Promise((r) => setTimeout(r, 20));
    } finally {
      abort.abort();
      await reading;
    }
    const mine = got.filter((event) => flows.includes(String(event.data["flow_id"])));
    assert.deepEqual(mine.map((event) => event.type), ["flow.completed", "flow.completed"]);
    assert.equal(verifyEvent(e.webhookSecret, mine[0]!.body, mine[0]!.headers)["id"], mine[0]!.id);
    // Resuming after the first of them gives exactly the second (and whatever came after it).
    const resumed: ElicitdEvent[] = [];
    const again = new AbortController();
    for await (const event of api.events({ lastEventId: mine[0]!.seq, signal: again.signal })) {
      resumed.push(event);
      if (event.seq >= mine[1]!.seq) again.abort();
    }
    assert.equal(resumed[0]!.seq, mine[0]!.seq + 1);
    assert.equal(resumed.at(-1)!.data["flow_id"], flows[1]);
  });

  test("API errors are typed", async () => {
    const subjectToken = await userToken(e, "nevermind");
    await assert.rejects(api.token(e.provider, { iss: e.issuer, sub: "nevermind" }, { subjectToken }), (error: unknown) => {
      assert.ok(error instanceof NotConnected);
      assert.equal(error.code, "not_connected");
      assert.equal(error.status, 404);
      return true;
    });
  });
});
