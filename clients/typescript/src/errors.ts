/**
 * Errors of the elicitd client: one class per stable problem+json `code` a caller acts on.
 *
 * elicitd answers every API error as RFC 9457 problem+json whose `code` never changes meaning;
 * callers switch on the class (or on `.code` for codes this library does not know yet).
 */

export type Problem = Record<string, unknown>;

export class ElicitdError extends Error {
  /** The problem's stable code (`not_connected`, `rate_limited`, …). */
  readonly code: string;
  /** The HTTP status, 0 when no answer came. */
  readonly status: number;
  /** The whole problem+json body. */
  readonly problem: Problem;

  constructor(detail: string, options: { code?: string; status?: number; problem?: Problem } = {}) {
    super(detail);
    this.name = new.target.name;
    this.code = options.code ?? "error";
    this.status = options.status ?? 0;
    this.problem = options.problem ?? {};
  }
}

/** elicitd could not be reached, or kept answering a 5xx that may pass, after every retry. */
export class ElicitdUnavailable extends ElicitdError {}
/** A 5xx another attempt would not change (`payments_unavailable`, `internal_error`). */
export class ServerError extends ElicitdError {}
/** The API key is missing, wrong or revoked. */
export class Unauthenticated extends ElicitdError {}
/** Not allowed for this server client (`provider_not_allowed`, `issuer_not_trusted`, …). */
export class Forbidden extends ElicitdError {}
/** Unknown, or belongs to another server client. */
export class NotFound extends ElicitdError {}
/** The subject has no connection to the provider: start an `oauth_connect` flow. */
export class NotConnected extends NotFound {}
/** A conflict: the flow is no longer pending, or the connection needs authorizing again. */
export class Conflict extends ElicitdError {}
export class FlowNotPending extends Conflict {}
export class ReauthorizationRequired extends Conflict {}
export class InsufficientScope extends Conflict {}
/** The request was not valid. */
export class InvalidRequest extends ElicitdError {}
/** A `requestState` elicitd did not mint, minted for someone else, or expired. */
export class InvalidRequestState extends InvalidRequest {}
/** Over a rate limit; `retryAfter` seconds when elicitd said. */
export class RateLimited extends ElicitdError {
  retryAfter: number | undefined;
}
/** The event stream cannot resume there: the events after that position are past retention. */
export class EventsExpired extends ElicitdError {}
/** An OAuth error answer of `POST /oauth/token` (RFC 6749 §5.2). */
export class TokenExchangeError extends ElicitdError {}

const BY_CODE: Record<string, typeof ElicitdError> = {
  not_connected: NotConnected,
  flow_not_pending: FlowNotPending,
  reauthorization_required: ReauthorizationRequired,
  insufficient_scope: InsufficientScope,
  invalid_request_state: InvalidRequestState,
  request_state_expired: InvalidRequestState,
  events_expired: EventsExpired,
  rate_limited: RateLimited,
};

const BY_STATUS: Record<number, typeof ElicitdError> = {
  400: InvalidRequest,
  401: Unauthenticated,
  403: Forbidden,
  404: NotFound,
  409: Conflict,
  410: EventsExpired,
  429: RateLimited,
};

/** The most specific error for a problem+json answer (unknown codes keep their code). */
export function errorFromProblem(status: number, problem: Problem): ElicitdError {
  const code = typeof problem["code"] === "string" && problem["code"] ? problem["code"] : undefined;
  const byStatus = BY_STATUS[status] ?? (status >= 500 ? ServerError : ElicitdError);
  const Kind = (code !== undefined ? BY_CODE[code] : undefined) ?? byStatus;
  const detail = String(problem["detail"] ?? problem["title"] ?? `elicitd answered HTTP ${status}`);
  return new Kind(detail, { code: code ?? "error", status, problem });
}
