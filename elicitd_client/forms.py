"""Form-mode elicitation done to the specification: the schema subset, secrets kept out, and the
answer checked before a tool sees it.

    class Shipping(BaseModel):
        street: str = Field(min_length=3, max_length=200)
        express: bool = False

    SHIPPING = form(Shipping, message="Where should we send it?")   # checked here, at import

    @mcp.tool()
    async def order(ctx: Context) -> str:
        answer = await elicitd.require_input(ctx, SHIPPING)          # or require_input(ctx, Shipping)
        if isinstance(answer, InputAccepted):
            ...  # answer.data is a Shipping

The specification restricts ``requestedSchema`` to a flat object of primitives: strings (with
``minLength``, ``maxLength``, ``format`` = email, uri, date or date-time), numbers and integers
(``minimum``, ``maximum``), booleans, single-select enums (``enum``, or ``oneOf`` of
``const``/``title``) and multi-select arrays (``items.enum`` or ``items.anyOf`` of
``const``/``title``, with ``minItems``/``maxItems``), each with ``title``, ``description`` and a
``default``. ``form`` refuses anything else when the form is defined, with the field and the reason.

Form mode must never collect passwords, API keys, tokens or payment data (the specification says
so; the MCP client and its model see every field). A field whose name, title, description, format
or option titles look like one of those is refused with ``SecretField``, which names the URL-mode
helpers instead. The words are read after folding what would disguise them: NFKC (full-width and
other compatibility forms), accents, invisible format characters, and the Cyrillic and Greek
letters that look like Latin ones (a small explicit table, ``_CONFUSABLES``), so "Password" spelt
with a Cyrillic "a" (U+0430) is a password. The TypeScript helper applies the same rule; both are
tested against one list of cases (``tests/client/secret_fields.json``).

What comes back is checked against the same schema (types, bounds, formats, enum membership,
required fields) and, for a model, validated by it; an answer that fails is asked again with the
reasons in the message (see ``Elicitd.require_input``).
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

_COMMON = {"type", "title", "description", "default"}
_ALLOWED = {
    "string": _COMMON | {"minLength", "maxLength", "format"},
    "number": _COMMON | {"minimum", "maximum"},
    "integer": _COMMON | {"minimum", "maximum"},
    "boolean": _COMMON,
    "single": _COMMON | {"enum", "enumNames", "oneOf"},
    "multi": _COMMON | {"items", "minItems", "maxItems"},
}
FORMATS = ("email", "uri", "date", "date-time")

# Words (or up to three adjacent words run together) of a field's texts that mean a secret. A
# password hint counts as a password: hints are often the password itself.
_SECRET_WORDS = {
    "password": "a password",
    "passwd": "a password",
    "pwd": "a password",
    "pw": "a password",
    "passphrase": "a password",
    "passcode": "a password",
    "secret": "a secret",
    "token": "a token",
    "key": "a key",
    "keys": "a key",
    "apikey": "an API key",
    "apikeys": "an API key",
    "accesskey": "an access key",
    "privatekey": "a private key",
    "sshkey": "an SSH key",
    "credential": "a credential",
    "credentials": "a credential",
    "cardnumber": "a card number",
    "cardno": "a card number",
    "card#": "a card number",
    "cc#": "a card number",
    "creditcard": "a card number",
    "debitcard": "a card number",
    "ccnumber": "a card number",
    "pan": "a card number",
    "cvc": "a card security code",
    "cvv": "a card security code",
    "cvv2": "a card security code",
    "cvc2": "a card security code",
    "securitycode": "a card security code",
    "iban": "a bank account number",
    "accountnumber": "a bank account number",
    "routingnumber": "a bank account number",
    "ssn": "a social security number",
    "socialsecurity": "a social security number",
    "socialsecuritynumber": "a social security number",
    "pin": "a PIN",
    "otp": "a one-time code",
    "totp": "a one-time code",
    "hotp": "a one-time code",
    "2fa": "a one-time code",
    "mfa": "a one-time code",
    "onetimecode": "a one-time code",
    "onetimepassword": "a one-time code",
    "verificationcode": "a one-time code",
    "authcode": "a one-time code",
    "recoverycode": "a recovery code",
    "backupcode": "a recovery code",
    "recoverycodes": "a recovery code",
    "backupcodes": "a recovery code",
    "seedphrase": "a wallet seed phrase",
    "recoveryphrase": "a wallet seed phrase",
    "mnemonic": "a wallet seed phrase",
}
# Phrases with a secret word in them that ask for nothing secret; matched first, longest first.
_ORDINARY_PHRASES = frozenset({"keysignature", "musicalkey", "sortkey", "keyinsight", "keyinsights"})
# Letters of other scripts that render like Latin ones, folded to those. Not Unicode's whole
# confusables table: the Cyrillic and Greek lookalikes of the letters the secret words use.
_CONFUSABLES = str.maketrans(
    "аеорсухіјѕԁһԛԝӏкАВЕКМНОРСТХУІЈЅԚԜαοριυνκτχΑΒΕΖΗΙΚΜΝΟΡΤΥΧ",
    "aeopcyxijsdhqwlkABEKMHOPCTXYIJSQWaopiuvktxABEZHIKMNOPTYX",
)


class FormSchemaError(TypeError):
    """The schema is not one the specification lets a server ask in form mode."""


class SecretField(FormSchemaError):
    """A field asks for what only URL mode may collect."""


# ---- results ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class InputAccepted(Generic[T]):
    """The user filled in the form; ``data`` passed every check (a model instance for a model)."""

    data: T
    action: Literal["accept"] = "accept"


@dataclass(frozen=True, slots=True)
class InputDeclined:
    """The user said no: offer an alternative or stop."""

    action: Literal["decline"] = "decline"


@dataclass(frozen=True, slots=True)
class InputCancelled:
    """The user dismissed the form without deciding: they may be asked again later."""

    action: Literal["cancel"] = "cancel"


InputResult = InputAccepted[T] | InputDeclined | InputCancelled


# ---- the form -----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Form(Generic[T]):
    """A checked ``requestedSchema`` and how to read an answer into ``T``."""

    schema: dict[str, Any]
    message: str
    model: type[BaseModel] | None = field(default=None, repr=False)

    @property
    def tag(self) -> str:
        """Tells this form's answers apart from another requirement's in the same tool call."""
        material = json.dumps([self.message, self.schema], sort_keys=True).encode()
        return hashlib.sha256(material).hexdigest()[:16]

    def read(self, content: Any) -> tuple[T | None, list[str]]:
        """The answer as ``T`` and no reasons, or None and the reasons it fails (for the user)."""
        values, reasons = check(self.schema, content)
        if reasons:
            return None, reasons
        if self.model is None:
            return values, []  # type: ignore[return-value]
        try:
            return self.model.model_validate(values), []  # type: ignore[return-value]
        except ValidationError as exc:
            return None, [_pydantic_reason(error) for error in exc.errors()]

    def asking(self, reasons: list[str] | None = None) -> str:
        """The message for an attempt: the form's own, plus why the last answer was refused."""
        if not reasons:
            return self.message
        return f"{self.message}\n\nPlease correct your answer: " + "; ".join(reasons) + "."


