"""Checking an entered API key and storing it as a connection.

The key is validated locally first (length, allowed characters) so that obviously wrong input
never leaves elicitd, then optionally by one request to the provider made *with* the key, and
only then sealed into the vault as the connection's access token — so the token endpoint serves
it exactly like an OAuth token. It travels only in the POST body that brought it and in the
provider check's header: never in a URL, a log line, an event, a flow result or an error page.
"""

from __future__ import annotations

import asyncio
import base64
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote

import httpx

from service.apikeys.providers import ApiKeyConfig, ApiKeyProvider, LiveCheck, get_api_key_provider
from service.connections import repository as conn_repo
from service.connections.schemas import result_of
from service.connections.sealing import TokenSeal
from service.crypto.vault import Vault
from service.flows.models import Flow
from service.flows.repository import Transition
from service.flows.service import FlowService
from service.flows.states import Actor, FlowStatus
from service.grants.service import grant_for_flow
from service.i18n import _

# Sent in an HTTP header and typed by people: printable ASCII without spaces, whatever the pattern says.
_PRINTABLE = re.compile(r"[\x21-\x7e]+")
_FIELD_TEXT = re.compile(r"[^\x00-\x1f\x7f]*")
_PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*)\}")


class EntryRejected(Exception):
    """The entry cannot be stored; ``message`` is shown on the form (it never contains the input)."""

    def __init__(self, message: str, *, field: str = "secret", reason: str = "invalid") -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.reason = reason


class _NotPending(Exception):
    pass


def validate_entry(
    config: ApiKeyConfig, secret: str | None, values: dict[str, str | None]
) -> tuple[str, dict[str, str]]:
    """The cleaned key and extra fields, or ``EntryRejected`` naming the first problem."""
    key = (secret or "").strip()
    if not key:
        raise EntryRejected(_("Enter your %(label)s.", label=_(config.key_label)), reason="missing")
    if len(key) > config.max_length:
        raise EntryRejected(
            _(
                "That is too long: the %(label)s has at most %(count)s characters.",
                label=_(config.key_label),
                count=config.max_length,
            ),
            reason="too_long",
        )
    if len(key) < config.min_length:
        raise EntryRejected(
            _(
                "That is too short: the %(label)s has at least %(count)s characters.",
                label=_(config.key_label),
                count=config.min_length,
            ),
            reason="too_short",
        )
    if not _PRINTABLE.fullmatch(key) or not re.fullmatch(config.pattern, key):
        raise EntryRejected(
            _(
                "That does not look like the %(label)s: it contains characters such keys never contain. "
                "Copy it again from the provider.",
                label=_(config.key_label),
            ),
            reason="bad_characters",
        )
    fields: dict[str, str] = {}
    for spec in config.fields:
        value = (values.get(spec.name) or "").strip()
        if not value:
            if spec.required:
                raise EntryRejected(
                    _("%(label)s is required.", label=_(spec.label)), field=spec.name, reason="missing_field"
                )
            continue
        if len(value) > spec.max_length or not _FIELD_TEXT.fullmatch(value):
            raise EntryRejected(_("%(label)s is not valid.", label=_(spec.label)), field=spec.name, reason="bad_field")
        if spec.choices is not None and value not in spec.choices:
            raise EntryRejected(
                _("Choose one of the listed values for %(label)s.", label=_(spec.label)),
                field=spec.name,
                reason="bad_field",
            )
        if spec.pattern is not None and not re.fullmatch(spec.pattern, value):
            raise EntryRejected(_("%(label)s is not valid.", label=_(spec.label)), field=spec.name, reason="bad_field")
        fields[spec.name] = value
    return key, fields


