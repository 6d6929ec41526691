/**
 * `ElicitdClient`: the typed client of elicitd's MCP-server API (`/v1`), its token exchange
 * (`POST /oauth/token`, RFC 8693) and its event stream (`GET /v1/events`).
 *
 * Retries: only what may pass by itself is retried, with exponential backoff and jitter (honouring
 * `Retry-After`): a connection failure, `502`, `504`, and a `503` that carries `Retry-After`. A
 * `503` without it, or a `500`, is the same answer every time and is thrown at once with its
 * `code`. Every call is safe to repeat (create is create-or-reuse, resolve and status read or wait,
 * revoke is idempotent, complete and fail recognise their own earlier success).
 */

import {
  ElicitdError,
  ElicitdUnavailable,
  FlowNotPending,
  RateLimited,
  TokenExchangeError,
  errorFromProblem,
  type Problem,
} from "./errors.js";
import { EventStream, type EventStreamOptions } from "./events.js";

export interface Subject {
  iss: string;
  sub: string;
}

export interface Flow {
  id: string;
  kind: string;
  status: string;
  url: string;
  subject?: Subject;
  expires_at?: string;
  provider?: string | null;
  error?: { code: string; message?: string | null } | null;
  [field: string]: unknown;
}

/** A ready 2026-07-28 `InputRequiredResult`, as elicitd mints it. */
export interface InputRequiredWire {
  resultType: "input_required";
  inputRequests?: Record<string, { method: string; params: Record<string, unknown> }>;
  requestState?: string;
}

export interface CreatedFlow {
  status: string;
  created: boolean;
  flow: Flow;
  result?: Record<string, unknown> | null;
  mcp?: InputRequiredWire | null;
  legacy?: { code: number; elicitation: Record<string, unknown> } | null;
}

export interface Resolution {
  outcome: "completed" | "input_required" | "declined" | "cancelled" | "expired" | "failed";
  flow: Flow;
  result?: Record<string, unknown> | null;
  mcp?: InputRequiredWire | null;
  [field: string]: unknown;
}

/** A flow as a status read of a client that must prove the subject shows it without the user's token. */
export type FlowSummary = Omit<Flow, "url" | "subject"> & { url?: string; subject?: Subject };

export interface FlowStatus {
  /** A `FlowSummary` (no `url`, no `subject`) for a client that must prove the subject, read without the user's token. */
  flow: Flow | FlowSummary;
  /** Absent for a client that must prove the subject unless the status was read with the user's token. */
  result?: Record<string, unknown> | null;
  [field: string]: unknown;
}

export interface Token {
  access_token: string;
  token_type: string;
  connection_id: string;
  provider: string;
  account_id: string;
  account_login?: string | null;
  scopes: string[];
  expires_at?: string | null;
}

/** RFC 8693 §2.2.1 answer of `POST /oauth/token`. */
export interface ExchangedToken {
  access_token: string;
  issued_token_type: string;
  token_type: string;
  expires_in?: number;
  scope?: string;
  [field: string]: unknown;
}

export interface CreateFlowOptions {
  provider?: string;
  scopes?: string[];
  message?: string;
  ttlSeconds?: number;
  context?: Record<string, unknown>;
  params?: Record<string, unknown>;
  url?: string;
  account?: string;
  /** The user's access token, for a server client that must prove the subject. */
  subjectToken?: string;
}

export interface ClientOptions {
  /** Per-request timeout in milliseconds (a long-poll adds its own wait). Default 30 000. */
  timeoutMs?: number;
  retries?: number;
  backoffMs?: number;
  maxBackoffMs?: number;
  fetch?: typeof fetch;
}

const SUBJECT_TOKEN_HEADER = "Elicitd-Subject-Token";
const TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token";

function transient(response: Response): boolean {
  if (response.status === 503) return response.headers.has("retry-after");
  return response.status === 502 || response.status === 504;
}