def form(source: type[M] | Mapping[str, Any], *, message: str | None = None) -> Form[Any]:
    """Build and check a form from a Pydantic model or a plain ``requestedSchema``. Raises
    ``FormSchemaError`` (or ``SecretField``) for anything the specification does not allow."""
    if isinstance(source, type) and issubclass(source, BaseModel):
        schema = _from_model(source)
        model: type[BaseModel] | None = source
        default_message = (source.__doc__ or "").strip() or f"Please fill in: {source.__name__}."
    elif isinstance(source, Mapping):
        schema = json.loads(json.dumps(dict(source)))
        model = None
        default_message = "Please fill in this form."
    else:
        raise FormSchemaError(f"A form is a Pydantic model class or a JSON schema, not {source!r}")
    validate_schema(schema)
    return Form(schema=schema, message=message or default_message, model=model)


_CACHE: dict[int, Form[Any]] = {}


def form_of(source: Form[Any] | type[BaseModel] | Mapping[str, Any], message: str | None = None) -> Form[Any]:
    """``source`` as a form (a model's form is built once per process)."""
    if isinstance(source, Form):
        return source if message is None else Form(schema=source.schema, message=message, model=source.model)
    if isinstance(source, type):
        built = _CACHE.get(id(source))
        if built is None:
            built = _CACHE[id(source)] = form(source)
        return built if message is None else Form(schema=built.schema, message=message, model=built.model)
    return form(source, message=message)


