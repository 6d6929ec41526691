"""``elicitd admin brands show|set|clear OWNER``: the CLI side of ``api_brands``.

``OWNER`` is a server client (name or ``sc_…`` id), or with ``--trust-group`` a trust group (name
or ``tg_…`` id). ``set`` replaces the whole brand, like the API's ``PUT``; ``--logo FILE`` reads a
PNG or WebP file, which elicitd re-encodes. Same functions as the API, same audit rows (actor
``cli``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from service.branding import store
from service.branding.images import MAX_BYTES
from service.db.unit import unit_of_work
from service.errors import InvalidRequest

Leaf = Callable[..., Any]
Command = Callable[..., Callable[[argparse.Namespace], None]]

_COLUMNS = ["owner", "accent", "accent_dark", "logo_url", "support_url", "tagline"]


def _read_logo(path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        with Path(path).open("rb") as handle:
            return handle.read(MAX_BYTES + 1)
    except OSError:
        raise InvalidRequest(f"cannot read the logo file {path}") from None


def _brands(op: str) -> Callable[[Any, argparse.Namespace], Any]:
    async def run(state: Any, args: argparse.Namespace) -> Any:
        where = {"trust_group": args.target} if args.trust_group else {"server_client": args.target}
        data = None
        if op == "set":
            data = store.BrandInput(
                accent=args.accent,
                accent_dark=args.accent_dark,
                logo=_read_logo(args.logo),
                support_url=args.support_url,
                tagline=args.tagline,
            )
        async with unit_of_work(state.sessions) as session:
            owner = await store.owner_of(session, **where)
            if data is not None:
                return await store.set_brand(session, owner, data)
            if op == "clear":
                return await store.clear_brand(session, owner)
            return await store.show_brand(session, owner)

    return run


def register_brands(groups: Any, leaf: Leaf, command: Command) -> None:
    brands = groups.add_parser("brands", help="how the pages look for a server client or a trust group").add_subparsers(
        dest="admin_cmd", required=True
    )
    for name, operation, columns in (
        ("show", "adminGetBrand", None),
        ("set", "adminSetBrand", _COLUMNS),
        ("clear", "adminClearBrand", ["owner", "cleared"]),
    ):
        parser = leaf(brands, name, operation, command(_brands(name), columns), target="OWNER")
        parser.add_argument("--trust-group", action="store_true", help="OWNER is a trust group, not a server client")
        if name == "set":
            parser.add_argument("--accent", help="#rrggbb for the light colour scheme (4.5:1 or more, checked)")
            parser.add_argument("--accent-dark", help="#rrggbb for the dark colour scheme (checked the same way)")
            parser.add_argument("--logo", metavar="FILE", help="a PNG or WebP file; elicitd serves its own re-encoding")
            parser.add_argument("--support-url", help="https link people may follow for help")
            parser.add_argument("--tagline", help="one short line of text shown with the logo")
