"""``elicitd migrate``: the Alembic chain for an installed elicitd, which has no ``alembic.ini``.

``elicitd migrate [REVISION]`` upgrades (to head by default), as it always has;
``elicitd migrate downgrade REVISION``, ``current`` and ``history`` do what Alembic's commands of
those names do, and ``--sql`` writes an upgrade's or a downgrade's script instead of running it (a
DBA's reviewed script). Every online run holds the migration lock and its timeouts
(``service.db.migrate``), exactly as stock ``alembic`` with the repository's ``alembic.ini`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import sys
from typing import Any

from service.cli_exits import CommandFailed, ExitCode
from service.cli_output import print_json, print_table, report

_ACTIONS = ("upgrade", "downgrade", "current", "history")

_USAGE = """\
  elicitd migrate [REVISION]           upgrade to REVISION (head by default)
  elicitd migrate upgrade REVISION     the same
  elicitd migrate downgrade REVISION   undo down to REVISION (-1: one step; base: everything)
  elicitd migrate current              the revision the database is at
  elicitd migrate history              every revision this elicitd knows, newest first

  --sql writes the statements of an upgrade or a downgrade to stdout instead of running them, for
  `psql -v ON_ERROR_STOP=1 -f`. No database is needed; name the starting point (0012:head,
  0013:0012), or an upgrade starts from an empty database.
"""


def register(subparsers: Any) -> None:
    migrate = subparsers.add_parser(
        "migrate",
        help="apply, undo or show Alembic migrations on ELICITD_DATABASE_URL",
        description=_USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    migrate.add_argument("--sql", action="store_true", help="write the script instead of running it")
    migrate.add_argument("--json", action="store_true")
    # The rest as it comes, so that options may also follow the words (`downgrade --sql 0013:0012`)
    # and `-1` is a revision, not an option; sorted out by _parse.
    migrate.add_argument("words", nargs=argparse.REMAINDER, metavar="[ACTION] [REVISION]", help="see above")
    migrate.set_defaults(func=cmd_migrate)


def _usage(message: str) -> CommandFailed:
    return CommandFailed(f"migrate: {message} (see `elicitd migrate --help`)", ExitCode.USAGE)


def _parse(args: argparse.Namespace) -> tuple[str, str | None]:
    """``(action, revision)`` from the words after ``migrate``, a bare revision being an upgrade;
    ``--sql`` and ``--json`` among them count as if given first."""
    words: list[str] = []
    for word in args.words:
        if word in {"--sql", "--json"}:
            setattr(args, word[2:], True)
        elif word.startswith("--") or word in {"-h", "--help"}:
            raise _usage(f"unknown option {word}")
        else:
            words.append(word)
    action, rest = (words[0], words[1:]) if words and words[0] in _ACTIONS else ("upgrade", words)
    if action in {"current", "history"}:
        if rest:
            raise _usage(f"{action} takes no revision")
        return action, None
    if len(rest) > 1:
        raise _usage(f"one revision, not {len(rest)}")
    if action == "downgrade" and not rest:
        raise _usage("downgrade needs a revision (-1 for one step, base for everything)")
    return action, rest[0] if rest else "head"


def cmd_migrate(args: argparse.Namespace) -> None:
    from alembic.util import CommandError

    from service.db import migrate

    action, revision = _parse(args)
    if args.sql and action not in {"upgrade", "downgrade"}:
        raise _usage(f"--sql writes an upgrade or a downgrade, not {action}")
    if args.sql and args.json:
        raise _usage("--sql writes SQL, not JSON")
    try:
        if action == "history":
            _history(migrate.history(), as_json=args.json)
        elif args.sql:
            assert revision is not None
            script = io.StringIO()  # written out only whole: a failure leaves no half script behind
            migrate.write_sql(action, revision, script)
            sys.stdout.write(script.getvalue())
        else:
            url = migrate.database_url_from_env()
            if action == "current":
                _current(asyncio.run(migrate.current_async(url)), migrate.history(), as_json=args.json)
            elif action == "downgrade":
                assert revision is not None
                undone = asyncio.run(migrate.downgrade_async(url, revision))
                report(
                    args.json,
                    {"revision": revision, "undone": list(undone)},
                    f"downgraded to {revision}" + (f" (undid {', '.join(undone)})" if undone else " (nothing to undo)"),
                )
            else:
                assert revision is not None
                applied = asyncio.run(migrate.upgrade_async(url, revision))
                report(
                    args.json,
                    {"revision": revision, "applied": list(applied)},
                    f"migrated to {revision}"
                    + (f" (applied {', '.join(applied)})" if applied else " (nothing to apply)"),
                )
    except CommandError as exc:  # an unknown revision, a range offline mode cannot write, ...
        raise CommandFailed(f"migrate: {exc}", ExitCode.REFUSED) from None


def _current(heads: tuple[str, ...], scripts: list[Any], *, as_json: bool) -> None:
    head, known = scripts[0].revision, {s.revision for s in scripts}
    if as_json:
        print_json({"current": list(heads), "head": head})
    elif not heads:
        print(f"none (an empty database; this elicitd migrates it to {head})")
    else:
        print(", ".join(f"{rev} ({_where(rev, head, known)})" for rev in heads))


def _where(revision: str, head: str, known: set[str]) -> str:
    if revision == head:
        return "head"
    return f"behind {head}" if revision in known else "ahead: a newer elicitd wrote it"


def _history(scripts: list[Any], *, as_json: bool) -> None:
    rows = [
        {"revision": s.revision, "down_revision": s.down_revision, "head": s.is_head, "message": s.doc} for s in scripts
    ]
    print_table(rows, ["revision", "down_revision", "head", "message"], as_json=as_json)
