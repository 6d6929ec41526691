"""``elicitd_client.forms``: what the specification's form-mode subset allows, what it refuses when
a form is defined (with the field and the reason), secret-looking fields, and the checks an answer
goes through."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field, SecretStr

from elicitd_client.forms import FormSchemaError, SecretField, check, form


def one(prop: dict[str, Any], name: str = "field") -> dict[str, Any]:
    return {"type": "object", "properties": {name: prop}}


@pytest.mark.parametrize(
    ("prop", "reason"),
    [
        ({"type": "string", "pattern": "^a"}, "pattern not allowed on a string field"),
        ({"type": "string", "format": "hostname"}, "format 'hostname' is not one of email, uri, date, date-time"),
        ({"type": "integer", "exclusiveMinimum": 0}, "exclusiveMinimum not allowed on a integer field"),
        ({"type": "object", "properties": {}}, "type 'object' is not a form field"),
        ({"type": "array", "items": {"type": "string"}}, "give the options as enum or as anyOf"),
        ({"type": "string", "oneOf": [{"const": "a", "title": "A", "x": 1}]}, "each oneOf entry is exactly"),
        ({"type": "string", "enum": ["a"], "oneOf": [{"const": "a", "title": "A"}]}, "one of them"),
        ({"type": "string", "enum": ["a", "b"], "enumNames": ["A"]}, "enumNames must name each enum value"),
        ({"type": "integer", "maximum": 10, "default": 11}, "the default does not fit: field must be at most 10"),
        ({"type": "string", "minLength": -1}, "minLength must be a non-negative integer"),
        ({"type": "array", "items": {"enum": ["a"], "type": "integer"}}, "items with enum must be of type string"),
    ],
)
def test_outside_the_subset_is_refused_when_defined(prop: dict[str, Any], reason: str) -> None:
    with pytest.raises(FormSchemaError) as refused:
        form(one(prop))
    assert str(refused.value).startswith("Field 'field': ")
    assert reason in str(refused.value)


def test_the_object_itself_is_flat() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}, "flat object"),
        ({"type": "object", "properties": {}}, "at least one property"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}, "'required' must list"),
    ]
    for schema, reason in cases:
        with pytest.raises(FormSchemaError, match=reason):
            form(schema)


class Address(BaseModel):
    street: str


class Nested(BaseModel):
    home: Address


class Union(BaseModel):
    value: int | str


class Free(BaseModel):
    tags: list[str]


class Bounded(BaseModel):
    count: int = Field(gt=0)


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (Nested, "Field 'home': a nested model cannot be a form field"),
        (Union, "Field 'value': a union of types cannot be a form field"),
        (Free, "Field 'tags': give the options as enum or as anyOf"),
        (Bounded, "Field 'count': exclusiveMinimum not allowed on a integer field"),
    ],
)
def test_models_outside_the_subset_are_refused(model: type[BaseModel], reason: str) -> None:
    with pytest.raises(FormSchemaError, match=reason):
        form(model)


@pytest.mark.parametrize(
    ("name", "looks_like"),
    [
        ("password", "a password"),
        ("new_password", "a password"),
        ("apiKey", "an API key"),
        ("api_key", "an API key"),
        ("openai-api-key", "an API key"),
        ("client_secret", "a secret"),
        ("access_token", "a token"),
        ("card_number", "a card number"),
        ("creditCard", "a card number"),
        ("cvc", "a card security code"),
        ("CVV", "a card security code"),
        ("ssn", "a social security number"),
        ("social_security_number", "a social security number"),
        ("iban", "a bank account number"),
        ("pin", "a PIN"),
    ],
)
def test_secret_looking_names_are_refused_with_url_mode_named(name: str, looks_like: str) -> None:
    with pytest.raises(SecretField) as refused:
        form(one({"type": "string"}, name))
    message = str(refused.value)
    assert f"Field {name!r} looks like {looks_like}." in message
    assert "elicitd.require_api_key(ctx, provider=...)" in message
    assert "elicitd.require_token(ctx, provider=...)" in message


def test_secret_looking_titles_and_formats_are_refused_too() -> None:
    with pytest.raises(SecretField, match="looks like a card number"):
        form(one({"type": "string", "title": "Credit card"}, "cc"))
    with pytest.raises(SecretField, match="looks like a password"):
        form(one({"type": "string", "format": "password"}, "word"))

    class Login(BaseModel):
        user: str
        code: SecretStr  # renders as format "password", writeOnly

    with pytest.raises(SecretField, match="Field 'code' looks like a password"):
        form(Login)


# One list for both helpers: clients/typescript/test/unit.test.ts reads the same file.
SHARED = json.loads((Path(__file__).parent / "secret_fields.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", SHARED["refused"], ids=lambda c: f"{c['name']}:{c['prop'].get('title', '')}")
def test_the_shared_secret_cases_are_refused(case: dict[str, Any]) -> None:
    with pytest.raises(SecretField) as refused:
        form(one(case["prop"], case["name"]))
    assert f"Field {case['name']!r} looks like {case['looks_like']}." in str(refused.value)


@pytest.mark.parametrize("case", SHARED["ordinary"], ids=lambda c: f"{c['name']}:{c['prop'].get('title', '')}")
def test_the_shared_near_misses_are_ordinary_fields(case: dict[str, Any]) -> None:
    assert form(one(case["prop"], case["name"])).schema["properties"][case["name"]] == case["prop"]


def test_ordinary_names_are_not_secrets() -> None:
    for name in ("shipping", "max_tokens", "spinach", "company", "pinned", "description", "tokenizer"):
        assert form(one({"type": "string"}, name)).schema["properties"][name] == {"type": "string"}


def test_an_answer_is_checked_field_by_field() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1},
            "x": {"type": "number", "maximum": 2},
            "b": {"type": "boolean"},
            "e": {"type": "string", "format": "email"},
            "u": {"type": "string", "format": "uri"},
            "d": {"type": "string", "format": "date"},
            "t": {"type": "string", "format": "date-time"},
            "s": {"type": "string", "oneOf": [{"const": "a", "title": "A"}]},
            "m": {"type": "array", "items": {"enum": ["a", "b"], "type": "string"}, "maxItems": 1},
            "dflt": {"type": "string", "default": "fallback"},
        },
        "required": ["n", "x", "b"],
    }
    good = {
        "n": 3.0,
        "x": 2,
        "b": True,
        "e": "a@b.io",
        "u": "urn:isbn:1",
        "d": "2026-02-28",
        "t": "2026-02-28T12:00:00+01:00",
        "s": "a",
        "m": ["b"],
        "ignored": 1,
    }
    values, reasons = check(schema, good)
    assert reasons == []
    kept = {key: value for key, value in good.items() if key != "ignored"}  # unknown fields are left out
    assert values == {**kept, "n": 3, "x": 2.0, "dflt": "fallback"}
    _, reasons = check(
        schema,
        {
            "n": True,
            "x": 2.5,
            "b": "yes",
            "e": "a@b",
            "u": "no scheme",
            "d": "2026-02-30",
            "t": "2026-02-28T12:00:00",
            "s": "z",
            "m": ["a", "b"],
        },
    )
    assert reasons == [
        "n must be a whole number",
        "x must be at most 2",
        "b must be true or false",
        "e must be an email address",
        "u must be a full URL",
        "d must be a date (YYYY-MM-DD)",
        "t must be a date and time with its offset (YYYY-MM-DDTHH:MM:SSZ)",
        "s must be one of the offered choices",
        "m allows at most 1 choices",
    ]
    assert check(schema, {"x": 1, "b": False})[1] == ["n is required"]
    assert check(schema, ["not", "an", "object"])[1] == ["the answer must be the form's fields"]


def test_a_model_reads_the_answer_into_its_types() -> None:
    class Trip(BaseModel):
        """Where to?"""

        city: str
        leaving: date
        nights: int = Field(default=1, ge=1)

    trip = form(Trip)
    assert trip.message == "Where to?"
    data, reasons = trip.read({"city": "Oslo", "leaving": "2026-03-01"})
    assert reasons == []
    assert data == Trip(city="Oslo", leaving=date(2026, 3, 1), nights=1)
