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


def _bdi(value: Any, direction: str | None = None) -> Any:
    """``value`` isolated; its direction from its first strong letter, or ``direction`` when given —
    a sentence in the page's language that starts with a Latin name (a group's "Acme Files
    Assistant and 2 other services of …") must keep the page's direction, not take the name's."""
    from markupsafe import Markup, escape

    if direction in {"ltr", "rtl"}:
        return Markup('<bdi dir="%s">%s</bdi>') % (direction, escape(value))
    return Markup("<bdi>%s</bdi>") % escape(value)


def _ltr(value: Any) -> Any:
    from markupsafe import Markup, escape

    return Markup('<bdi dir="ltr">%s</bdi>') % escape(value)


# How a locale lists names (and, with ``semicolons``, longer phrases): CLDR's list patterns, without
# the final "and", so a list reads the same whether it holds two names or ten.
_COMMAS = {"ja": "、", "zh_Hans": "、", "ar": "، "}
_SEMICOLONS = {"ja": "、", "zh_Hans": "\uff1b", "ar": "؛ "}


def _listing(values: Any, *, strong: bool = False, ltr: bool = False, semicolons: bool = False) -> Any:
    """Names joined as the page's language lists them, each isolated (``<bdi>``), optionally bold."""
    from markupsafe import Markup, escape

    from service import i18n

    catalogue = i18n.current().catalogue
    separator = _SEMICOLONS.get(catalogue, "; ") if semicolons else _COMMAS.get(catalogue, ", ")
    item = Markup('<bdi dir="ltr">%s</bdi>') if ltr else Markup("<bdi>%s</bdi>")
    if strong:
        item = Markup("<strong>") + item + Markup("</strong>")
    return escape(separator).join(item % escape(value) for value in values)


def install_translations(environment: Any) -> None:
    """Jinja's i18n extension on elicitd's catalogues (``service.i18n``), with the two isolation
    filters every page uses: ``bdi`` for names of any direction (a server's display name, a login),
    ``ltr`` for what is always left to right (URLs, domains, ids, scope strings)."""
    from service import i18n

    environment.add_extension("jinja2.ext.i18n")
    environment.policies["ext.i18n.trimmed"] = True
    environment.install_gettext_callables(
        lambda message: i18n.translations(i18n.current().catalogue).gettext(message),
        lambda singular, plural, count: i18n.translations(i18n.current().catalogue).ngettext(singular, plural, count),
        newstyle=True,
    )
    environment.filters["bdi"] = _bdi
    environment.filters["ltr"] = _ltr
    environment.filters["listing"] = _listing
    environment.globals["list_comma"] = lambda: _COMMAS.get(i18n.current().catalogue, ", ")
    environment.globals.update(i18n.page_globals())


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
            install_translations(engine.engine)
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