# ---- the schema subset ----------------------------------------------------------------------------------
def validate_schema(schema: Mapping[str, Any]) -> None:
    """Raise ``FormSchemaError`` unless ``schema`` is in the specification's form-mode subset."""
    extra = set(schema) - {"type", "properties", "required", "$schema"}
    if schema.get("type") != "object" or extra:
        detail = f" (it has {sorted(extra)})" if extra else ""
        raise FormSchemaError("A form schema is a flat object: type, properties and required only" + detail)
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        raise FormSchemaError("A form schema needs at least one property")
    required = schema.get("required", [])
    if not isinstance(required, list) or any(name not in properties for name in required):
        raise FormSchemaError("'required' must list properties of the form")
    for name, prop in properties.items():
        if not isinstance(prop, Mapping):
            raise FormSchemaError(f"Field {name!r}: not a schema")
        _refuse_secret(str(name), prop)
        _check_property(str(name), prop)


def _kind(prop: Mapping[str, Any]) -> str:
    kind = prop.get("type")
    if kind == "string" and ("enum" in prop or "oneOf" in prop):
        return "single"
    if kind == "array":
        return "multi"
    if kind in ("string", "number", "integer", "boolean"):
        return str(kind)
    raise FormSchemaError(f"type {kind!r} is not a form field (string, number, integer, boolean, enum, array)")


def _check_property(name: str, prop: Mapping[str, Any]) -> None:
    try:
        kind = _kind(prop)
        unknown = set(prop) - _ALLOWED[kind]
        if unknown:
            raise FormSchemaError(f"{', '.join(sorted(unknown))} not allowed on a {kind} field")
        for text_key in ("title", "description"):
            if text_key in prop and not isinstance(prop[text_key], str):
                raise FormSchemaError(f"{text_key} must be a string")
        _CHECKS[kind](prop)
        if "default" in prop:
            _, reasons = check({"type": "object", "properties": {name: prop}}, {name: prop["default"]})
            if reasons:
                raise FormSchemaError(f"the default does not fit: {reasons[0]}")
    except FormSchemaError as exc:
        raise FormSchemaError(f"Field {name!r}: {exc}") from None


def _counts(prop: Mapping[str, Any], *names: str) -> None:
    for name in names:
        if name in prop and not _count(prop[name]):
            raise FormSchemaError(f"{name} must be a non-negative integer")


def _check_string(prop: Mapping[str, Any]) -> None:
    _counts(prop, "minLength", "maxLength")
    if "format" in prop and prop["format"] not in FORMATS:
        raise FormSchemaError(f"format {prop['format']!r} is not one of {', '.join(FORMATS)}")


def _check_number(prop: Mapping[str, Any]) -> None:
    for bound in ("minimum", "maximum"):
        if bound in prop and not _number(prop[bound]):
            raise FormSchemaError(f"{bound} must be a number")


def _check_single(prop: Mapping[str, Any]) -> None:
    _options(prop, "enum", "oneOf")
    names = prop.get("enumNames")
    if "enumNames" in prop and ("enum" not in prop or not isinstance(names, list) or len(names) != len(prop["enum"])):
        raise FormSchemaError("enumNames must name each enum value")


def _check_multi(prop: Mapping[str, Any]) -> None:
    items = prop.get("items")
    if not isinstance(items, Mapping) or set(items) - {"type", "enum", "anyOf"}:
        raise FormSchemaError("items must be {type: string, enum: [...]} or {anyOf: [{const, title}]}")
    if "enum" in items and items.get("type") != "string":
        raise FormSchemaError("items with enum must be of type string")
    _options(items, "enum", "anyOf")
    _counts(prop, "minItems", "maxItems")


_CHECKS: dict[str, Callable[[Mapping[str, Any]], None]] = {
    "string": _check_string,
    "number": _check_number,
    "integer": _check_number,
    "boolean": lambda _prop: None,
    "single": _check_single,
    "multi": _check_multi,
}


def _options(prop: Mapping[str, Any], plain: str, titled: str) -> list[str]:
    if (plain in prop) == (titled in prop):
        raise FormSchemaError(f"give the options as {plain} or as {titled} (of const and title), one of them")
    if plain in prop:
        values = prop[plain]
        if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
            raise FormSchemaError(f"{plain} must be a non-empty list of strings")
        return list(values)
    entries = prop[titled]
    if not isinstance(entries, list) or not entries:
        raise FormSchemaError(f"{titled} must be a non-empty list")
    for entry in entries:
        if (
            not isinstance(entry, Mapping)
            or set(entry) != {"const", "title"}
            or not isinstance(entry["const"], str)
            or not isinstance(entry["title"], str)
        ):
            raise FormSchemaError(f"each {titled} entry is exactly {{const, title}}, both strings")
    return [str(entry["const"]) for entry in entries]


