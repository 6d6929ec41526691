"""Client library for elicitd, the durable-state service for MCP URL-mode elicitation.

``pip install 'elicitd[client]'`` gives ``ElicitdClient`` (httpx only); ``'elicitd[mcp]'`` adds
``elicitd_client.mcp``, the one-call integration with the official MCP Python SDK.
"""

from __future__ import annotations

from elicitd_client.client import ElicitdClient
from elicitd_client.errors import (
    Conflict,
    ElicitdError,
    ElicitdUnavailable,
    FlowNotFound,
    FlowNotPending,
    Forbidden,
    InsufficientScope,
    InvalidRequest,
    InvalidRequestState,
    NotConnected,
    NotFound,
    RateLimited,
    ReauthorizationRequired,
    RequestStateExpired,
    ServerError,
    SubjectTokenInvalid,
    SubjectTokenRequired,
    Unauthenticated,
)
from elicitd_client.types import CreatedFlow, Flow, FlowStatus, Resolution, Subject, Token

__all__ = [
    "Conflict",
    "CreatedFlow",
    "ElicitdClient",
    "ElicitdError",
    "ElicitdUnavailable",
    "Flow",
    "FlowNotFound",
    "FlowNotPending",
    "FlowStatus",
    "Forbidden",
    "InsufficientScope",
    "InvalidRequest",
    "InvalidRequestState",
    "NotConnected",
    "NotFound",
    "RateLimited",
    "ReauthorizationRequired",
    "RequestStateExpired",
    "Resolution",
    "ServerError",
    "Subject",
    "SubjectTokenInvalid",
    "SubjectTokenRequired",
    "Token",
    "Unauthenticated",
]