async function problemOf(response: Response): Promise<Problem> {
  try {
    const body: unknown = await response.json();
    if (body !== null && typeof body === "object" && !Array.isArray(body)) return body as Problem;
  } catch {
    // not JSON: described below
  }
  return { detail: `elicitd answered HTTP ${response.status}` };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export class ElicitdClient {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  private readonly apiKey: string;
  private readonly retries: number;
  private readonly backoffMs: number;
  private readonly maxBackoffMs: number;
  private readonly fetchImpl: typeof fetch;

  constructor(baseUrl: string, apiKey: string, options: ClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.apiKey = apiKey;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.retries = options.retries ?? 3;
    this.backoffMs = options.backoffMs ?? 200;
    this.maxBackoffMs = options.maxBackoffMs ?? 5_000;
    this.fetchImpl = options.fetch ?? fetch;
  }

  /** The API key stays out of logs and inspection. */
  toJSON(): { baseUrl: string } {
    return { baseUrl: this.baseUrl };
  }

  /** Headers every call carries (the bearer API key). */
  headers(extra: Record<string, string> = {}): Record<string, string> {
    return {
      Authorization: `Bearer ${this.apiKey}`,
      Accept: "application/json",
      "User-Agent": "elicitd-client-ts/0.1",
      ...extra,
    };
  }

  private delay(attempt: number, retryAfter: string | null): number {
    if (retryAfter !== null && /^\d+$/.test(retryAfter)) return Math.min(Number(retryAfter) * 1000, this.maxBackoffMs);
    const base = Math.min(this.backoffMs * 2 ** attempt, this.maxBackoffMs);
    return base / 2 + (Math.random() * base) / 2;
  }

  /** One API call with retries: the JSON answer and its status, or an `ElicitdError`. */
  async request(
    method: string,
    path: string,
    options: { json?: unknown; query?: Record<string, string>; waitSeconds?: number; subjectToken?: string } = {},
  ): Promise<{ status: number; body: unknown }> {
    const url = new URL(this.baseUrl + path);
    for (const [key, value] of Object.entries(options.query ?? {})) url.searchParams.set(key, value);
    const extra: Record<string, string> = {};
    if (options.json !== undefined) extra["Content-Type"] = "application/json";
    if (options.subjectToken) extra[SUBJECT_TOKEN_HEADER] = options.subjectToken;
    const timeout = this.timeoutMs + (options.waitSeconds ?? 0) * 1000;
    let last = "no attempt made";
    let lastResponse: { status: number; problem: Problem } | undefined;
    let retryAfter: string | null = null;
    for (let attempt = 0; attempt <= this.retries; attempt++) {
      if (attempt > 0) await sleep(this.delay(attempt - 1, retryAfter));
      let response: Response;
      try {
        const init: RequestInit = { method, headers: this.headers(extra), signal: AbortSignal.timeout(timeout) };
        if (options.json !== undefined) init.body = JSON.stringify(options.json);
        response = await this.fetchImpl(url, init);
      } catch (error) {
        if (error instanceof DOMException && error.name === "TimeoutError") {
          throw new ElicitdUnavailable("elicitd did not answer in time", { code: "unavailable" });
        }
        last = `${error instanceof Error ? error.name : "error"} talking to elicitd`;
        lastResponse = undefined;
        continue;
      }
      if (transient(response)) {
        retryAfter = response.headers.get("retry-after");
        last = `elicitd answered HTTP ${response.status}`;
        lastResponse = { status: response.status, problem: await problemOf(response) };
        continue;
      }
      if (response.status >= 400) {
        const error = errorFromProblem(response.status, await problemOf(response));
        if (error instanceof RateLimited) {
          const after = response.headers.get("retry-after");
          error.retryAfter = after !== null && /^\d+$/.test(after) ? Number(after) : undefined;
        }
        throw error;
      }
      const text = await response.text();
      return { status: response.status, body: text ? (JSON.parse(text) as unknown) : null };
    }
    const code = lastResponse && typeof lastResponse.problem["code"] === "string" ? lastResponse.problem["code"] : "unavailable";
    throw new ElicitdUnavailable(`${last} after ${this.retries + 1} attempts`, {
      code,
      status: lastResponse?.status ?? 0,
      problem: lastResponse?.problem ?? {},
    });
  }

  // ---- flows ---------------------------------------------------------------------------------------
  /** Create a flow, or reuse the subject's pending equivalent (same id, same URL). */
  async createFlow(subject: Subject, kind: string, options: CreateFlowOptions = {}): Promise<CreatedFlow> {
    const body: Record<string, unknown> = { subject, kind, scopes: options.scopes ?? [] };
    const optional: Record<string, unknown> = {
      provider: options.provider,
      message: options.message,
      ttl_seconds: options.ttlSeconds,
      url: options.url,
      account: options.account,
      context: options.context,
      params: options.params,
    };
    for (const [key, value] of Object.entries(optional)) if (value !== undefined) body[key] = value;
    const { status, body: data } = await this.request("POST", "/v1/flows", withToken({ json: body }, options.subjectToken));
    return { ...(data as Omit<CreatedFlow, "created">), created: status === 201 };
  }

  /** Resolve an MCP client's retry: apply its action and, on `accept`, wait up to `waitSeconds`. */
  async resolve(
    subject: Subject,
    requestState: string,
    inputResponses: Record<string, Record<string, unknown>> = {},
    waitSeconds = 0,
    subjectToken?: string,
  ): Promise<Resolution> {
    const json = { subject, request_state: requestState, input_responses: inputResponses, wait_seconds: waitSeconds };
    const { body } = await this.request("POST", "/v1/flows/resolve", withToken({ json, waitSeconds }, subjectToken));
    return body as Resolution;
  }

  /**
   * A flow's status; with `waitSeconds` a long-poll that returns as soon as it is terminal. For a
   * server client that must prove the subject, `subjectToken` (the flow's user's access token)
   * reads the whole answer; without it, elicitd tells the state and outcome only (no `subject`,
   * `url` or `result`).
   */
  async status(flowId: string, waitSeconds = 0, subjectToken?: string): Promise<FlowStatus> {
    const query: Record<string, string> = waitSeconds ? { wait_seconds: String(waitSeconds) } : {};
    const path = `/v1/flows/${encodeURIComponent(flowId)}`;
    const { body } = await this.request("GET", path, withToken({ query, waitSeconds }, subjectToken));
    return body as FlowStatus;
  }

  /** Complete an `external` flow with the caller's result. */
  complete(flowId: string, result: Record<string, unknown>): Promise<FlowStatus> {
    return this.finish(flowId, "complete", { result }, "completed");
  }

  /** Fail an `external` flow with a code the MCP server can act on. */
  fail(flowId: string, code: string, message?: string): Promise<FlowStatus> {
    return this.finish(flowId, "fail", message === undefined ? { code } : { code, message }, "failed");
  }

  private async finish(flowId: string, verb: string, json: unknown, target: string): Promise<FlowStatus> {
    try {
      const { body } = await this.request("POST", `/v1/flows/${encodeURIComponent(flowId)}/${verb}`, { json });
      return body as FlowStatus;
    } catch (error) {
      // A retried call whose first answer was lost: the flow is already where we wanted it.
      if (error instanceof FlowNotPending) {
        const current = await this.status(flowId);
        if (current.flow.status === target) return current;
      }
      throw error;
    }
  }

  // ---- connections ---------------------------------------------------------------------------------
  /** A valid access token of the subject's connection (refreshed by elicitd when near expiry). */
  async token(
    provider: string,
    subject: Subject,
    options: { scopes?: string[]; account?: string; subjectToken?: string } = {},
  ): Promise<Token> {
    const query: Record<string, string> = { iss: subject.iss, sub: subject.sub };
    if (options.scopes?.length) query["scopes"] = options.scopes.join(" ");
    if (options.account !== undefined) query["account"] = options.account;
    const path = `/v1/connections/${encodeURIComponent(provider)}/token`;
    const { body } = await this.request("GET", path, withToken({ query }, options.subjectToken));
    return body as Token;
  }

  /** Forget the subject's connection (and revoke it at the provider when it can). */
  async revoke(provider: string, subject: Subject, options: { account?: string } = {}): Promise<Record<string, unknown>> {
    const query: Record<string, string> = { iss: subject.iss, sub: subject.sub };
    if (options.account !== undefined) query["account"] = options.account;
    const { body } = await this.request("DELETE", `/v1/connections/${encodeURIComponent(provider)}`, { query });
    return (body ?? {}) as Record<string, unknown>;
  }

  /**
   * RFC 8693 token exchange (`POST /oauth/token`): the user's access token in, the provider's
   * access token out. Name the provider by `audience` (its name) or `resource`.
   */
  async exchangeToken(options: {
    subjectToken: string;
    audience?: string;
    resource?: string;
    scope?: string[];
  }): Promise<ExchangedToken> {
    const form = new URLSearchParams({
      grant_type: TOKEN_EXCHANGE,
      subject_token: options.subjectToken,
      subject_token_type: ACCESS_TOKEN_TYPE,
    });
    if (options.audience !== undefined) form.set("audience", options.audience);
    if (options.resource !== undefined) form.set("resource", options.resource);
    if (options.scope?.length) form.set("scope", options.scope.join(" "));
    const response = await this.fetchImpl(this.baseUrl + "/oauth/token", {
      method: "POST",
      headers: this.headers({ "Content-Type": "application/x-www-form-urlencoded" }),
      body: form.toString(),
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    const body = (await problemOf(response)) as Record<string, unknown>;
    if (response.status >= 400) {
      const code = String(body["elicitd_code"] ?? body["error"] ?? "error");
      const detail = String(body["error_description"] ?? body["error"] ?? `HTTP ${response.status}`);
      throw new TokenExchangeError(detail, { code, status: response.status, problem: body });
    }
    return body as ExchangedToken;
  }

  // ---- events --------------------------------------------------------------------------------------
  /** This server client's event stream: `for await (const event of client.events()) …`. */
  events(options: EventStreamOptions = {}): EventStream {
    return new EventStream(this, options);
  }

  /** A streamed GET with this client's credentials (no retries: the caller resumes). */
  stream(path: string, headers: Record<string, string>, signal: AbortSignal): Promise<Response> {
    return this.fetchImpl(this.baseUrl + path, { headers: this.headers(headers), signal });
  }
}

function withToken<T extends object>(options: T, subjectToken: string | undefined): T & { subjectToken?: string } {
  return subjectToken ? { ...options, subjectToken } : options;
}

export { ElicitdError };