def _choices(prop: Mapping[str, Any]) -> list[str]:
    if "enum" in prop:
        return [str(v) for v in prop["enum"]]
    return [str(e["const"]) for e in prop.get("oneOf") or prop.get("anyOf") or []]


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fold(text: str) -> str:
    """``text`` as the words a reader sees: compatibility forms, lookalike letters, accents and
    invisible format characters folded away."""
    folded = unicodedata.normalize("NFKC", text).translate(_CONFUSABLES)
    return "".join(c for c in unicodedata.normalize("NFD", folded) if unicodedata.category(c) not in {"Mn", "Cf"})


def _words(text: str) -> list[str]:
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", _fold(text))
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", spaced).replace("#", " # ")
    return [w for w in re.split(r"[^a-z0-9#]+", spaced.lower()) if w]


def _secret_in(text: str) -> str | None:
    """What ``text`` names, read left to right, longest phrase first (so "sort key" is ordinary
    and "api key" an API key rather than a key)."""
    words = _words(text)
    start = 0
    while start < len(words):
        for size in (3, 2, 1):
            phrase = "".join(words[start : start + size])
            if start + size > len(words):
                continue
            if phrase in _ORDINARY_PHRASES:
                start += size
                break
            if phrase in _SECRET_WORDS:
                return _SECRET_WORDS[phrase]
        else:
            start += 1
    return None


def _texts(prop: Mapping[str, Any]) -> list[str]:
    """Every text of a field a person reads or a model sees: title, description, format, the
    titles of its options (``oneOf``, ``anyOf`` and ``items.anyOf``) and ``enumNames``."""
    texts = [str(prop.get(key) or "") for key in ("title", "description", "format")]
    items = prop.get("items")
    for source in (prop, items if isinstance(items, Mapping) else {}):
        for key in ("oneOf", "anyOf"):
            entries = source.get(key)
            if isinstance(entries, list):
                texts += [str(e.get("title") or "") for e in entries if isinstance(e, Mapping)]
    names = prop.get("enumNames")
    if isinstance(names, list):
        texts += [str(n) for n in names]
    return texts


def _refuse_secret(name: str, prop: Mapping[str, Any]) -> None:
    found = None
    for text in [name, *_texts(prop)]:
        found = found or _secret_in(text)
    if prop.get("writeOnly") is True or prop.get("format") == "password":
        found = found or "a password"
    if found:
        raise SecretField(
            f"Field {name!r} looks like {found}. Form mode must never collect passwords, API keys, tokens or "
            "payment data: the MCP client and its model see every answer. Ask for it in URL mode instead, "
            "where the user types it on elicitd's page: elicitd.require_api_key(ctx, provider=...) for a key "
            "the user types, elicitd.require_token(ctx, provider=...) for an account to connect, "
            "elicitd.require_payment(...) for a payment."
        )


# ---- Pydantic models ------------------------------------------------------------------------------------
def _from_model(model: type[BaseModel]) -> dict[str, Any]:
    generated = model.model_json_schema()
    defs = generated.get("$defs", {})
    properties: dict[str, Any] = {}
    for name, prop in generated.get("properties", {}).items():
        properties[name] = _flatten(str(name), prop, defs)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if generated.get("required"):
        schema["required"] = list(generated["required"])
    if set(generated) - {"type", "properties", "required", "title", "description", "$defs"}:
        raise FormSchemaError(f"{model.__name__}: only plain fields can be a form")
    return schema


