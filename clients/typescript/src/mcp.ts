/**
 * elicitd inside a tool of the official MCP TypeScript SDK (`@modelcontextprotocol/server`): one
 * awaited call gives the tool the user's token, consent or form answer, on protocol revisions
 * 2026-07-28 (input-required rounds) and 2025-11-25 (push-style elicitation).
 *
 *     const elicitd = new Elicitd(new ElicitdClient(url, apiKey), { stateKey: process.env.MCP_STATE_KEY! });
 *     server.registerTool("list_repos", { description: "…" }, elicitd.tool(server, async (ctx) => {
 *         const token = await elicitd.requireToken(ctx, { provider: "github", scopes: ["repo"] });
 *         …
 *     }));
 *
 * The same rules as the Python helper (`elicitd_client.mcp`):
 *
 * - the subject is the verified user of the request (`ctx.http.authInfo`, see `subjectFromAuth`);
 * - 2026-07-28: the client must declare URL elicitation on this very request (else `-32021`).
 *   Round 1 creates or reuses the flow and answers elicitd's ready `InputRequiredResult`; each
 *   retry resolves the client's answer through elicitd, which waits up to `waitSeconds`. A call
 *   spends at most `budgetSeconds` and `maxRounds` rounds; then `ElicitationPending`;
 * - 2025-11-25: the helper sends `elicitation/create` (URL mode) mid-call and waits within the same
 *   budget, or raises `-32042`; `notifications/elicitation/complete` is sent when elicitd's event
 *   stream reports the flow finished — one consumer per process, so whichever replica holds the
 *   session tells it;
 * - `requestState` carries elicitd's sealed states inside an envelope this helper signs (HMAC with
 *   `stateKey`, shared by replicas) and binds to the subject and the tool's arguments, so a consent
 *   approved for one set of arguments cannot complete a call with others.
 */

import { AsyncLocalStorage } from "node:async_hooks";
import { createHash, createHmac, timingSafeEqual } from "node:crypto";

import type { ElicitdClient, Flow, InputRequiredWire, Resolution, Subject, Token } from "./client.js";
import { ElicitdError, ElicitdUnavailable, InvalidRequestState, RateLimited, ReauthorizationRequired } from "./errors.js";
import { type Form, type FormSchema, type InputResult, type Json, asking, form as buildForm, read } from "./forms.js";

// The SDK is a peer dependency: only types are imported at compile time, and the error classes are
// loaded when the helper is first used in a server.
import type { CallToolResult, InputRequiredResult, McpServer, ServerContext } from "@modelcontextprotocol/server";

const STATE_PREFIX = "elicitd1";
const KEY_PREFIX = "elicitd_";
const FORM_KEY_PREFIX = "elicitd_form_";
const MODERN = new Set(["2026-07-28"]);
const PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion";
const CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities";

// ---- outcomes ------------------------------------------------------------------------------------------
/** The elicitation ended without the value the tool asked for (a readable tool error when uncaught). */
export class ElicitationOutcome extends Error {
  readonly outcome: string = "unknown";
  constructor(
    message: string,
    readonly flow?: Flow,
  ) {
    super(message);
    this.name = new.target.name;
  }
}
export class ElicitationDeclined extends ElicitationOutcome {
  override readonly outcome = "declined";
}
export class ElicitationCancelled extends ElicitationOutcome {
  override readonly outcome = "cancelled";
}
export class ElicitationPending extends ElicitationOutcome {
  override readonly outcome = "pending";
}
export class ElicitationFailed extends ElicitationOutcome {
  override readonly outcome = "failed";
  constructor(
    message: string,
    readonly code: string,
    flow?: Flow,
  ) {
    super(message, flow);
  }
}
/** elicitd could not take the request, so nobody was asked; `code` is elicitd's. */
export class ElicitdRefused extends ElicitationOutcome {
  override readonly outcome = "refused";
  constructor(
    message: string,
    readonly code: string,
    readonly status = 0,
  ) {
    super(message);
  }
}
/** A form's answer kept failing its checks for as many tries as the tool allowed. */
export class InvalidInput extends ElicitationOutcome {
  override readonly outcome = "invalid";
  constructor(
    message: string,
    readonly reasons: string[],
  ) {
    super(message);
  }
}
/** Carries a ready `InputRequiredResult` out of the tool body to `elicitd.tool`'s wrapper. */
export class InputRequired extends Error {
  constructor(readonly result: InputRequiredResult) {
    super("elicitd needs client input: wrap the tool with elicitd.tool(server, handler)");
  }
}

