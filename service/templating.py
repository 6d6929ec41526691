"""The browser pages' template engine: Litestar's Jinja engine, built when the first page renders.

Most processes serve the API for hours without rendering a page; importing Jinja2 and building
its environment at startup cost each of them ~2.0 MB of RSS. Litestar asks the engine for a
template only when a page is answered, so the real engine (and Jinja2) is made then, once, with
the callables Litestar registered and the globals every page uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from litestar.template import TemplateEngineProtocol

if TYPE_CHECKING:
    from jinja2 import Template as JinjaTemplate
    from litestar.contrib.jinja import JinjaTemplateEngine
    from litestar.template.base import TemplateCallableType

P = ParamSpec("P")
R = TypeVar("R")


class LazyJinjaEngine(TemplateEngineProtocol["JinjaTemplate", Mapping[str, Any]]):
    def __init__(self, directory: Path, engine_instance: Any = None, *, page_globals: Mapping[str, Any]) -> None:
        self._directory = directory
        self._globals = dict(page_globals)
        self._callables: list[tuple[str, Any]] = []
        self._engine: JinjaTemplateEngine | None = None

    @property
    def engine(self) -> JinjaTemplateEngine:
        if self._engine is None:
            from litestar.contrib.jinja import JinjaTemplateEngine

            engine = JinjaTemplateEngine(directory=self._directory)
            engine.engine.globals.update(self._globals)
            for key, template_callable in self._callables:
                engine.register_template_callable(key, template_callable)
            self._engine = engine
        return self._engine

    def get_template(self, template_name: str) -> JinjaTemplate:
        return self.engine.get_template(template_name)

    def render_string(self, template_string: str, context: Mapping[str, Any]) -> str:
        return self.engine.render_string(template_string, context)

    def register_template_callable(
        self,
        key: str,
        template_callable: TemplateCallableType[Mapping[str, Any], P, R],
    ) -> None:
        if self._engine is None:
            self._callables.append((key, template_callable))
        else:
            self._engine.register_template_callable(key, template_callable)
