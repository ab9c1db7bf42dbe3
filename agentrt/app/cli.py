"""The ``agentrt`` command line. Each command group lives in ``agentrt/app/commands/<name>.py`` and
exposes ``register(subparsers)``; this module only assembles them and turns errors into one line.

Exit codes: 0 ok, 1 run failure, 2 bad input or configuration, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from agentrt import __version__
from agentrt.core.errors import AgentrtError, UserError

# Command modules, imported when the parser is built (they import heavy things lazily themselves).
COMMAND_MODULES = [
    "agentrt.app.commands.run",
    "agentrt.app.commands.demo",
    "agentrt.app.commands.route",
    "agentrt.app.commands.memory",
    "agentrt.app.commands.eval",
    "agentrt.app.commands.rollout",
    "agentrt.app.commands.export",
    "agentrt.app.commands.chat",
    "agentrt.app.commands.serve",
    "agentrt.app.commands.tools",
    "agentrt.app.commands.learn",
    "agentrt.app.commands.router",
    "agentrt.app.commands.feedback",
    "agentrt.app.commands.env",
]


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump), exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"agentrt: error: {message} (see: {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def, override]
        """As argparse's, but an unknown argument is refused by the innermost (sub)command that met it, so
        the error points at that command's help (``agentrt serve --help``), not the top level's."""
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="agentrt", description="A hybrid-reasoning agent runtime.")
    parser.add_argument("--version", action="version", version=f"agentrt {__version__}")
    parser.add_argument("--config", help="TOML config file (default: $AGENTRT_HOME/config.toml)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def check_argv(argv: list[str]) -> str | None:
    """The error line for the first argument that is not valid UTF-8, else None.

    Python hands undecodable argv bytes over as lone surrogates (PEP 383); no command can use such
    text (a question, a route, a filter, a file name to write), so all are refused up front, once.
    """
    import os

    for i, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            try:
                shown = repr(os.fsencode(arg))
            except UnicodeEncodeError:
                shown = ascii(arg)
            if len(shown) > 60:
                shown = shown[:57] + "..."
            return (f"argument {i} ({shown}) is not valid UTF-8; pass every argument as UTF-8 text "
                    "(use a UTF-8 locale such as LANG=C.UTF-8, or re-encode the text, e.g. with iconv)")
    return None


def main(argv: list[str] | None = None) -> int:
    bad = check_argv(sys.argv[1:] if argv is None else argv)
    if bad:
        print(f"agentrt: error: {bad}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"agentrt: error: {e}", file=sys.stderr)
        return 2
    except AgentrtError as e:
        print(f"agentrt: failed: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("agentrt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