export interface Completed {
  kind: string;
  result: Record<string, unknown>;
  flow?: Flow;
}

// ---- the request-state envelope ------------------------------------------------------------------------
interface Round {
  t: number;
  n: number;
  s: Record<string, [string, string]>;
}

const b64url = (data: string | Buffer): string => Buffer.from(data).toString("base64url");

interface Call {
  server: McpServer;
  binding: string;
  overlay?: { key: string; round: Round };
}

export interface ElicitdOptions {
  waitSeconds?: number;
  budgetSeconds?: number;
  maxRounds?: number;
  legacy?: "push" | "error";
  /**
   * Signs the request-state envelope: at least 32 bytes, the same on every replica of one MCP
   * server (a round started on one replica is retried on another). Required: a key made up per
   * process would break every retry that reaches another replica, and only then.
   */
  stateKey: string | Uint8Array;
  /** The verified user of a request; by default from `ctx.http.authInfo` (`subjectFromAuth`). */
  subject?: (ctx: ServerContext) => Subject;
  /** Consume elicitd's event stream for 2025-11-25 completion notifications (default true). */
  events?: boolean;
}

/** The subject from the SDK's `authInfo`: `extra.iss` (or `extra.issuer`) and `extra.sub`. */
export function subjectFromAuth(ctx: ServerContext): Subject {
  const extra = (ctx.http?.authInfo?.extra ?? {}) as Record<string, unknown>;
  const iss = extra["iss"] ?? extra["issuer"];
  const sub = extra["sub"] ?? extra["subject"];
  if (typeof iss !== "string" || !iss || typeof sub !== "string" || !sub) {
    throw new Error("elicitd needs the verified user: put the token's iss and sub in authInfo.extra");
  }
  return { iss, sub };
}

interface Need {
  kind: string;
  create: Record<string, unknown>;
  tag: string;
}

function need(kind: string, create: Record<string, unknown>): Need {
  const cleaned: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(create)) {
    if (value !== undefined && value !== null && !(Array.isArray(value) && value.length === 0)) cleaned[key] = value;
  }
  const tag = createHash("sha256").update(JSON.stringify([kind, cleaned])).digest("hex").slice(0, 16);
  return { kind, create: cleaned, tag };
}

const MIN_STATE_KEY_BYTES = 32;

function stateKeyOf(given: string | Uint8Array | undefined): Buffer {
  const key = given === undefined || given === null ? Buffer.alloc(0) : Buffer.from(given);
  if (key.length < MIN_STATE_KEY_BYTES) {
    throw new Error(
      `new Elicitd(client, { stateKey }): stateKey is ${key.length === 0 ? "missing" : `${key.length} bytes`}; give at least ` +
        `${MIN_STATE_KEY_BYTES} bytes, the same on every replica (for instance process.env.MCP_STATE_KEY, made once with ` +
        "`openssl rand -hex 32`)",
    );
  }
  return key;
}

type Sdk = typeof import("@modelcontextprotocol/server");
let sdk: Promise<Sdk> | undefined;
const loadSdk = (): Promise<Sdk> => (sdk ??= import("@modelcontextprotocol/server"));

export class Elicitd {
  readonly client: ElicitdClient;
  readonly waitSeconds: number;
  readonly budgetSeconds: number;
  readonly maxRounds: number;
  readonly legacy: "push" | "error";
  readonly events: boolean;
  /** How long a 2025-11-25 session is remembered for its completion notification. */
  notifyTtlMs = 3_600_000;
  private readonly stateKey: Buffer;
  private readonly subjectOf: (ctx: ServerContext) => Subject;
  private readonly calls = new AsyncLocalStorage<Call>();
  private readonly sessions = new Map<string, { at: number; notify: () => Promise<void> }[]>();
  private eventsTask: Promise<void> | undefined;
  private eventsReady: Promise<void> | undefined;
  private eventsAbort: AbortController | undefined;

  constructor(client: ElicitdClient, options: ElicitdOptions) {
    this.client = client;
    this.waitSeconds = options.waitSeconds ?? 15;
    this.budgetSeconds = options.budgetSeconds ?? 50;
    this.maxRounds = options.maxRounds ?? 10;
    this.legacy = options.legacy ?? "push";
    this.events = options.events ?? true;
    this.stateKey = stateKeyOf(options?.stateKey);
    this.subjectOf = options.subject ?? subjectFromAuth;
  }

