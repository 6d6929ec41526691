"""Setting, clearing and reading brands: the operations behind the admin API, the CLI and the
config file, and the lookups the pages and the asset routes make.

A brand belongs to one server client or to one trust group. The page of a client shows the
client's own brand when it has one, otherwise its group's: the whole brand, never a mix of the two
(a logo of one party beside the support link of another would say something nobody chose).

Setting replaces the whole brand in one statement (an upsert on the owner), so two operators
setting a brand at once leave one of the two brands, whole; clearing is one ``DELETE``. Every field
is checked before the statement, and every check runs, so one answer names every problem of the
first field that has one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, or_, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from service.branding.colours import normalise, shortfalls, stylesheet
from service.branding.images import reencode
from service.branding.models import Brand
from service.db.base import CLIENT_ID, uuid7
from service.domains import display_url_host
from service.errors import InvalidRequest, NotFound
from service.grants.models import GROUP_ID, TrustGroup, TrustGroupMember
from service.identity.models import ServerClient
from service.text import display_text_problem
from service.urls import url_problem

MAX_TAGLINE = 120
LOGO_ROUTE = "/brand/logo/"
STYLE_ROUTE = "/brand/style/"


class BrandNotFound(NotFound):
    code = "brand_not_found"
    title = "No brand"


class BrandOwnerNotFound(NotFound):
    code = "brand_owner_not_found"
    title = "No such server client or trust group"


class LowContrast(InvalidRequest):
    code = "brand_low_contrast"
    title = "Colour contrast too low"


class InvalidBrand(InvalidRequest):
    code = "invalid_brand"
    title = "Invalid brand"


@dataclass(frozen=True, slots=True)
class Owner:
    """A server client (``kind='server_client'``) or a trust group (``kind='trust_group'``)."""

    kind: str
    id: uuid.UUID

    @property
    def ref(self) -> str:
        return CLIENT_ID.format(self.id) if self.kind == "server_client" else GROUP_ID.format(self.id)


@dataclass(frozen=True, slots=True)
class BrandInput:
    """What an operator gives: the logo as the file's bytes, colours as ``#rrggbb``."""

    accent: str | None = None
    accent_dark: str | None = None
    logo: bytes | None = None
    support_url: str | None = None
    tagline: str | None = None


@dataclass(frozen=True, slots=True)
class ShownBrand:
    """What a page needs of a brand: URLs on elicitd's own origin and checked text."""

    logo_url: str | None
    logo_width: int | None
    logo_height: int | None
    style_url: str | None
    support_url: str | None
    support_host: str | None
    tagline: str | None


async def owner_of(session: AsyncSession, *, server_client: str | None = None, trust_group: str | None = None) -> Owner:
    """The owner a reference names: a server client by ``sc_…`` id or name, a trust group by
    ``tg_…`` id or name."""
    if (server_client is None) == (trust_group is None):
        raise InvalidBrand("Name exactly one owner: a server client or a trust group.")
    if server_client is not None:
        parsed = CLIENT_ID.parse(server_client)
        where = ServerClient.id == parsed if parsed is not None else ServerClient.name == server_client
        found = (await session.execute(select(ServerClient.id).where(where))).scalar_one_or_none()
        if found is None:
            raise BrandOwnerNotFound(
                "No server client with this name or id.", extra={"code": "server_client_not_found"}
            )
        return Owner("server_client", found)
    assert trust_group is not None
    parsed = GROUP_ID.parse(trust_group)
    where = TrustGroup.id == parsed if parsed is not None else TrustGroup.name == trust_group
    found = (await session.execute(select(TrustGroup.id).where(where))).scalar_one_or_none()
    if found is None:
        raise BrandOwnerNotFound("No trust group with this name or id.", extra={"code": "trust_group_not_found"})
    return Owner("trust_group", found)


def _colour(value: str | None, field: str, scheme: str) -> str | None:
    if value is None:
        return None
    colour = normalise(value)
    if colour is None:
        raise InvalidBrand(f"`{field}` must be a colour written #rrggbb.", extra={"code": "invalid_brand_colour"})
    failing = shortfalls(colour, scheme)
    if failing:
        raise LowContrast(
            f"`{field}` {colour} reads below 4.5:1 in the {scheme} colour scheme: "
            + "; ".join(f"{s.pair} is {s.ratio}:1" for s in failing)
            + ".",
            extra={
                "field": field,
                "shortfalls": [{"scheme": s.scheme, "pair": s.pair, "ratio": s.ratio} for s in failing],
            },
        )
    return colour


