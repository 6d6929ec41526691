/**
 * elicitd's event stream (`GET /v1/events`, Server-Sent Events) as an async iterable that never
 * loses its place: on a dropped connection it reconnects with `Last-Event-ID` and elicitd resumes
 * right after the last event it yielded, from PostgreSQL — nothing lost or repeated within the
 * retention window. `event.body` and `event.headers` are the exact webhook body and its Standard
 * Webhooks headers, so `verifyEvent(secret, event.body, event.headers)` checks it.
 */

import type { ElicitdClient } from "./client.js";
import { ElicitdError, EventsExpired, errorFromProblem } from "./errors.js";

export interface ElicitdEvent {
  /** Its position in this server client's stream (what `Last-Event-ID` resumes after). */
  seq: number;
  /** `flow.completed` | `flow.declined` | … | `connection.revoked` | `grant.revoked`. */
  type: string;
  /** `evt_…`, the same as the webhook delivery's id for a flow event. */
  id: string;
  createdAt: string;
  /** e.g. `{ flow_id, elicitation_id, status, kind, subject, … }`. */
  data: Record<string, unknown>;
  /** The exact signed body. */
  body: string;
  /** `webhook-id`, `webhook-timestamp`, `webhook-signature`. */
  headers: Record<string, string>;
}

export interface EventStreamOptions {
  /** Resume after this position; by default the stream starts at its current end. */
  lastEventId?: number;
  /** Called on each (re)connection once elicitd told the position. */
  onConnected?: (position: number) => void;
  /** Resume from the current end (instead of throwing `EventsExpired`) past the retention window. */
  restartWhenExpired?: boolean;
  /** Stops the stream (the iteration ends). */
  signal?: AbortSignal;
}

/** The Server-Sent Events line protocol (WHATWG rules). */
export class SseParser {
  lastEventId: string | undefined;
  retryMs: number | undefined;
  private event = "message";
  private data: string[] = [];
  private pendingId: string | undefined;

  /** One line without its end; a complete message when the line ends one. */
  feed(line: string): { id: string | undefined; event: string; data: string } | undefined {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const name = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "data") this.data.push(value);
    else if (name === "event") this.event = value;
    else if (name === "id" && !value.includes("\0")) this.pendingId = value;
    else if (name === "retry" && /^\d+$/.test(value)) this.retryMs = Number(value);
    return undefined;
  }

  private dispatch(): { id: string | undefined; event: string; data: string } | undefined {
    const message = { event: this.event, data: this.data };
    this.event = "message";
    this.data = [];
    if (this.pendingId !== undefined) {
      this.lastEventId = this.pendingId;
      this.pendingId = undefined;
    }
    if (message.data.length === 0) return undefined;
    return { id: this.lastEventId, event: message.event, data: message.data.join("\n") };
  }
}

export function parseEvent(seq: number, data: string): ElicitdEvent {
  const envelope = JSON.parse(data) as { headers?: Record<string, string>; body: string };
  const document = JSON.parse(envelope.body) as { id: string; type: string; created_at?: string; data?: Record<string, unknown> };
  return {
    seq,
    type: document.type,
    id: document.id,
    createdAt: document.created_at ?? "",
    data: document.data ?? {},
    body: envelope.body,
    headers: envelope.headers ?? {},
  };
}

// elicitd sends a heartbeat every 15 s: three missed ones mean the connection is gone.
const READ_TIMEOUT_MS = 45_000;
const MAX_RECONNECT_MS = 30_000;

export class EventStream implements AsyncIterable<ElicitdEvent> {
  lastEventId: number | undefined;
  connections = 0;
  private retryMs = 2000;

  constructor(
    private readonly client: ElicitdClient,
    private readonly options: EventStreamOptions = {},
  ) {
    this.lastEventId = options.lastEventId;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ElicitdEvent> {
    let failures = 0;
    while (!this.options.signal?.aborted) {
      try {
        for await (const event of this.connect()) {
          failures = 0;
          yield event;
        }
        failures = 0;
      } catch (error) {
        if (this.options.signal?.aborted) return;
        if (error instanceof EventsExpired && this.options.restartWhenExpired) {
          this.lastEventId = undefined;
          continue;
        }
        if (error instanceof ElicitdError && [400, 401, 403, 404, 410].includes(error.status)) throw error;
        failures++;
      }
      const wait = failures ? Math.min(this.retryMs * 2 ** Math.min(failures, 5), MAX_RECONNECT_MS) : 50;
      await new Promise((resolve) => setTimeout(resolve, wait * (0.5 + Math.random() / 2)));
    }
  }

  private async *connect(): AsyncGenerator<ElicitdEvent> {
    const abort = new AbortController();
    const stop = (): void => abort.abort();
    this.options.signal?.addEventListener("abort", stop);
    let idle: ReturnType<typeof setTimeout> | undefined;
    const arm = (): void => {
      clearTimeout(idle);
      idle = setTimeout(stop, READ_TIMEOUT_MS);
    };
    try {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (this.lastEventId !== undefined) headers["Last-Event-ID"] = String(this.lastEventId);
      arm();
      const response = await this.client.stream("/v1/events", headers, abort.signal);
      if (response.status >= 400 || response.body === null) {
        let problem: Record<string, unknown> = {};
        try {
          problem = (await response.json()) as Record<string, unknown>;
        } catch {
          problem = { detail: `elicitd answered HTTP ${response.status}` };
        }
        throw errorFromProblem(response.status, problem);
      }
      this.connections++;
      const parser = new SseParser();
      const decoder = new TextDecoder();
      let buffer = "";
      let announced = false;
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
        arm();
        buffer += decoder.decode(chunk, { stream: true });
        let end: number;
        while ((end = buffer.search(/\r\n|\r|\n/)) !== -1) {
          const line = buffer.slice(0, end);
          buffer = buffer.slice(end + (buffer.startsWith("\r\n", end) ? 2 : 1));
          const message = parser.feed(line);
          if (parser.retryMs !== undefined) this.retryMs = parser.retryMs;
          if (!announced && parser.lastEventId !== undefined && /^\d+$/.test(parser.lastEventId)) {
            announced = true;
            this.lastEventId = Number(parser.lastEventId);
            this.options.onConnected?.(this.lastEventId);
          }
          if (message === undefined || message.id === undefined || !/^\d+$/.test(message.id)) continue;
          const seq = Number(message.id);
          let event: ElicitdEvent;
          try {
            event = parseEvent(seq, message.data);
          } catch {
            this.lastEventId = seq; // unreadable: skipped, not retried forever
            continue;
          }
          this.lastEventId = seq;
          yield event;
        }
      }
    } finally {
      clearTimeout(idle);
      this.options.signal?.removeEventListener("abort", stop);
      abort.abort();
    }
  }
}
