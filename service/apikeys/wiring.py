"""Registers the ``api_key`` kind with the app: its creation handler, page and form route."""

from __future__ import annotations

from typing import Any

from litestar.datastructures import State

from service.apikeys.kind import ApiKeyKind
from service.apikeys.pages import api_key_page, submit_api_key
from service.apikeys.service import ApiKeyService
from service.flows.service import FlowService
from service.settings import Settings


def install(state: State, flows: FlowService, settings: Settings) -> list[Any]:
    state.apikeys = ApiKeyService(flows, state.vault)
    flows.handlers["api_key"] = ApiKeyKind()
    state.kind_pages["api_key"] = api_key_page
    return [submit_api_key]