  // ---- wiring ----------------------------------------------------------------------------------------
  /**
   * Wrap a tool handler of `server`: the helpers' `input_required` answers become the tool's
   * result, and an uncaught outcome (declined, pending, …) a readable `isError` result.
   * Works for `(ctx) => …` and `(args, ctx) => …` handlers alike.
   */
  tool(
    server: McpServer,
    handler: (ctx: ServerContext) => Promise<CallToolResult>,
  ): (ctx: ServerContext) => Promise<CallToolResult | InputRequiredResult>;
  tool<Args>(
    server: McpServer,
    handler: (args: Args, ctx: ServerContext) => Promise<CallToolResult>,
  ): (args: Args, ctx: ServerContext) => Promise<CallToolResult | InputRequiredResult>;
  tool(
    server: McpServer,
    handler: (...args: never[]) => Promise<CallToolResult>,
  ): (...args: never[]) => Promise<CallToolResult | InputRequiredResult> {
    return async (...args: never[]): Promise<CallToolResult | InputRequiredResult> => {
      const binding = createHash("sha256").update(JSON.stringify(args.length > 1 ? args[0] : null) ?? "").digest("hex");
      try {
        return await this.calls.run({ server, binding }, () => handler(...args));
      } catch (error) {
        if (error instanceof InputRequired) return error.result;
        if (error instanceof ElicitationOutcome) return { isError: true, content: [{ type: "text", text: error.message }] };
        throw error;
      }
    };
  }

  private call(): Call {
    const call = this.calls.getStore();
    if (call === undefined) throw new Error("elicitd helpers run inside a tool wrapped with elicitd.tool(server, handler)");
    return call;
  }

  // ---- the helpers -------------------------------------------------------------------------------------
  /** The user's access token for `provider` covering `scopes`; connects first when needed. */
  async requireToken(
    ctx: ServerContext,
    options: { provider: string; scopes?: string[]; message?: string; account?: string; kind?: "oauth_connect" | "api_key" },
  ): Promise<Token> {
    const scopes = [...new Set(options.scopes ?? [])].sort();
    const wanted = need(options.kind ?? "oauth_connect", {
      provider: options.provider,
      scopes,
      message: options.message,
      account: options.account,
    });
    await this.obtain(ctx, wanted);
    const tokenOptions: { scopes: string[]; account?: string; subjectToken?: string } = { scopes };
    if (options.account !== undefined) tokenOptions.account = options.account;
    const proof = ctx.http?.authInfo?.token;
    if (proof) tokenOptions.subjectToken = proof;
    const ask = () => this.client.token(options.provider, this.subjectOf(ctx), tokenOptions);
    // The provider may have dropped the grant since it was last checked: then the same oauth_connect
    // flow again, which elicitd makes a reconnect of that very connection, and the token once more.
    const reconnecting = wanted.kind === "oauth_connect";
    const first = await this.readable(wanted, () =>
      ask().catch((error: unknown) => {
        if (reconnecting && error instanceof ReauthorizationRequired) return undefined;
        throw error;
      }),
    );
    if (first !== undefined) return first;
    await this.obtain(ctx, wanted);
    return this.readable(wanted, ask);
  }

  /** The API key the user typed for `provider` on elicitd's page (URL mode). */
  requireApiKey(ctx: ServerContext, options: { provider: string; message?: string; account?: string }): Promise<Token> {
    return this.requireToken(ctx, { ...options, kind: "api_key" });
  }

  /** The user's approval of exactly `description`; `result.receipt` is the signed receipt. */
  requireConsent(
    ctx: ServerContext,
    options: { title: string; description: string; details?: Record<string, string>; message?: string },
  ): Promise<Completed> {
    const params: Record<string, unknown> = { title: options.title, description: options.description };
    if (options.details) params["details"] = options.details;
    return this.obtain(ctx, need("consent", { params, message: options.message }));
  }

  /** Any kind, with `ElicitdClient.createFlow`'s options (e.g. `external` + `url`). */
  require(ctx: ServerContext, kind: string, create: Record<string, unknown> = {}): Promise<Completed> {
    return this.obtain(ctx, need(kind, create));
  }

