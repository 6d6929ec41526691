"""Admin request bodies read as strictly as their schema says.

Litestar converts a decoded body into its struct with ``strict=False``, which takes ``0``, ``1``,
``"true"`` or ``"0"`` for a boolean. A flag such as ``allow_unproven`` or ``enabled`` changes what
the service allows, so an operator's script that sends ``"false"`` must hear that it is not a
boolean rather than have it read one way or the other: this hook refuses any body whose boolean
field holds anything but ``true``, ``false`` (or ``null`` where the field takes it).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec
from litestar import Request
from litestar.exceptions import SerializationException, ValidationException


@cache
def _boolean_fields(annotation: Any) -> frozenset[str]:
    """The top-level fields of a body struct that hold a boolean (possibly optional or unset)."""
    if not (isinstance(annotation, type) and issubclass(annotation, msgspec.Struct)):
        return frozenset()
    info = msgspec.inspect.type_info(annotation)
    assert isinstance(info, msgspec.inspect.StructType)
    return frozenset(field.encode_name for field in info.fields if _holds_bool(field.type))


def _holds_bool(kind: msgspec.inspect.Type) -> bool:
    if isinstance(kind, msgspec.inspect.BoolType):
        return True
    if isinstance(kind, msgspec.inspect.UnionType):
        return any(isinstance(member, msgspec.inspect.BoolType) for member in kind.types)
    return False


async def strict_booleans(request: Request[Any, Any, Any]) -> None:
    """``before_request`` of the admin router: 400 ``invalid_request`` naming the field."""
    data = request.route_handler.parsed_fn_signature.parameters.get("data")
    if data is None:
        return
    fields = _boolean_fields(data.annotation)
    if not fields:
        return
    try:
        body = await request.json()
    except SerializationException:
        return  # not JSON: Litestar's own reading of the body refuses it, as on any other route
    if not isinstance(body, dict):
        return  # not an object: Litestar's own validation refuses it
    for name in sorted(fields):
        value = body.get(name)
        if value is not None and not isinstance(value, bool):
            raise ValidationException(
                detail="Validation failed",
                extra=[{"message": f"Expected `bool`, got `{type(value).__name__}`", "key": name, "source": "body"}],
            )