def _flatten(name: str, prop: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """Pydantic's rendering of one field in the subset's terms: references (enums) inlined,
    ``X | None`` as an optional ``X``, a ``None`` default dropped, set-like arrays as arrays."""
    result = dict(prop)
    if "$ref" in result:
        target = defs.get(str(result.pop("$ref")).rsplit("/", 1)[-1])
        if target is None:
            raise FormSchemaError(f"Field {name!r}: a nested model cannot be a form field")
        result = {**target, **result}
    if "anyOf" in result and "type" not in result:
        branches = [b for b in result.pop("anyOf") if b != {"type": "null"}]
        if len(branches) != 1:
            raise FormSchemaError(f"Field {name!r}: a union of types cannot be a form field")
        result = {**_flatten(name, branches[0], defs), **result}
    if "items" in result and isinstance(result["items"], Mapping):
        items = _flatten(name, result["items"], defs)
        items.pop("title", None)
        result["items"] = items
    if result.get("default", 0) is None:
        result.pop("default")
    result.pop("uniqueItems", None)
    if "properties" in result:
        raise FormSchemaError(f"Field {name!r}: a nested model cannot be a form field")
    return result


# ---- checking an answer -----------------------------------------------------------------------------------
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def check(schema: Mapping[str, Any], content: Any) -> tuple[dict[str, Any], list[str]]:
    """``content`` against the form: the values to use (defaults filled in, unknown fields left
    out) and the reasons it fails, in words for the person answering. Never raises."""
    if not isinstance(content, Mapping):
        return {}, ["the answer must be the form's fields"]
    properties: Mapping[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    values: dict[str, Any] = {}
    reasons: list[str] = []
    for name, prop in properties.items():
        label = str(prop.get("title") or name)
        if name not in content or content[name] is None:
            if "default" in prop:
                values[name] = prop["default"]
            elif name in required:
                reasons.append(f"{label} is required")
            continue
        value = content[name]
        reason = _check_value(prop, value)
        if reason is not None:
            reasons.append(f"{label} {reason}")
        else:
            values[name] = float(value) if prop.get("type") == "number" and isinstance(value, int) else value
            if prop.get("type") == "integer" and isinstance(value, float):
                values[name] = int(value)
    return values, reasons


def _check_value(prop: Mapping[str, Any], value: Any) -> str | None:  # noqa: PLR0911, PLR0912 - one rule per line
    kind = prop.get("type")
    if kind == "boolean":
        return None if isinstance(value, bool) else "must be true or false"
    if kind in ("number", "integer"):
        if not _number(value) or (kind == "integer" and not float(value).is_integer()):
            return "must be a whole number" if kind == "integer" else "must be a number"
        if "minimum" in prop and value < prop["minimum"]:
            return f"must be at least {prop['minimum']}"
        if "maximum" in prop and value > prop["maximum"]:
            return f"must be at most {prop['maximum']}"
        return None
    if kind == "array":
        items = prop.get("items") or {}
        allowed = _choices(items)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "must be a list of choices"
        outside = [v for v in value if v not in allowed]
        if outside:
            return f"has choices that are not offered: {', '.join(map(repr, outside))}"
        if len(set(value)) != len(value):
            return "lists a choice twice"
        if "minItems" in prop and len(value) < prop["minItems"]:
            return f"needs at least {prop['minItems']} choices"
        if "maxItems" in prop and len(value) > prop["maxItems"]:
            return f"allows at most {prop['maxItems']} choices"
        return None
    if not isinstance(value, str):
        return "must be text"
    if "enum" in prop or "oneOf" in prop:
        return None if value in _choices(prop) else "must be one of the offered choices"
    if "minLength" in prop and len(value) < prop["minLength"]:
        return f"must be at least {prop['minLength']} characters"
    if "maxLength" in prop and len(value) > prop["maxLength"]:
        return f"must be at most {prop['maxLength']} characters"
    return _check_format(prop.get("format"), value)


def _check_format(fmt: Any, value: str) -> str | None:
    if fmt == "email":
        return None if _EMAIL.fullmatch(value) else "must be an email address"
    if fmt == "uri":
        parts = urlsplit(value)
        return None if parts.scheme and (parts.netloc or parts.path) and " " not in value else "must be a full URL"
    if fmt == "date":
        return None if _is_date(value) else "must be a date (YYYY-MM-DD)"
    if fmt == "date-time":
        return None if _is_date_time(value) else "must be a date and time with its offset (YYYY-MM-DDTHH:MM:SSZ)"
    return None


def _is_date(value: str) -> bool:
    try:
        date.fromisoformat(value)
    except ValueError:
        return False
    return len(value) == 10


def _is_date_time(value: str) -> bool:
    if not _DATE_TIME.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return True


def _pydantic_reason(error: Mapping[str, Any]) -> str:
    where = ".".join(str(part) for part in error.get("loc", ())) or "the answer"
    return f"{where}: {str(error.get('msg', 'is not valid')).rstrip('.')}"


__all__ = [
    "Form",
    "FormSchemaError",
    "InputAccepted",
    "InputCancelled",
    "InputDeclined",
    "InputResult",
    "SecretField",
    "check",
    "form",
    "validate_schema",
]