  /**
   * Ask the user to fill in a form (form mode) and return the checked answer: `{action: "accept",
   * data}`, `{action: "decline"}` or `{action: "cancel"}`. `source` is a `form(...)` built at module
   * level (refused there when outside the specification's subset or secret-looking) or a plain
   * schema. An answer that fails the checks is asked again with the reasons, up to `maxAttempts`.
   */
  async requireInput<T = Record<string, Json>>(
    ctx: ServerContext,
    source: Form<T> | FormSchema,
    options: { message?: string; maxAttempts?: number } = {},
  ): Promise<InputResult<T>> {
    let asked: Form<T>;
    try {
      asked = "tag" in source ? source : (buildForm(source) as unknown as Form<T>);
    } catch (error) {
      throw new ElicitdRefused(error instanceof Error ? error.message : String(error), "invalid_form");
    }
    if (options.message !== undefined) asked = { ...asked, message: options.message };
    const maxAttempts = options.maxAttempts ?? 3;
    const caps = await this.capabilities(ctx);
    const elicitation = caps?.["elicitation"] as Record<string, unknown> | undefined;
    if (elicitation === undefined || (elicitation["form"] === undefined && elicitation["url"] !== undefined)) {
      await this.missingCapability("form");
    }
    if (this.modern(ctx)) return this.formRound(ctx, asked, maxAttempts);
    return this.formPush(ctx, asked, maxAttempts);
  }

  // ---- one requirement ---------------------------------------------------------------------------------
  private modern(ctx: ServerContext): boolean {
    const version = ctx.mcpReq.envelope?.[PROTOCOL_VERSION as keyof typeof ctx.mcpReq.envelope];
    return typeof version === "string" && MODERN.has(version);
  }

  private async capabilities(ctx: ServerContext): Promise<Record<string, unknown> | undefined> {
    if (this.modern(ctx)) {
      return ctx.mcpReq.envelope?.[CLIENT_CAPABILITIES as keyof typeof ctx.mcpReq.envelope] as Record<string, unknown> | undefined;
    }
    return this.call().server.server.getClientCapabilities() as Record<string, unknown> | undefined;
  }

  private async missingCapability(mode: "url" | "form"): Promise<never> {
    const { MissingRequiredClientCapabilityError } = await loadSdk();
    throw new MissingRequiredClientCapabilityError(
      { requiredCapabilities: { elicitation: { [mode]: {} } } },
      `This tool needs a client that supports ${mode === "url" ? "URL" : "form"} elicitation`,
    );
  }

  private async obtain(ctx: ServerContext, wanted: Need): Promise<Completed> {
    const subject = this.subjectOf(ctx);
    const caps = await this.capabilities(ctx);
    const elicitation = caps?.["elicitation"] as Record<string, unknown> | undefined;
    if (elicitation?.["url"] === undefined) await this.missingCapability("url");
    return this.readable(wanted, () => (this.modern(ctx) ? this.round(ctx, wanted, subject) : this.push(ctx, wanted, subject)));
  }

  private async readable<T>(wanted: Need, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (error) {
      if (!(error instanceof ElicitdError)) throw error;
      let text = `Could not ask for the ${noun(wanted)}: ${error.message.replace(/\.$/, "")} [${error.code}].`;
      if (error instanceof ElicitdUnavailable) {
        text = `elicitd is not reachable now, so the ${noun(wanted)} cannot be asked for; try again soon [${error.code}].`;
      } else if (error instanceof RateLimited && error.retryAfter !== undefined) {
        text = `Too many requests for the ${noun(wanted)}; try again in ${error.retryAfter} s [${error.code}].`;
      }
      throw new ElicitdRefused(text, error.code, error.status);
    }
  }

  private create(ctx: ServerContext, wanted: Need, subject: Subject): ReturnType<ElicitdClient["createFlow"]> {
    const options: Record<string, unknown> = { ...wanted.create };
    const proof = ctx.http?.authInfo?.token;
    if (proof) options["subjectToken"] = proof;
    return this.client.createFlow(subject, wanted.kind, options);
  }