def check(data: BrandInput) -> dict[str, Any]:
    """The row's values for ``data``, or the first field's problem (400 with a stable code)."""
    if all(v is None for v in (data.accent, data.accent_dark, data.logo, data.support_url, data.tagline)):
        raise InvalidBrand("A brand sets at least one of accent, accent_dark, logo, support_url, tagline.")
    accent = _colour(data.accent, "accent", "light")
    accent_dark = _colour(data.accent_dark, "accent_dark", "dark")
    if data.support_url is not None and (problem := url_problem(data.support_url)) is not None:
        raise InvalidBrand(f"`support_url` is not usable: {problem}.", extra={"code": "invalid_support_url"})
    tagline = None if data.tagline is None else data.tagline.strip()
    if tagline is not None:
        problem = display_text_problem(tagline, "tagline")
        if problem is not None or not tagline or len(tagline) > MAX_TAGLINE:
            raise InvalidBrand(
                (problem or f"`tagline` must be 1 to {MAX_TAGLINE} characters") + ".",
                extra={"code": "invalid_brand_text"},
            )
    logo = None if data.logo is None else reencode(data.logo)
    css = stylesheet(accent, accent_dark)
    return {
        "accent": accent,
        "accent_dark": accent_dark,
        "style_sha256": None if css is None else hashlib.sha256(css.encode()).hexdigest(),
        "logo_png": None if logo is None else logo.png,
        "logo_sha256": None if logo is None else logo.sha256,
        "logo_width": None if logo is None else logo.width,
        "logo_height": None if logo is None else logo.height,
        "support_url": data.support_url,
        "tagline": tagline,
    }


def decode_logo(value: str | None) -> bytes | None:
    """The logo from the admin API's ``logo_base64`` (standard base64, padding required)."""
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidBrand("`logo_base64` is not base64.", extra={"code": "invalid_brand_logo"}) from None


async def set_brand(session: AsyncSession, owner: Owner, data: BrandInput) -> dict[str, Any]:
    values = check(data)
    column = Brand.server_client_id if owner.kind == "server_client" else Brand.trust_group_id
    statement = (
        insert(Brand)
        .values(id=uuid7(), **{column.key: owner.id}, **values)
        .on_conflict_do_update(index_elements=[column.key], set_={**values, "updated_at": func.now()})
        .returning(Brand)
    )
    row = (await session.execute(statement.execution_options(populate_existing=True))).scalars().one()
    return view(owner, row)


async def clear_brand(session: AsyncSession, owner: Owner) -> dict[str, Any]:
    column = Brand.server_client_id if owner.kind == "server_client" else Brand.trust_group_id
    done = (await session.execute(delete(Brand).where(column == owner.id).returning(Brand.id))).first()
    if done is None:
        raise BrandNotFound(f"{owner.ref} has no brand.")
    return {"owner": owner.ref, "owner_kind": owner.kind, "cleared": True}


async def show_brand(session: AsyncSession, owner: Owner) -> dict[str, Any]:
    column = Brand.server_client_id if owner.kind == "server_client" else Brand.trust_group_id
    row = (
        (await session.execute(select(Brand).where(column == owner.id).execution_options(populate_existing=True)))
        .scalars()
        .first()
    )
    if row is None:
        raise BrandNotFound(f"{owner.ref} has no brand.")
    return view(owner, row)


def view(owner: Owner, row: Brand) -> dict[str, Any]:
    """The admin view: what is set and where it is served (the logo's bytes are not repeated)."""
    return {
        "owner": owner.ref,
        "owner_kind": owner.kind,
        "accent": row.accent,
        "accent_dark": row.accent_dark,
        "style_url": None if row.style_sha256 is None else f"{STYLE_ROUTE}{row.style_sha256}.css",
        "logo_url": None if row.logo_sha256 is None else f"{LOGO_ROUTE}{row.logo_sha256}.png",
        "logo_width": row.logo_width,
        "logo_height": row.logo_height,
        "support_url": row.support_url,
        "tagline": row.tagline,
        "updated_at": row.updated_at,
    }


def shown(row: Brand) -> ShownBrand:
    return ShownBrand(
        logo_url=None if row.logo_sha256 is None else f"{LOGO_ROUTE}{row.logo_sha256}.png",
        logo_width=row.logo_width,
        logo_height=row.logo_height,
        style_url=None if row.style_sha256 is None else f"{STYLE_ROUTE}{row.style_sha256}.css",
        support_url=row.support_url,
        support_host=None if row.support_url is None else display_url_host(row.support_url),
        tagline=row.tagline,
    )


async def brand_for_client(session: AsyncSession, client_id: uuid.UUID) -> Brand | None:
    """The client's own brand, else its trust group's, else None: one indexed read."""
    group = select(TrustGroupMember.group_id).where(TrustGroupMember.server_client_id == client_id).scalar_subquery()
    statement = (
        select(Brand)
        .where(or_(Brand.server_client_id == client_id, Brand.trust_group_id == group))
        .order_by(Brand.server_client_id.is_(None))
        .limit(1)
    )
    return (await session.execute(statement)).scalars().first()


async def logo_png(session: AsyncSession, sha256: str) -> bytes | None:
    found = await session.execute(select(Brand.logo_png).where(Brand.logo_sha256 == sha256).limit(1))
    return found.scalar_one_or_none()


async def style_of(session: AsyncSession, sha256: str) -> str | None:
    row = (
        await session.execute(select(Brand.accent, Brand.accent_dark).where(Brand.style_sha256 == sha256).limit(1))
    ).first()
    return None if row is None else stylesheet(row.accent, row.accent_dark)
