"""Form mode through the real SDK on both ends and both revisions: the whole schema subset asked and
answered, invalid answers asked again with the reasons, decline and cancel as typed results, and
secret-looking fields refused before anything is asked."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import date, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

import pytest
from mcp import MCPError
from mcp.client import ClientRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ElicitRequestFormParams, ElicitRequestParams, ElicitResult
from pydantic import AnyUrl, BaseModel, Field

from elicitd_client.forms import InputAccepted, InputCancelled, InputDeclined, form
from elicitd_client.mcp import Elicitd
from tests.mcp.harness import AUDIENCE, Mode, example_server, mcp_client, text_of
from tests.support.apps import RunningApp, ServerClientHandle
from tests.support.oauth_server import OAuthServer

MODES: list[Mode] = ["2026-07-28", "legacy"]


class Color(StrEnum):
    RED = "red"
    GREEN = "green"


class Profile(BaseModel):
    """Tell us about yourself."""

    name: str = Field(min_length=2, max_length=20, title="Name")
    email: Annotated[str, Field(json_schema_extra={"format": "email"})]
    homepage: AnyUrl | None = None
    born: date
    meeting: datetime
    age: int = Field(ge=0, le=130)
    height: float = Field(ge=0.5, le=2.5, description="In metres")
    newsletter: bool = False
    color: Color
    size: Literal["s", "m", "l"] = "m"
    toppings: list[Literal["cheese", "ham", "olives"]] = Field(default=[], max_length=2)


PROFILE = form(Profile)

# Titled options (oneOf / anyOf of const + title) and the legacy enumNames, as a plain schema.
PLAN = form(
    {
        "type": "object",
        "properties": {
            "tier": {
                "type": "string",
                "title": "Plan",
                "oneOf": [{"const": "free", "title": "Free"}, {"const": "pro", "title": "Pro"}],
            },
            "regions": {
                "type": "array",
                "title": "Regions",
                "items": {"anyOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "Americas"}]},
                "minItems": 1,
            },
            "billing": {"type": "string", "enum": ["monthly", "yearly"], "enumNames": ["Monthly", "Yearly"]},
            "seats": {"type": "integer", "minimum": 1, "maximum": 50, "default": 1},
        },
        "required": ["tier", "regions"],
    },
    message="Choose a plan.",
)

VALID: dict[str, Any] = {
    "name": "Ada",
    "email": "ada@example.com",
    "homepage": "https://ada.example.com/",
    "born": "1815-12-10",
    "meeting": "2026-01-02T10:30:00Z",
    "age": 36,
    "height": 1.65,
    "color": "green",
    "toppings": ["cheese", "olives"],
}


def add_form_tools(mcp: MCPServer, elicitd: Elicitd) -> None:
    @mcp.tool()
    async def profile(ctx: Context) -> str:
        answer = await elicitd.require_input(ctx, PROFILE)
        if isinstance(answer, InputDeclined):
            return "declined"
        if isinstance(answer, InputCancelled):
            return "cancelled"
        p = answer.data
        return (
            f"{p.name}|{p.email}|{p.homepage}|{p.born.isoformat()}|{p.meeting.isoformat()}|{p.age}|{p.height}|"
            f"{p.newsletter}|{p.color.value}|{p.size}|{','.join(p.toppings)}"
        )

    @mcp.tool()
    async def plan(ctx: Context) -> str:
        answer = await elicitd.require_input(ctx, PLAN)
        assert isinstance(answer, InputAccepted)
        data = answer.data
        return f"{data['tier']}|{','.join(data['regions'])}|{data.get('billing')}|{data['seats']}"

    @mcp.tool()
    async def both(ctx: Context) -> str:
        """Two forms in one call: the first answer is kept while the second is asked."""
        first = await elicitd.require_input(ctx, PLAN)
        second = await elicitd.require_input(ctx, Profile, message="And you?")
        assert isinstance(first, InputAccepted) and isinstance(second, InputAccepted)
        return f"{first.data['tier']}+{second.data.name}"

    @mcp.tool()
    async def leaky(ctx: Context) -> str:
        schema = {"type": "object", "properties": {"api_key": {"type": "string"}}}
        await elicitd.require_input(ctx, schema)
        return "asked"


Answer = Callable[[ElicitRequestFormParams], Awaitable[ElicitResult]]


class Person:
    """The person at the MCP client: answers each form with the next of ``answers``."""

    def __init__(self, *answers: ElicitResult) -> None:
        self.answers = list(answers)
        self.asked: list[ElicitRequestFormParams] = []

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        assert isinstance(params, ElicitRequestFormParams), params
        self.asked.append(params)
        return self.answers.pop(0)


def accept(content: dict[str, Any]) -> ElicitResult:
    return ElicitResult(action="accept", content=content)


async def call(
    elicitd: RunningApp,
    server_client: ServerClientHandle,
    oauth_server: OAuthServer,
    mode: Mode,
    tool: str,
    person: Person | None,
) -> Any:
    token = oauth_server.mint(f"u{uuid.uuid4().hex[:10]}", client_id=AUDIENCE)["id_token"]
    options: dict[str, Any] = {"elicitation_callback": person} if person is not None else {}
    async with (
        example_server(elicitd.url, server_client.api_key, oauth_server.issuer, customize=add_form_tools) as server,
        mcp_client(server.url, token, mode=mode, **options) as client,
    ):
        try:
            return await client.call_tool(tool, {})
        except MCPError as refused:  # raised here, not out of the client's task group
            return refused


@pytest.mark.parametrize("mode", MODES)
async def test_the_whole_subset_is_asked_and_read_into_the_model(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, mode: Mode
) -> None:
    person = Person(accept(VALID))
    result = await call(elicitd, server_client, oauth_server, mode, "profile", person)
    assert result.is_error is False, result.content
    assert text_of(result) == (
        "Ada|ada@example.com|https://ada.example.com/|1815-12-10|2026-01-02T10:30:00+00:00|36|1.65|False|green|m|"
        "cheese,olives"
    )
    [asked] = person.asked
    assert asked.message == "Tell us about yourself."
    schema = asked.requested_schema
    assert schema["required"] == ["name", "email", "born", "meeting", "age", "height", "color"]
    properties = schema["properties"]
    assert properties["name"] == {"type": "string", "title": "Name", "minLength": 2, "maxLength": 20}
    assert properties["email"]["format"] == "email"
    assert properties["homepage"]["format"] == "uri"
    assert properties["born"]["format"] == "date"
    assert properties["meeting"]["format"] == "date-time"
    assert (properties["age"]["minimum"], properties["age"]["maximum"]) == (0, 130)
    assert properties["height"]["type"] == "number"
    assert properties["newsletter"] == {"type": "boolean", "title": "Newsletter", "default": False}
    assert properties["color"]["enum"] == ["red", "green"]
    assert properties["size"]["default"] == "m"
    assert properties["toppings"]["items"] == {"type": "string", "enum": ["cheese", "ham", "olives"]}
    assert properties["toppings"]["maxItems"] == 2


@pytest.mark.parametrize("mode", MODES)
async def test_titled_options_and_defaults_from_a_plain_schema(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, mode: Mode
) -> None:
    person = Person(accept({"tier": "pro", "regions": ["eu", "us"], "billing": "yearly"}))
    result = await call(elicitd, server_client, oauth_server, mode, "plan", person)
    assert text_of(result) == "pro|eu,us|yearly|1"
    assert person.asked[0].message == "Choose a plan."


@pytest.mark.parametrize("mode", MODES)
async def test_an_invalid_answer_is_asked_again_with_the_reasons(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, mode: Mode
) -> None:
    wrong = {
        **VALID,
        "name": "A",
        "email": "ada at example",
        "born": "10/12/1815",
        "meeting": "2026-01-02 10:30",
        "age": 200,
        "height": "tall",
        "color": "blue",
        "toppings": ["cheese", "pineapple"],
    }
    del wrong["homepage"]
    person = Person(accept(wrong), accept({**VALID, "age": 36.0, "homepage": "not a url"}), accept(VALID))
    result = await call(elicitd, server_client, oauth_server, mode, "profile", person)
    assert result.is_error is False, result.content
    assert text_of(result).startswith("Ada|ada@example.com|")
    first, second, third = (asked.message for asked in person.asked)
    assert first == "Tell us about yourself."
    assert second == (
        "Tell us about yourself.\n\nPlease correct your answer: Name must be at least 2 characters; Email must be an "
        "email address; Born must be a date (YYYY-MM-DD); Meeting must be a date and time with its offset "
        "(YYYY-MM-DDTHH:MM:SSZ); Age must be at most 130; Height must be a number; Color must be one of the "
        "offered choices; Toppings has choices that are not offered: 'pineapple'."
    )
    assert third == "Tell us about yourself.\n\nPlease correct your answer: Homepage must be a full URL."


@pytest.mark.parametrize("mode", MODES)
async def test_a_missing_required_field_and_too_many_tries(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, mode: Mode
) -> None:
    missing: dict[str, Any] = {"regions": []}
    person = Person(accept(missing), accept(missing), accept(missing))
    result = await call(elicitd, server_client, oauth_server, mode, "plan", person)
    assert result.is_error is True
    assert "did not fit the form after 3 tries: Plan is required; Regions needs at least 1 choices" in text_of(result)
    assert len(person.asked) == 3


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_decline_and_cancel_are_typed_results(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, mode: Mode, action: str
) -> None:
    person = Person(ElicitResult(action=action))  # type: ignore[arg-type]
    result = await call(elicitd, server_client, oauth_server, mode, "profile", person)
    assert result.is_error is False
    assert text_of(result) == {"decline": "declined", "cancel": "cancelled"}[action]


@pytest.mark.parametrize("mode", MODES)
async def test_two_forms_in_one_call_ask_each_once(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, mode: Mode
) -> None:
    person = Person(accept({"tier": "free", "regions": ["eu"]}), accept(VALID))
    result = await call(elicitd, server_client, oauth_server, mode, "both", person)
    assert text_of(result) == "free+Ada"
    assert [asked.message for asked in person.asked] == ["Choose a plan.", "And you?"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_secret_looking_field_is_never_asked(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer, mode: Mode
) -> None:
    person = Person()
    result = await call(elicitd, server_client, oauth_server, mode, "leaky", person)
    assert result.is_error is True
    assert "Field 'api_key' looks like an API key" in text_of(result)
    assert "elicitd.require_api_key(ctx, provider=...)" in text_of(result)
    assert person.asked == []


async def test_a_client_without_elicitation_is_told_what_it_lacks(
    elicitd: RunningApp, server_client: ServerClientHandle, oauth_server: OAuthServer
) -> None:
    refused = await call(elicitd, server_client, oauth_server, "2026-07-28", "profile", None)
    assert isinstance(refused, MCPError)
    assert refused.error.code == -32021
    assert refused.error.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}