  // ---- 2026-07-28 ------------------------------------------------------------------------------------
  private currentRound(ctx: ServerContext): Round {
    const call = this.call();
    const raw = ctx.mcpReq.requestState();
    const key = `${String(ctx.mcpReq.id)}|${typeof raw === "string" ? raw : ""}`;
    if (call.overlay?.key === key) return call.overlay.round;
    return (typeof raw === "string" ? this.open(raw, call.binding, this.subjectKey(ctx)) : undefined) ?? { t: Date.now() / 1000, n: 0, s: {} };
  }

  private subjectKey(ctx: ServerContext): string {
    try {
      const subject = this.subjectOf(ctx);
      return `${subject.iss}\u001f${subject.sub}`;
    } catch {
      return "";
    }
  }

  private seal(round: Round, binding: string, subject: string): string {
    const body = b64url(JSON.stringify(round));
    const mac = createHmac("sha256", this.stateKey).update(`${body}|${binding}|${subject}`).digest("base64url");
    return `${STATE_PREFIX}.${body}.${mac}`;
  }

  private open(value: string, binding: string, subject: string): Round | undefined {
    const [prefix, body, mac] = value.split(".");
    if (prefix !== STATE_PREFIX || !body || !mac) return undefined;
    const expected = createHmac("sha256", this.stateKey).update(`${body}|${binding}|${subject}`).digest();
    const given = Buffer.from(mac, "base64url");
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
    try {
      return JSON.parse(Buffer.from(body, "base64url").toString()) as Round;
    } catch {
      return undefined;
    }
  }

  private inputRequired(ctx: ServerContext, wire: InputRequiredWire, current: Round, tag: string, entry: [string, string]): InputRequired {
    const round: Round = { t: current.t, n: current.n + 1, s: { ...current.s, [tag]: entry } };
    const result: InputRequiredResult = { resultType: "input_required", requestState: this.seal(round, this.call().binding, this.subjectKey(ctx)) };
    if (wire.inputRequests) result.inputRequests = wire.inputRequests as unknown as NonNullable<InputRequiredResult["inputRequests"]>;
    return new InputRequired(result);
  }

  private async round(ctx: ServerContext, wanted: Need, subject: Subject): Promise<Completed> {
    const current = this.currentRound(ctx);
    const mine = current.s[wanted.tag];
    if (mine === undefined) return this.firstRound(ctx, wanted, await this.create(ctx, wanted, subject), current);
    const [flowId, state] = mine;
    const remaining = this.budgetSeconds - (Date.now() / 1000 - current.t);
    const key = KEY_PREFIX + flowId;
    const responses: Record<string, Record<string, unknown>> = {};
    const answer = ctx.mcpReq.inputResponses?.[key] as Record<string, unknown> | undefined;
    if (answer) responses[key] = pick(answer);
    let resolution: Resolution;
    try {
      const wait = Math.max(0, Math.min(this.waitSeconds, remaining));
      resolution = await this.client.resolve(subject, state, responses, wait, ctx.http?.authInfo?.token);
    } catch (error) {
      if (error instanceof InvalidRequestState) return this.firstRound(ctx, wanted, await this.create(ctx, wanted, subject), current);
      throw error;
    }
    checkFlow(wanted, resolution.flow);
    if (resolution.outcome === "input_required" && resolution.mcp) {
      if (current.n + 1 > this.maxRounds || Date.now() / 1000 - current.t >= this.budgetSeconds) {
        throw new ElicitationPending("Still waiting for you to finish in the browser. Call the tool again once you are done.", resolution.flow);
      }
      throw this.inputRequired(ctx, resolution.mcp, current, wanted.tag, [resolution.flow.id, String(resolution.mcp.requestState)]);
    }
    if (resolution.outcome === "expired") return this.firstRound(ctx, wanted, await this.create(ctx, wanted, subject), current);
    return finished(wanted, resolution);
  }

  private firstRound(ctx: ServerContext, wanted: Need, created: Awaited<ReturnType<ElicitdClient["createFlow"]>>, current: Round): Completed {
    if (created.status === "completed") return { kind: wanted.kind, result: created.result ?? {}, flow: created.flow };
    if (!created.mcp || current.n + 1 > this.maxRounds) {
      throw new ElicitationPending("Finish the step in your browser, then call the tool again.", created.flow);
    }
    throw this.inputRequired(ctx, created.mcp, current, wanted.tag, [created.flow.id, String(created.mcp.requestState)]);
  }

