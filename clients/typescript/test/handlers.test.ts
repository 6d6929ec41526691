/** Typed webhook handlers on deliveries signed by elicitd's own code (tests/client/webhook_samples.json,
 * which tests/client/test_webhook_handlers.py checks is exactly what elicitd signs). */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import { type ConnectionEvent, type EndpointSuspended, WebhookHandlers, parseTypedEvent } from "../src/index.js";

type Delivery = { type: string; body: string; headers: Record<string, string> };
const SAMPLES = JSON.parse(
  readFileSync(new URL("../../../../tests/client/webhook_samples.json", import.meta.url), "utf8"),
) as { secrets: { new: string; old: string }; time: number; deliveries: Delivery[] };
const ALWAYS = { toleranceSeconds: Number.POSITIVE_INFINITY };

describe("webhook handlers", () => {
  test("the challenge is echoed and every event arrives typed, with either secret of a rotation", async () => {
    for (const secrets of [
      [SAMPLES.secrets.new, SAMPLES.secrets.old],
      [SAMPLES.secrets.old, SAMPLES.secrets.new],
    ]) {
      const hooks = new WebhookHandlers(secrets, ALWAYS);
      const connections: ConnectionEvent[] = [];
      const suspended: EndpointSuspended[] = [];
      hooks
        .onConnectionExpiring((e) => connections.push(e))
        .onConnectionNeedsReauthorization(async (e) => {
          await Promise.resolve();
          connections.push(e);
        })
        .onConnectionRecovered((e) => connections.push(e))
        .onConnectionRefreshed((e) => connections.push(e))
        .onEndpointSuspended((e) => suspended.push(e));
      const replies = [];
      for (const delivery of SAMPLES.deliveries) replies.push(await hooks.handle(delivery.body, delivery.headers));
      assert.deepEqual(
        replies.map((r) => r.status),
        [200, 204, 204, 204, 204, 204],
      );
      assert.deepEqual(JSON.parse(replies[0]!.body), { challenge: "c-1" });
      assert.deepEqual(
        connections.map((e) => e.type),
        ["connection.expiring", "connection.needs_reauthorization", "connection.recovered", "connection.refreshed"],
      );
      const broken = connections[1]!;
      assert.equal(broken.connectionId, "cn_" + "a".repeat(32));
      assert.equal(broken.reason, "invalid_grant");
      assert.equal(broken.httpStatus, 400);
      assert.deepEqual(broken.subject, { iss: "https://id.example.com", sub: "u1" });
      assert.equal(suspended.length, 1);
      assert.equal(suspended[0]!.endpointId, "we_" + "c".repeat(32));
      assert.equal(suspended[0]!.lastStatus, 503);
      assert.equal(suspended[0]!.lastError, "http 503");
    }
  });

  test("a delivery no held secret signed is refused, and nothing is dispatched", async () => {
    const hooks = new WebhookHandlers(SAMPLES.secrets.new, ALWAYS);
    let called = 0;
    hooks.onEndpointSuspended(() => {
      called += 1;
    });
    const onlyOld = SAMPLES.deliveries.at(-1)!;
    const reply = await hooks.handle(onlyOld.body, onlyOld.headers);
    assert.equal(reply.status, 401);
    assert.equal(called, 0);
    const stale = new WebhookHandlers(SAMPLES.secrets.old);
    assert.equal((await stale.handle(onlyOld.body, onlyOld.headers)).status, 401); // outside the tolerance
    assert.equal(parseTypedEvent({ type: "flow.completed", data: {} }), undefined);
  });
});
