/**
 * A verifier for the users' JWT access tokens, for an MCP server that is an OAuth resource server
 * (the SDK's `OAuthTokenVerifier`, as `requireBearerAuth` takes it):
 *
 *     const verifier = new JwtVerifier("https://id.example.com", { audience: "https://files.example.com/mcp" });
 *     const gate = requireBearerAuth({ verifier, expectedResource: new URL("https://files.example.com/mcp") });
 *
 * The signature is checked against the issuer's JWKS (found through its discovery document, cached,
 * fetched again when a token names a key id not seen yet, at most every few seconds), then `iss`,
 * `aud`, `exp` and `sub`. RS256, PS256, ES256, ES384 and EdDSA are accepted; never HMAC or `none`,
 * which would be "verified" with a secret this side does not have, or with nothing. The result
 * carries `extra.iss` and `extra.sub`, where `Elicitd` reads the subject.
 */

import { constants, createPublicKey, verify, type JsonWebKey, type KeyObject } from "node:crypto";

import type { AuthInfo } from "@modelcontextprotocol/server";

// A token naming an unknown key may mean the issuer rotated its keys: fetch again, but never more
// often than this, so a stream of forged tokens cannot make the server a JWKS request amplifier.
const REFRESH_MIN_MS = 5_000;

/** node:crypto's digest and signature encoding for each accepted JWS algorithm. */
const ALGORITHMS: Record<string, { digest: string | null; kty: string; options?: object }> = {
  RS256: { digest: "sha256", kty: "RSA" },
  PS256: { digest: "sha256", kty: "RSA", options: { padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 } },
  ES256: { digest: "sha256", kty: "EC", options: { dsaEncoding: "ieee-p1363" } },
  ES384: { digest: "sha384", kty: "EC", options: { dsaEncoding: "ieee-p1363" } },
  EdDSA: { digest: null, kty: "OKP" },
};

export interface JwtVerifierOptions {
  /** The `aud` this server's tokens carry: usually its MCP URL (one value, or any of several). */
  audience: string | string[];
  /** The JWKS address; by default the `jwks_uri` of `<issuer>/.well-known/openid-configuration`. */
  jwksUrl?: string;
  /** Which of RS256, PS256, ES256, ES384, EdDSA to accept (default: all of them). */
  algorithms?: string[];
  /** Clock skew allowed on `exp` and `nbf`, in seconds (default 30). */
  leewaySeconds?: number;
  /** How long fetched keys are used before they are fetched again, in seconds (default 300). */
  cacheSeconds?: number;
}

/** The refusal the SDK's bearer helpers turn into `401 invalid_token` (an `OAuthError`). */
async function invalidToken(reason: string): Promise<Error> {
  const { OAuthError, OAuthErrorCode } = await import("@modelcontextprotocol/server");
  return new OAuthError(OAuthErrorCode.InvalidToken, reason);
}

export class JwtVerifier {
  readonly issuer: string;
  readonly audiences: string[];
  readonly algorithms: string[];
  private readonly leewaySeconds: number;
  private readonly cacheMs: number;
  private jwksUrl: string | undefined;
  private keys = new Map<string, { key: KeyObject; kty: string }>();
  private fetchedAt = -Infinity;
  private loading: Promise<void> | undefined;

  constructor(issuer: string, options: JwtVerifierOptions) {
    this.issuer = issuer;
    this.audiences = Array.isArray(options.audience) ? [...options.audience] : [options.audience];
    if (this.audiences.length === 0 || this.audiences.some((a) => !a)) {
      throw new Error("JwtVerifier needs the audience this server's tokens carry (its MCP URL, usually)");
    }
    const asked = options.algorithms ?? Object.keys(ALGORITHMS);
    const unknown = asked.filter((name) => !(name in ALGORITHMS));
    if (unknown.length > 0) throw new Error(`JwtVerifier accepts only ${Object.keys(ALGORITHMS).join(", ")}: not ${unknown.join(", ")}`);
    this.algorithms = asked;
    this.leewaySeconds = options.leewaySeconds ?? 30;
    this.cacheMs = (options.cacheSeconds ?? 300) * 1000;
    this.jwksUrl = options.jwksUrl;
  }