  // ---- 2025-11-25 ------------------------------------------------------------------------------------
  private async push(ctx: ServerContext, wanted: Need, subject: Subject): Promise<Completed> {
    const created = await this.create(ctx, wanted, subject);
    if (created.status === "completed") return { kind: wanted.kind, result: created.result ?? {}, flow: created.flow };
    const flowId = created.flow.id;
    const message = String(created.legacy?.elicitation["message"] ?? "");
    const params = { mode: "url" as const, message, url: created.flow.url, elicitationId: flowId };
    this.remember(flowId, this.call().server);
    await this.startEvents();
    const { UrlElicitationRequiredError } = await loadSdk();
    if (this.legacy === "error" || !created.mcp?.requestState) throw new UrlElicitationRequiredError([params]);
    const answer = await ctx.mcpReq.elicitInput(params);
    const started = Date.now() / 1000;
    let state = created.mcp.requestState;
    let responses: Record<string, Record<string, unknown>> = { [KEY_PREFIX + flowId]: { action: answer.action } };
    for (;;) {
      const remaining = this.budgetSeconds - (Date.now() / 1000 - started);
      const wait = Math.max(0, Math.min(this.waitSeconds, remaining));
      const resolution = await this.client.resolve(subject, state, responses, wait, ctx.http?.authInfo?.token);
      responses = {};
      if (resolution.outcome !== "input_required" || !resolution.mcp) return finished(wanted, resolution);
      const stateOnly = !resolution.mcp.inputRequests || Object.keys(resolution.mcp.inputRequests).length === 0;
      if (Date.now() / 1000 - started >= this.budgetSeconds || !stateOnly) throw new UrlElicitationRequiredError([params]);
      state = String(resolution.mcp.requestState);
    }
  }

  // ---- forms -----------------------------------------------------------------------------------------
  private formRound<T>(ctx: ServerContext, asked: Form<T>, maxAttempts: number): InputResult<T> {
    const current = this.currentRound(ctx);
    const tag = `form.${asked.tag}`;
    const mine = current.s[tag];
    if (mine?.[0] === "=") return outcome(asked, JSON.parse(mine[1]) as Record<string, unknown>);
    let attempt = mine ? Number(mine[1]) : 0;
    let reasons: string[] = [];
    if (attempt) {
      const answer = ctx.mcpReq.inputResponses?.[`${FORM_KEY_PREFIX}${asked.tag}_${attempt}`] as Record<string, unknown> | undefined;
      if (answer) {
        if (answer["action"] === "accept") reasons = read(asked, answer["content"]).reasons;
        if (answer["action"] === "decline" || answer["action"] === "cancel" || reasons.length === 0) {
          const settled = pick(answer);
          const call = this.call();
          const raw = ctx.mcpReq.requestState();
          call.overlay = {
            key: `${String(ctx.mcpReq.id)}|${typeof raw === "string" ? raw : ""}`,
            round: { ...current, s: { ...current.s, [tag]: ["=", JSON.stringify(settled)] } },
          };
          return outcome(asked, settled);
        }
        if (attempt >= maxAttempts) {
          throw new InvalidInput(`The answer did not fit the form after ${attempt} tries: ${reasons.join("; ")}.`, reasons);
        }
      } else {
        attempt -= 1; // not answered: ask the same again
      }
    }
    const number = attempt + 1;
    const wire: InputRequiredWire = {
      resultType: "input_required",
      inputRequests: {
        [`${FORM_KEY_PREFIX}${asked.tag}_${number}`]: {
          method: "elicitation/create",
          params: { mode: "form", message: asking(asked, reasons), requestedSchema: asked.schema },
        },
      },
    };
    throw this.inputRequired(ctx, wire, current, tag, ["form", String(number)]);
  }

  private async formPush<T>(ctx: ServerContext, asked: Form<T>, maxAttempts: number): Promise<InputResult<T>> {
    let reasons: string[] = [];
    for (let attempt = 1; attempt <= maxAttempts; attempt++) {
      const answer = await ctx.mcpReq.elicitInput({
        mode: "form",
        message: asking(asked, reasons),
        requestedSchema: asked.schema as never,
      });
      const settled = pick(answer as unknown as Record<string, unknown>);
      if (answer.action !== "accept") return outcome(asked, settled);
      reasons = read(asked, answer.content).reasons;
      if (reasons.length === 0) return outcome(asked, settled);
    }
    throw new InvalidInput(`The answer did not fit the form after ${maxAttempts} tries: ${reasons.join("; ")}.`, reasons);
  }

