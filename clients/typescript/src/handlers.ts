/**
 * Typed handlers for what elicitd tells an MCP server about connections and its webhook endpoints.
 *
 *   const hooks = new WebhookHandlers([secret]); // [newSecret, oldSecret] during a rotation's grace
 *   hooks.onConnectionNeedsReauthorization(async (event) => { ... event.connectionId, event.reason });
 *   const reply = await hooks.handle(rawBody, request.headers); // status, body, contentType
 *
 * `handle` verifies the Standard Webhooks signature, answers elicitd's verification challenge
 * (`webhook.verification`: a new endpoint receives nothing until it has echoed the challenge) and
 * calls the handler registered for the event's type with a typed event. `dispatch` does the same
 * for an event of the stream (`GET /v1/events`). Events never carry a token; elicitd retries a
 * delivery not answered 2xx with the same `webhook-id` (`event.id`): handlers should be idempotent.
 */

import { InvalidWebhook, verifyEvent } from "./webhooks.js";

export const VERIFICATION = "webhook.verification";

export type ConnectionEventType =
  | "connection.expiring"
  | "connection.needs_reauthorization"
  | "connection.recovered"
  | "connection.refreshed";

/** A connection's health changed (docs/connections.md says what to do with each). */
export interface ConnectionEvent {
  /** `evt_…`, the same on every retry: de-duplicate on it. */
  id: string;
  type: ConnectionEventType;
  connectionId: string;
  provider: string;
  accountId: string | null;
  subject: { iss: string; sub: string };
  /** `healthy` | `expiring` | `needs_reauthorization` | `revoked`. */
  status: string;
  reason: string | null;
  httpStatus: number | null;
  expiresAt: string | null;
  refreshExpiresAt: string | null;
  occurredAt: string | null;
  data: Record<string, unknown>;
}

/** One of this server client's endpoints failed for too long: nothing more is sent to it until an
 * operator enables it again (and it answers a new challenge). */
export interface EndpointSuspended {
  id: string;
  type: "webhook.endpoint_suspended";
  endpointId: string;
  url: string;
  failingSince: string | null;
  lastStatus: number | null;
  lastError: string | null;
  occurredAt: string | null;
  data: Record<string, unknown>;
}

export type TypedEvent = ConnectionEvent | EndpointSuspended;

export interface WebhookReply {
  status: number;
  body: string;
  contentType: string;
}

type Handler<E> = (event: E) => unknown;

const CONNECTION_TYPES: readonly string[] = [
  "connection.expiring",
  "connection.needs_reauthorization",
  "connection.recovered",
  "connection.refreshed",
];

const str = (value: unknown): string | null => (value === null || value === undefined ? null : String(value));
const int = (value: unknown): number | null => (typeof value === "number" && Number.isInteger(value) ? value : null);

/** The typed form of an event document (`{ id, type, data }`), or undefined for another type. */
export function parseTypedEvent(event: Record<string, unknown>): TypedEvent | undefined {
  const type = String(event["type"] ?? "");
  const data = (event["data"] ?? {}) as Record<string, unknown>;
  const id = String(event["id"] ?? "");
  if (CONNECTION_TYPES.includes(type)) {
    const subject = (data["subject"] ?? {}) as Record<string, unknown>;
    return {
      id,
      type: type as ConnectionEventType,
      connectionId: String(data["connection_id"] ?? ""),
      provider: String(data["provider"] ?? ""),
      accountId: str(data["account_id"]),
      subject: { iss: String(subject["iss"] ?? ""), sub: String(subject["sub"] ?? "") },
      status: String(data["status"] ?? ""),
      reason: str(data["reason"]),
      httpStatus: int(data["http_status"]),
      expiresAt: str(data["expires_at"]),
      refreshExpiresAt: str(data["refresh_expires_at"]),
      occurredAt: str(data["occurred_at"]),
      data,
    };
  }
  if (type === "webhook.endpoint_suspended") {
    return {
      id,
      type,
      endpointId: String(data["endpoint_id"] ?? ""),
      url: String(data["url"] ?? ""),
      failingSince: str(data["failing_since"]),
      lastStatus: int(data["last_status"]),
      lastError: str(data["last_error"]),
      occurredAt: str(data["occurred_at"]),
      data,
    };
  }
  return undefined;
}

/** Handlers by event type, behind one signature check and the challenge answer. */
export class WebhookHandlers {
  readonly secrets: string[];
  private readonly handlers = new Map<string, Handler<never>>();

  constructor(
    secrets: string | string[],
    private readonly options: { toleranceSeconds?: number } = {},
  ) {
    this.secrets = typeof secrets === "string" ? [secrets] : [...secrets];
    if (this.secrets.length === 0) throw new Error("at least one webhook secret is needed");
  }

  /** Any event type; the handler gets the typed event where there is one, else the document. */
  on(type: string, handler: Handler<never>): this {
    this.handlers.set(type, handler);
    return this;
  }

  onConnectionExpiring(handler: Handler<ConnectionEvent>): this {
    return this.on("connection.expiring", handler as Handler<never>);
  }

  onConnectionNeedsReauthorization(handler: Handler<ConnectionEvent>): this {
    return this.on("connection.needs_reauthorization", handler as Handler<never>);
  }

  onConnectionRecovered(handler: Handler<ConnectionEvent>): this {
    return this.on("connection.recovered", handler as Handler<never>);
  }

  onConnectionRefreshed(handler: Handler<ConnectionEvent>): this {
    return this.on("connection.refreshed", handler as Handler<never>);
  }

  onEndpointSuspended(handler: Handler<EndpointSuspended>): this {
    return this.on("webhook.endpoint_suspended", handler as Handler<never>);
  }

  /** The event, when one of the secrets signed it; `InvalidWebhook` otherwise. */
  verify(body: string | Uint8Array, headers: Record<string, string> | Headers): Record<string, unknown> {
    const options = this.options.toleranceSeconds === undefined ? {} : { toleranceSeconds: this.options.toleranceSeconds };
    for (const secret of this.secrets) {
      try {
        return verifyEvent(secret, body, headers, options);
      } catch (error) {
        if (!(error instanceof InvalidWebhook) || error.message !== "signature mismatch") throw error;
      }
    }
    throw new InvalidWebhook("signature mismatch");
  }

  /** Call the handler of the event's type; resolves to whether one was registered. */
  async dispatch(event: Record<string, unknown>): Promise<boolean> {
    const handler = this.handlers.get(String(event["type"] ?? ""));
    if (handler === undefined) return false;
    await (handler as Handler<unknown>)(parseTypedEvent(event) ?? event);
    return true;
  }

  /** Verify, answer a challenge, or dispatch. A bad signature is 401; a handler's error rejects
   * (answer 500 and elicitd retries). */
  async handle(body: string | Uint8Array, headers: Record<string, string> | Headers): Promise<WebhookReply> {
    let event: Record<string, unknown>;
    try {
      event = this.verify(body, headers);
    } catch (error) {
      if (!(error instanceof InvalidWebhook)) throw error;
      return { status: 401, body: JSON.stringify({ error: error.message }), contentType: "application/json" };
    }
    if (event["type"] === VERIFICATION) {
      const data = (event["data"] ?? {}) as Record<string, unknown>;
      return { status: 200, body: JSON.stringify({ challenge: data["challenge"] }), contentType: "application/json" };
    }
    await this.dispatch(event);
    return { status: 204, body: "", contentType: "application/json" };
  }
}
