"""OpenTelemetry tracing, off unless ``ELICITD_OTEL_ENABLED=true``.

Each app gets its own ``TracerProvider`` (never the process-global one), so two instances in one
process — or a test with an in-memory exporter — do not mix spans. Exporters:
``ELICITD_OTEL_EXPORTER=console`` (default, JSON spans on stdout), ``memory`` (kept in
``Tracing.memory`` for tests), or ``otlp`` (needs ``opentelemetry-exporter-otlp`` installed;
it then follows the standard ``OTEL_EXPORTER_OTLP_*`` variables).

The SDK is imported by ``build_tracing`` only when tracing is on: a process with it off never
loads ``opentelemetry.sdk.trace`` (tests/core/test_idle_imports.py).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Tracer  # the API only: light, and imported with every request observer

from service.errors import ConfigurationError
from service.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

_TRUE = {"1", "true", "yes", "on"}


@dataclass
class Tracing:
    """The app's tracing. ``provider`` (an SDK ``TracerProvider``) and ``memory`` (an
    ``InMemorySpanExporter``) are typed ``Any``: the SDK is imported only when tracing is on, and
    the services holding this are dataclasses whose field types are resolved at run time (a
    handler's dependency is introspected), so a name imported only for the type checker would
    fail there (``NameError``)."""

    enabled: bool
    provider: Any = None
    tracer: Tracer | None = None
    memory: Any = None
    exporter_name: str = "none"
    _extra: dict[str, Any] = field(default_factory=dict)

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()


def _otlp_exporter() -> SpanExporter:
    try:
        module = importlib.import_module("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    except ImportError:
        raise ConfigurationError(
            "ELICITD_OTEL_EXPORTER=otlp needs the opentelemetry-exporter-otlp-proto-http package"
        ) from None
    exporter: SpanExporter = module.OTLPSpanExporter()
    return exporter


def build_tracing(settings: Settings) -> Tracing:
    if settings.extra.get("OTEL_ENABLED", "false").strip().lower() not in _TRUE:
        return Tracing(enabled=False)
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    name = settings.extra.get("OTEL_EXPORTER", "console").strip().lower()
    service = settings.extra.get("OTEL_SERVICE_NAME", "elicitd")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    memory = None
    if name == "memory":
        memory = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(memory))
    elif name == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    elif name == "otlp":
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter()))
    else:
        raise ConfigurationError("ELICITD_OTEL_EXPORTER must be console, memory or otlp")
    return Tracing(
        enabled=True, provider=provider, tracer=provider.get_tracer("elicitd"), memory=memory, exporter_name=name
    )