  /** The SDK's `AuthInfo` for a valid token; an `OAuthError` (`invalid_token`) otherwise. */
  async verifyAccessToken(token: string): Promise<AuthInfo> {
    const claims = await this.verify(token);
    if (typeof claims === "string") throw await invalidToken(claims);
    const audience = [claims["aud"]].flat().find((value) => this.audiences.includes(String(value))) as string;
    const scope = claims["scope"];
    const clientId = claims["client_id"] ?? claims["azp"] ?? audience;
    const info: AuthInfo = {
      token,
      clientId: String(clientId),
      scopes: typeof scope === "string" ? scope.split(" ").filter(Boolean) : [],
      expiresAt: Number(claims["exp"]),
      extra: { iss: claims["iss"], sub: claims["sub"], claims },
    };
    if (URL.canParse(audience)) info.resource = new URL(audience);
    return info;
  }

  /** The token's claims, or why it is refused (never the token itself: it stays out of logs). */
  async verify(token: string): Promise<Record<string, unknown> | string> {
    const parts = token.split(".");
    if (parts.length !== 3) return "not a JWT";
    const [head, body, signature] = parts as [string, string, string];
    let header: Record<string, unknown>;
    let claims: Record<string, unknown>;
    try {
      header = JSON.parse(Buffer.from(head, "base64url").toString()) as Record<string, unknown>;
      claims = JSON.parse(Buffer.from(body, "base64url").toString()) as Record<string, unknown>;
    } catch {
      return "not a JWT";
    }
    if (typeof header !== "object" || header === null || typeof claims !== "object" || claims === null) return "not a JWT";
    const alg = String(header["alg"]);
    const algorithm = ALGORITHMS[alg];
    if (!algorithm || !this.algorithms.includes(alg)) return `algorithm ${alg} is not accepted`;
    const found = await this.key(String(header["kid"] ?? ""));
    if (!found || found.kty !== algorithm.kty) return "signed with a key the issuer does not publish";
    const signed = Buffer.from(`${head}.${body}`);
    const valid = verify(algorithm.digest, signed, { key: found.key, ...algorithm.options }, Buffer.from(signature, "base64url"));
    if (!valid) return "bad signature";
    const now = Date.now() / 1000;
    if (claims["iss"] !== this.issuer) return "issued by another issuer";
    if (![claims["aud"]].flat().some((value) => this.audiences.includes(String(value)))) return "issued for another audience";
    if (typeof claims["exp"] !== "number" || claims["exp"] + this.leewaySeconds < now) return "expired";
    if (typeof claims["nbf"] === "number" && claims["nbf"] - this.leewaySeconds > now) return "not valid yet";
    if (typeof claims["sub"] !== "string" || !claims["sub"]) return "names no subject";
    return claims;
  }

  private async key(kid: string): Promise<{ key: KeyObject; kty: string } | undefined> {
    const age = Date.now() - this.fetchedAt;
    if (age > this.cacheMs || (!this.keys.has(kid) && age > REFRESH_MIN_MS)) await this.load();
    return this.keys.get(kid);
  }

  private async load(): Promise<void> {
    // One fetch at a time; a failed one counts too, so an issuer that is down is not hammered.
    this.loading ??= (async () => {
      this.fetchedAt = Date.now();
      try {
        this.jwksUrl ??= await this.discoverJwks();
        const answer = await fetch(this.jwksUrl, { redirect: "error", signal: AbortSignal.timeout(10_000) });
        if (!answer.ok) throw new Error(`the JWKS answered ${answer.status}`);
        const document = (await answer.json()) as { keys?: unknown };
        if (!Array.isArray(document.keys)) throw new Error("the JWKS document has no list of keys");
        const keys = new Map<string, { key: KeyObject; kty: string }>();
        for (const jwk of document.keys as (JsonWebKey & { kid?: string; use?: string })[]) {
          if ((jwk.use ?? "sig") !== "sig" || typeof jwk.kty !== "string") continue;
          try {
            keys.set(String(jwk.kid ?? ""), { key: createPublicKey({ key: jwk, format: "jwk" }), kty: jwk.kty });
          } catch {
            continue; // a key type node:crypto cannot use; the others still work
          }
        }
        this.keys = keys;
      } catch (error) {
        console.warn(`JwtVerifier: the keys of ${this.issuer} were not fetched (${(error as Error).message}); the known ones stay`);
      } finally {
        this.loading = undefined;
      }
    })();
    await this.loading;
  }

  private async discoverJwks(): Promise<string> {
    const url = `${this.issuer.replace(/\/$/, "")}/.well-known/openid-configuration`;
    const answer = await fetch(url, { redirect: "error", signal: AbortSignal.timeout(10_000) });
    if (!answer.ok) throw new Error(`${url} answered ${answer.status}`);
    const meta = (await answer.json()) as { jwks_uri?: unknown };
    if (typeof meta.jwks_uri !== "string") throw new Error("the discovery document names no jwks_uri");
    return meta.jwks_uri;
  }
}
