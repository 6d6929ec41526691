/**
 * Verify what elicitd signs — completion webhooks and event-stream events — per the Standard
 * Webhooks specification: `webhook-id`, `webhook-timestamp`, `webhook-signature` (`v1,` + base64
 * HMAC-SHA256 over `id + "." + timestamp + "." + raw body`, keyed with the base64 text after the
 * secret's `whsec_` prefix). The specification's own `standardwebhooks` package accepts the same.
 */

import { createHmac, timingSafeEqual } from "node:crypto";

export class InvalidWebhook extends Error {}

function key(secret: string): Buffer {
  const body = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret;
  const decoded = Buffer.from(body, "base64");
  return decoded.length > 0 ? decoded : Buffer.from(body);
}

/** Check the signature of `body` (the raw bytes or text as received) and return the event. */
export function verifyEvent(
  secret: string,
  body: string | Uint8Array,
  headers: Record<string, string> | Headers,
  options: { toleranceSeconds?: number; now?: number } = {},
): Record<string, unknown> {
  const get = (name: string): string | undefined => {
    if (headers instanceof Headers) return headers.get(name) ?? undefined;
    const found = Object.entries(headers).find(([k]) => k.toLowerCase() === name);
    return found?.[1];
  };
  const id = get("webhook-id");
  const stamp = get("webhook-timestamp");
  const signatures = get("webhook-signature");
  if (!id || !stamp || !signatures) throw new InvalidWebhook("missing signature headers");
  if (!/^\d+$/.test(stamp)) throw new InvalidWebhook("malformed timestamp");
  const now = options.now ?? Date.now() / 1000;
  if (Math.abs(now - Number(stamp)) > (options.toleranceSeconds ?? 300)) throw new InvalidWebhook("timestamp outside tolerance");
  const raw = typeof body === "string" ? Buffer.from(body) : Buffer.from(body);
  const expected = createHmac("sha256", key(secret))
    .update(Buffer.concat([Buffer.from(`${id}.${stamp}.`), raw]))
    .digest();
  for (const candidate of signatures.split(" ")) {
    const [version, value] = candidate.split(",", 2);
    if (version !== "v1" || value === undefined) continue;
    const given = Buffer.from(value, "base64");
    if (given.length === expected.length && timingSafeEqual(given, expected)) {
      const event: unknown = JSON.parse(raw.toString());
      if (event === null || typeof event !== "object") throw new InvalidWebhook("not an event object");
      return event as Record<string, unknown>;
    }
  }
  throw new InvalidWebhook("signature mismatch");
}
