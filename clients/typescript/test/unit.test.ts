/** What needs no elicitd: the form-mode subset and checks, SSE parsing, Standard Webhooks signatures. */

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import { FormSchemaError, InvalidWebhook, SecretField, SseParser, check, form, parseEvent, verifyEvent } from "../src/index.js";

const one = (prop: Record<string, unknown>, name = "field"): unknown => ({ type: "object", properties: { [name]: prop } });

// The cases tests/client/test_forms.py checks the Python helper against (from build/test/ here).
type SecretCase = { name: string; prop: Record<string, unknown>; looks_like?: string };
const SHARED = JSON.parse(
  readFileSync(new URL("../../../../tests/client/secret_fields.json", import.meta.url), "utf8"),
) as { refused: SecretCase[]; ordinary: SecretCase[] };

describe("form mode", () => {
  test("the subset is refused outside its rules when the form is defined", () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ type: "string", pattern: "^a" }, "pattern not allowed on a string field"],
      [{ type: "string", format: "hostname" }, 'format "hostname" is not one of email, uri, date, date-time'],
      [{ type: "integer", exclusiveMinimum: 0 }, "exclusiveMinimum not allowed on a integer field"],
      [{ type: "object", properties: {} }, 'type "object" is not a form field'],
      [{ type: "array", items: { type: "string" } }, "give the options as enum or as anyOf"],
      [{ type: "string", oneOf: [{ const: "a", title: "A", x: 1 }] }, "each oneOf entry is exactly"],
      [{ type: "string", enum: ["a", "b"], enumNames: ["A"] }, "enumNames must name each enum value"],
      [{ type: "integer", maximum: 10, default: 11 }, "the default does not fit: field must be at most 10"],
    ];
    for (const [prop, reason] of cases) {
      assert.throws(() => form(one(prop)), (error: unknown) => {
        assert.ok(error instanceof FormSchemaError);
        assert.ok(error.message.startsWith("Field 'field': "), error.message);
        assert.ok(error.message.includes(reason), `${error.message} / ${reason}`);
        return true;
      });
    }
  });

  test("secret-looking fields are refused, naming URL mode", () => {
    for (const [name, looks] of [
      ["password", "a password"],
      ["apiKey", "an API key"],
      ["client_secret", "a secret"],
      ["card_number", "a card number"],
      ["cvc", "a card security code"],
      ["ssn", "a social security number"],
    ]) {
      assert.throws(() => form(one({ type: "string" }, name)), (error: unknown) => {
        assert.ok(error instanceof SecretField);
        assert.ok(error.message.includes(`Field '${name!}' looks like ${looks!}.`), error.message);
        assert.ok(error.message.includes("elicitd.requireApiKey(ctx, { provider })"));
        return true;
      });
    }
    assert.throws(() => form(one({ type: "string", title: "Credit card" }, "cc")), SecretField);
    for (const name of ["shipping", "max_tokens", "company", "pinned"]) form(one({ type: "string" }, name));
  });

  test("the secret cases shared with the Python helper are refused, the near misses accepted", () => {
    assert.ok(SHARED.refused.length >= 40 && SHARED.ordinary.length >= 30);
    for (const { name, prop, looks_like } of SHARED.refused) {
      assert.throws(() => form(one(prop, name)), (error: unknown) => {
        assert.ok(error instanceof SecretField, `${name}: ${String(error)}`);
        assert.ok(error.message.includes(`Field '${name}' looks like ${looks_like!}.`), error.message);
        return true;
      });
    }
    for (const { name, prop } of SHARED.ordinary) {
      assert.deepEqual(form(one(prop, name)).schema.properties[name], prop, name);
    }
  });

  test("answers are checked field by field", () => {
    const schema = form({
      type: "object",
      properties: {
        n: { type: "integer", minimum: 1 },
        e: { type: "string", format: "email" },
        d: { type: "string", format: "date" },
        t: { type: "string", format: "date-time" },
        m: { type: "array", items: { anyOf: [{ const: "a", title: "A" }] }, maxItems: 1 },
        s: { type: "string", default: "x" },
      },
      required: ["n"],
    }).schema;
    assert.deepEqual(check(schema, { n: 2, e: "a@b.io", d: "2026-02-28", t: "2026-02-28T10:00:00Z", m: ["a"], extra: 1 }), {
      values: { n: 2, e: "a@b.io", d: "2026-02-28", t: "2026-02-28T10:00:00Z", m: ["a"], s: "x" },
      reasons: [],
    });
    assert.deepEqual(check(schema, { n: 1.5, e: "a@b", d: "2026-02-30", t: "2026-02-28T10:00:00", m: ["a", "b"] }).reasons, [
      "n must be a whole number",
      "e must be an email address",
      "d must be a date (YYYY-MM-DD)",
      "t must be a date and time with its offset (YYYY-MM-DDTHH:MM:SSZ)",
      "m has choices that are not offered: 'b'",
    ]);
    assert.deepEqual(check(schema, {}).reasons, ["n is required"]);
  });
});

describe("events and signatures", () => {
  test("SSE: fields, comments, the id-only opening message, multi-line data", () => {
    const parser = new SseParser();
    const messages = [": hello", "retry: 2000", "id: 7", "", "id: 8", "event: flow.completed", "data: {\"a\":", "data: 1}", ""].map((line) => parser.feed(line));
    assert.equal(parser.retryMs, 2000);
    assert.deepEqual(messages.filter(Boolean), [{ id: "8", event: "flow.completed", data: '{"a":\n1}' }]);
    assert.equal(parser.lastEventId, "8");
  });

  test("a stream event verifies like a webhook", () => {
    const secret = "whsec_" + Buffer.alloc(32, 7).toString("base64");
    const body = JSON.stringify({ id: "evt_1", type: "flow.completed", created_at: "2026-01-01T00:00:00+00:00", data: { flow_id: "fl_1" } });
    const stamp = Math.floor(Date.now() / 1000);
    const signature = createHmac("sha256", Buffer.alloc(32, 7)).update(`evt_1.${stamp}.${body}`).digest("base64");
    const headers = { "webhook-id": "evt_1", "webhook-timestamp": String(stamp), "webhook-signature": `v1,${signature}` };
    const event = parseEvent(3, JSON.stringify({ headers, body }));
    assert.equal(event.seq, 3);
    assert.equal(event.data["flow_id"], "fl_1");
    assert.equal(verifyEvent(secret, event.body, event.headers)["id"], "evt_1");
    assert.throws(() => verifyEvent(secret, event.body + " ", event.headers), InvalidWebhook);
    assert.throws(() => verifyEvent(secret, event.body, { ...headers, "webhook-timestamp": "1000" }), /tolerance/);
  });
});
