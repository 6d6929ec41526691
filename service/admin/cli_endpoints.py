"""``elicitd admin webhooks endpoints|add-endpoint|… `` and ``attempts``: the CLI side of
``api_endpoints``, the same functions and the same audit rows (actor ``cli``). A new or rotated
secret is printed once."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from service.db.unit import unit_of_work

Leaf = Callable[..., Any]
Command = Callable[..., Callable[[argparse.Namespace], None]]

ENDPOINT_COLUMNS = ["id", "url", "events", "state", "legacy", "verified_at", "failing_since", "previous_secret_until"]
ATTEMPT_COLUMNS = ["id", "at", "event_type", "delivery_id", "attempt", "status", "duration_ms", "error"]


def _run(op: str) -> Callable[[Any, argparse.Namespace], Any]:
    async def run(state: Any, args: argparse.Namespace) -> Any:  # noqa: PLR0911 - one branch per subcommand
        from service.admin import endpoints

        async with unit_of_work(state.sessions) as session:
            if op == "endpoints":
                return await endpoints.list_endpoints(session, args.target)
            if op == "add-endpoint":
                created = endpoints.CreateEndpoint(url=args.url, events=args.event or None)
                return await endpoints.create(session, state.vault, args.target, created)
            if op == "update-endpoint":
                changes: dict[str, Any] = {}
                if args.url is not None:
                    changes["url"] = args.url
                if args.all_events:
                    changes["events"] = None
                elif args.event:
                    changes["events"] = args.event
                return await endpoints.update(session, args.target, endpoints.UpdateEndpoint(**changes))
            if op == "rotate-endpoint-secret":
                rotation = endpoints.RotateEndpointSecret(grace_seconds=args.grace_seconds)
                grace = state.webhooks.settings.rotation_grace_seconds
                return await endpoints.rotate_secret(session, state.vault, args.target, rotation, grace)
            if op == "enable-endpoint":
                return await endpoints.enable(session, args.target)
            if op == "disable-endpoint":
                return await endpoints.disable(session, args.target)
            if op == "delete-endpoint":
                await endpoints.delete(session, args.target)
                return {"id": args.target, "deleted": True}
            return await endpoints.list_attempts(session, args.target, cursor=args.cursor, limit=args.limit)

    return run


def _items(result: Any) -> Any:
    return result["items"]


def _endpoint(result: Any) -> Any:
    return result.get("endpoint", result)


def _secret_once(result: Any) -> None:
    if result.get("secret"):
        print(f"Webhook endpoint signing secret (shown once, store it now): {result['secret']}")


def register_endpoints(hooks: Any, leaf: Leaf, command: Command) -> None:
    """Under ``elicitd admin webhooks``."""
    leaf(
        hooks,
        "endpoints",
        "adminListWebhookEndpoints",
        command(_run("endpoints"), ENDPOINT_COLUMNS, rows=_items),
        target="CLIENT",
    )
    add = leaf(
        hooks,
        "add-endpoint",
        "adminCreateWebhookEndpoint",
        command(_run("add-endpoint"), ENDPOINT_COLUMNS, rows=_endpoint, after=_secret_once),
        target="CLIENT",
    )
    add.add_argument("url")
    add.add_argument("--event", action="append", help="an event type it receives (repeat); default: every type")
    change = leaf(
        hooks,
        "update-endpoint",
        "adminUpdateWebhookEndpoint",
        command(_run("update-endpoint"), ENDPOINT_COLUMNS),
        target="ENDPOINT",
    )
    change.add_argument("--url", help="a new URL (verified again before it receives events)")
    change.add_argument("--event", action="append", help="the event types it receives (repeat)")
    change.add_argument("--all-events", action="store_true", help="receive every event type")
    rotate = leaf(
        hooks,
        "rotate-endpoint-secret",
        "adminRotateWebhookEndpointSecret",
        command(_run("rotate-endpoint-secret"), ENDPOINT_COLUMNS, rows=_endpoint, after=_secret_once),
        target="ENDPOINT",
    )
    rotate.add_argument("--grace-seconds", type=int, help="how long the previous secret still signs")
    for name, operation in (
        ("enable-endpoint", "adminEnableWebhookEndpoint"),
        ("disable-endpoint", "adminDisableWebhookEndpoint"),
    ):
        leaf(hooks, name, operation, command(_run(name), ENDPOINT_COLUMNS), target="ENDPOINT")
    leaf(
        hooks,
        "delete-endpoint",
        "adminDeleteWebhookEndpoint",
        command(_run("delete-endpoint"), ["id", "deleted"]),
        target="ENDPOINT",
    )
    leaf(
        hooks,
        "attempts",
        "adminListWebhookAttempts",
        command(_run("attempts"), ATTEMPT_COLUMNS, rows=_items),
        target="ENDPOINT",
        paged=True,
    )