  // ---- completion notifications (2025-11-25) ------------------------------------------------------------
  private remember(flowId: string, server: McpServer): void {
    const now = Date.now();
    for (const [key, held] of this.sessions) if ((held.at(-1)?.at ?? 0) < now - this.notifyTtlMs) this.sessions.delete(key);
    const held = this.sessions.get(flowId) ?? [];
    held.push({ at: now, notify: server.server.createElicitationCompletionNotifier(flowId) });
    this.sessions.set(flowId, held);
  }

  /** Send `notifications/elicitation/complete` to this process's sessions that were shown `flowId`. */
  async notifyCompleted(flowId: string): Promise<number> {
    const held = this.sessions.get(flowId) ?? [];
    this.sessions.delete(flowId);
    let sent = 0;
    for (const { notify } of held) {
      try {
        await notify();
        sent++;
      } catch {
        // a closed session must not stop the others
      }
    }
    return sent;
  }

  /** Start this process's one consumer of elicitd's event stream (once) and wait until connected. */
  async startEvents(): Promise<void> {
    if (!this.events) return;
    if (this.eventsTask === undefined) {
      this.eventsAbort = new AbortController();
      let connected: () => void = () => undefined;
      this.eventsReady = new Promise((resolve) => (connected = resolve));
      const stream = this.client.events({ onConnected: () => connected(), restartWhenExpired: true, signal: this.eventsAbort.signal });
      this.eventsTask = (async () => {
        try {
          for await (const event of stream) {
            const flowId = event.data["flow_id"];
            if (event.type.startsWith("flow.") && typeof flowId === "string") await this.notifyCompleted(flowId);
          }
        } catch {
          // an elicitd without the stream, or a key it refuses: a webhook route can still notify
        } finally {
          connected();
          this.eventsTask = undefined;
        }
      })();
    }
    await Promise.race([this.eventsReady, new Promise((resolve) => setTimeout(resolve, 5000).unref())]);
  }

  /** Stop the event-stream consumer (on shutdown). */
  async close(): Promise<void> {
    this.eventsAbort?.abort();
    await this.eventsTask;
  }
}

function pick(answer: Record<string, unknown>): Record<string, unknown> {
  const picked: Record<string, unknown> = { action: answer["action"] };
  if (answer["content"] !== undefined) picked["content"] = answer["content"];
  return picked;
}

function outcome<T>(asked: Form<T>, settled: Record<string, unknown>): InputResult<T> {
  if (settled["action"] === "decline") return { action: "decline" };
  if (settled["action"] !== "accept") return { action: "cancel" };
  const { data, reasons } = read(asked, settled["content"]);
  if (reasons.length) throw new InvalidInput(`The answer no longer fits the form: ${reasons.join("; ")}.`, reasons);
  return { action: "accept", data: data as T };
}

function checkFlow(wanted: Need, flow: Flow): void {
  const provider = wanted.create["provider"];
  if (flow.kind !== wanted.kind || (provider !== undefined && flow.provider !== provider)) {
    throw new ElicitationFailed("The request state belongs to another request.", "state_mismatch", flow);
  }
}

function finished(wanted: Need, resolution: Resolution): Completed {
  const flow = resolution.flow;
  if (resolution.outcome === "completed") return { kind: wanted.kind, result: resolution.result ?? {}, flow };
  if (resolution.outcome === "declined") {
    const text: Record<string, string> = {
      oauth_connect: `The user declined to connect ${String(wanted.create["provider"])}.`,
      consent: "The user did not approve this action.",
      payment: "The user declined the payment.",
    };
    throw new ElicitationDeclined(text[wanted.kind] ?? "The user declined.", flow);
  }
  if (resolution.outcome === "cancelled") {
    throw new ElicitationCancelled("The request was dismissed. Call the tool again to continue where you left off.", flow);
  }
  const code = flow.error?.code ?? resolution.outcome;
  throw new ElicitationFailed(`The ${noun(wanted)} did not complete (${code}).`, code, flow);
}

function noun(wanted: Need): string {
  const nouns: Record<string, string> = {
    oauth_connect: `connection to ${String(wanted.create["provider"])}`,
    api_key: "API key entry",
    consent: "approval",
    payment: "payment",
  };
  return nouns[wanted.kind] ?? "step";
}
