/** JwtVerifier against a JWKS served here: ES256 (as Dev ID signs) and RS256 accepted; everything else refused. */

import assert from "node:assert/strict";
import { generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";

import { requireBearerAuth } from "@modelcontextprotocol/server";

import { Elicitd, ElicitdClient, JwtVerifier } from "../src/index.js";

const AUDIENCE = "http://127.0.0.1:9000/mcp";
const ec = generateKeyPairSync("ec", { namedCurve: "P-256" });
const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 });
const stranger = generateKeyPairSync("ec", { namedCurve: "P-256" });

function jwt(alg: string, kid: string, key: KeyObject | Buffer, claims: Record<string, unknown>): string {
  const head = Buffer.from(JSON.stringify({ alg, kid, typ: "at+jwt" })).toString("base64url");
  const body = Buffer.from(JSON.stringify(claims)).toString("base64url");
  const input = Buffer.from(`${head}.${body}`);
  const signature =
    alg === "ES256"
      ? sign("sha256", input, { key: key as KeyObject, dsaEncoding: "ieee-p1363" })
      : alg === "RS256"
        ? sign("sha256", input, key as KeyObject)
        : Buffer.from("not-checked");
  return `${head}.${body}.${signature.toString("base64url")}`;
}

describe("JwtVerifier", () => {
  let issuer = "";
  let http: Server;
  let fetches = 0;

  before(async () => {
    http = createServer((req, res) => {
      res.setHeader("Content-Type", "application/json");
      if (req.url === "/id/.well-known/openid-configuration") return res.end(JSON.stringify({ issuer, jwks_uri: `${issuer}/jwks` }));
      fetches += 1;
      const keys = [
        { ...ec.publicKey.export({ format: "jwk" }), kid: "ec-1", alg: "ES256", use: "sig" },
        { ...rsa.publicKey.export({ format: "jwk" }), kid: "rsa-1", alg: "RS256", use: "sig" },
      ];
      res.end(JSON.stringify({ keys }));
    });
    await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
    issuer = `http://127.0.0.1:${(http.address() as AddressInfo).port}/id`;
  });
  after(() => void http.close());

  const claims = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
    iss: issuer,
    sub: "alice",
    aud: AUDIENCE,
    exp: Math.floor(Date.now() / 1000) + 300,
    scope: "files:read",
    ...extra,
  });

  test("ES256 and RS256 tokens give the SDK's AuthInfo with iss and sub for Elicitd", async () => {
    const verifier = new JwtVerifier(issuer, { audience: AUDIENCE });
    for (const token of [jwt("ES256", "ec-1", ec.privateKey, claims()), jwt("RS256", "rsa-1", rsa.privateKey, claims())]) {
      const info = await verifier.verifyAccessToken(token);
      assert.deepEqual(
        [info.token, info.scopes, info.resource?.href, info.extra?.["iss"], info.extra?.["sub"]],
        [token, ["files:read"], AUDIENCE, issuer, "alice"],
      );
    }
    assert.equal(fetches, 1); // both keys came with one JWKS fetch
  });

  test("each wrong token is refused with its reason", async () => {
    const verifier = new JwtVerifier(issuer, { audience: AUDIENCE });
    const now = Math.floor(Date.now() / 1000);
    const cases: [string, string][] = [
      [jwt("ES256", "ec-1", ec.privateKey, claims({ aud: "http://127.0.0.1:9001/mcp" })), "issued for another audience"],
      [jwt("ES256", "ec-1", ec.privateKey, claims({ iss: "https://other.example" })), "issued by another issuer"],
      [jwt("ES256", "ec-1", ec.privateKey, claims({ exp: now - 60 })), "expired"],
      [jwt("ES256", "ec-1", ec.privateKey, claims({ sub: "" })), "names no subject"],
      [jwt("ES256", "ec-1", stranger.privateKey, claims()), "bad signature"],
      [jwt("ES256", "rsa-1", ec.privateKey, claims()), "signed with a key the issuer does not publish"],
      [jwt("HS256", "ec-1", Buffer.from("secret"), claims()), "algorithm HS256 is not accepted"],
      [jwt("none", "ec-1", Buffer.from(""), claims()), "algorithm none is not accepted"],
      ["not.a-token", "not a JWT"],
    ];
    for (const [token, reason] of cases) assert.equal(await verifier.verify(token), reason);
  });

  test("the SDK's requireBearerAuth answers 401 for a refused token and AuthInfo for a good one", async () => {
    const gate = requireBearerAuth({ verifier: new JwtVerifier(issuer, { audience: AUDIENCE }), expectedResource: new URL(AUDIENCE) });
    const ask = (token: string): Request => new Request(AUDIENCE, { method: "POST", headers: { Authorization: `Bearer ${token}` } });
    const refused = await gate(ask(jwt("ES256", "ec-1", ec.privateKey, claims({ aud: "https://elsewhere.example/mcp" }))));
    assert.ok(refused instanceof Response);
    assert.equal(refused.status, 401);
    assert.match(refused.headers.get("www-authenticate") ?? "", /^Bearer .*invalid_token/);
    const accepted = await gate(ask(jwt("ES256", "ec-1", ec.privateKey, claims())));
    assert.ok(!(accepted instanceof Response));
    assert.equal(accepted.extra?.["sub"], "alice");
  });
});

describe("Elicitd's stateKey", () => {
  const client = new ElicitdClient("http://127.0.0.1:1", "elk_none");

  test("is required, and at least 32 bytes: never a key made up per process", () => {
    const missing = { stateKey: undefined } as unknown as { stateKey: string };
    assert.throws(() => new Elicitd(client, missing), /stateKey is missing; give at least 32 bytes, the same on every replica/);
    assert.throws(() => new Elicitd(client, { stateKey: "short" }), /stateKey is 5 bytes; give at least 32 bytes/);
    assert.ok(new Elicitd(client, { stateKey: "x".repeat(32), events: false }) instanceof Elicitd);
  });
});