def _check_request(check: LiveCheck, key: str, fields: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The check's URL (the fields quoted into it) and headers (the key in exactly one of them)."""
    url = _PLACEHOLDER.sub(lambda m: quote(fields.get(m.group(1), ""), safe=""), check.url)
    headers = dict(check.headers)
    if check.auth == "bearer":
        headers["Authorization"] = f"Bearer {key}"
    elif check.auth == "basic":
        user, password = (
            (fields.get(check.basic_username_field, ""), key)
            if check.basic_username_field is not None
            else (key, check.basic_password)
        )
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    else:
        assert check.header is not None
        headers[check.header] = check.prefix + key
    return url, headers


@dataclass(frozen=True, slots=True)
class ApiKeyForm:
    """The form: the provider's fields and who asks; after a rejected entry, why, and the
    non-secret values to fill in again (never the key)."""

    provider: ApiKeyProvider
    client: str
    error: EntryRejected | None = None
    values: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ApiKeyStored:
    provider: ApiKeyProvider
    client: str


@dataclass(frozen=True, slots=True)
class ApiKeyNotTaken:
    """The flow was no longer pending, so the key was not stored; ``current`` is what it is now."""

    current: Flow | None


class ApiKeyService:
    def __init__(
        self,
        flows: FlowService,
        vault: Vault,
        *,
        http: httpx.AsyncClient,
        announce: Callable[[list[uuid.UUID]], Awaitable[None]] | None = None,
    ) -> None:
        self.flows = flows
        self.vault = vault
        self.seal = TokenSeal(vault)
        # The process's shared client: no client (and TLS context) is built per check.
        self.http = http
        # Wakes the streams of the server clients a stored key told (``connection.recovered``).
        self.announce = announce

    async def live_check(self, provider: ApiKeyProvider, key: str, fields: dict[str, str]) -> None:
        check = provider.config.check
        if check is None:
            return
        url, headers = _check_request(check, key, fields)
        try:
            async with asyncio.timeout(check.timeout_seconds):
                response = await self.http.request(check.method, url, headers=headers, timeout=check.timeout_seconds)
        except (httpx.HTTPError, TimeoutError):
            raise EntryRejected(
                _(
                    "%(provider)s could not be reached to check the key. Try again in a moment.",
                    provider=provider.display_name,
                ),
                reason="check_unavailable",
            ) from None
        if 200 <= response.status_code < 300:
            return
        if response.status_code in {401, 403}:
            raise EntryRejected(
                _(
                    "%(provider)s did not accept this %(label)s. Check that you copied all of it and that it "
                    "is still active.",
                    provider=provider.display_name,
                    label=provider.config.key_label,
                ),
                reason="check_refused",
            )
        raise EntryRejected(
            _(
                "%(provider)s could not check the key right now. Try again in a moment.",
                provider=provider.display_name,
            ),
            reason="check_unavailable",
        )

    async def store(self, flow: Flow, provider: ApiKeyProvider, key: str, fields: dict[str, str]) -> Flow | None:
        """Seal the key as the connection's token and complete the flow, in one transaction.

        The flow's transition is made before the key is written: if the flow is no longer pending
        the whole unit of work is abandoned, so a key never lands for a flow that did not take it.
        """
        account_field = provider.config.account_field
        account_id = fields.get(account_field, "") if account_field else ""
        try:
            async with self.flows.unit_of_work() as uow:
                connection_id = await conn_repo.claim_slot(
                    uow.session,
                    iss=flow.subject_iss,
                    sub=flow.subject_sub,
                    provider=provider.name,
                    account_id=account_id,
                    connected_by=flow.server_client_id,
                )
                result = result_of(connection_id, provider.name, account_id, fields=fields)
                change = Transition(
                    FlowStatus.COMPLETED,
                    Actor.BROWSER,
                    result=result,
                    connection_id=connection_id,
                    detail={"provider": provider.name},
                )
                changed = await uow.transition(flow.id, change)
                if changed is None:
                    raise _NotPending
                key_id, sealed = self.seal.seal_api_key(
                    connection_id,
                    key,
                    iss=flow.subject_iss,
                    sub=flow.subject_sub,
                    provider=provider.name,
                    account_id=account_id,
                )
                moved = await conn_repo.store_api_key(
                    uow.session, connection_id, key_id=key_id, sealed=sealed, fields=fields
                )
                # The client whose form this was may use the key; no other client may without a grant.
                await grant_for_flow(
                    uow.session, flow, vault=self.vault, connection_id=connection_id, authorization_id=None, scopes=[]
                )
        except _NotPending:
            return None
        if moved.told and self.announce is not None:
            await self.announce(moved.told)
        return changed

    # ---- the page ----------------------------------------------------------------------------------
    async def provider_for(self, flow: Flow) -> ApiKeyProvider | None:
        """The flow's provider while it is still set up and enabled here."""
        async with self.flows.read_sessions() as session:
            found = await get_api_key_provider(session, flow.provider or "")
        return found if found is not None and found.enabled else None

    async def form(self, flow: Flow) -> ApiKeyForm | None:
        """What the form shows; None when the provider is no longer set up here."""
        provider = await self.provider_for(flow)
        if provider is None:
            return None
        display_name, _asker_id = await self.flows.asker(flow.server_client_id)
        return ApiKeyForm(provider=provider, client=display_name)

    async def submit(self, flow: Flow, form: Mapping[str, str]) -> ApiKeyForm | ApiKeyStored | ApiKeyNotTaken | None:
        """The form's POST (the caller has made every browser check): check the entry, then store it.

        A rejected entry is recorded (its reason only) and comes back as the form again, with the
        non-secret fields filled in; None when the provider is no longer set up here."""
        provider = await self.provider_for(flow)
        if provider is None:
            return None
        values = {f.name: form.get(f"field_{f.name}") for f in provider.config.fields}
        try:
            key, fields = validate_entry(provider.config, form.get("secret"), values)
            await self.live_check(provider, key, fields)
        except EntryRejected as rejected:
            async with self.flows.unit_of_work() as uow:
                await uow.event(flow.id, "api_key_rejected", Actor.BROWSER, {"reason": rejected.reason})
            display_name, _asker_id = await self.flows.asker(flow.server_client_id)
            kept = {k: v for k, v in values.items() if v is not None}
            return ApiKeyForm(provider=provider, client=display_name, error=rejected, values=kept)
        if await self.store(flow, provider, key, fields) is None:
            return ApiKeyNotTaken(current=await self.flows.read(flow.id))
        display_name, _asker_id = await self.flows.asker(flow.server_client_id)
        return ApiKeyStored(provider=provider, client=display_name)
