"""The `introspect` command: one sub-command per job, each in ``introspect/commands/``.

Every sub-command module has ``add_parser(subparsers)`` and ``run(args) -> int``. Bad
input raises :class:`IntrospectError` (or ValueError from a spec/setup invariant); here it
becomes one line on stderr and exit code 2 — a traceback only with ``--debug``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from introspect import __version__
from introspect.errors import IntrospectError

#: Sub-command modules under introspect.commands, in the order --help lists them.
COMMANDS = ("estimate", "sizes", "profile", "table", "fit", "measure", "explain")

DESCRIPTION = """\
How much memory will training this transformer take, where does it go, and what must
change to fit? Memory is in decimal GB (1 GB = 1e9 bytes) throughout.

  introspect estimate   the seed's equations for a shape you type in
  introspect sizes      the seed's model-size table (10M ... 70B) against 4 and 8 GB
  introspect profile    a Hub id, a checkpoint folder or a bundled model: exact
                        parameters, the estimate, and where real architectures diverge
  introspect table      the seed's real-world comparison table for published models
  introspect fit        does it fit a budget or a GPU, the largest T and B, what to change
  introspect measure    a real training step (MLX or torch) beside the estimates
  introspect explain    a memory term's equation, source and tests (--list: all)
"""


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors as one line and a pointer to ``--help`` (not the usage
    block): ``introspect profile: error: argument --seq: 'x' is not a number (see
    'introspect profile --help')``. Sub-command parsers inherit the class."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse builds a formatter for every add_argument (to check the metavar), and
        # its default width imports shutil (with zlib, bz2, lzma): a few ms of every
        # closed-form command's start. The same width, without that import.
        return self.formatter_class(prog=self.prog, width=_terminal_columns() - 2)


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``: $COLUMNS, else the terminal's, else 80."""
    import os

    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser with only ``command``'s sub-parser (none for ``--help``, whose
    command list is the static :data:`DESCRIPTION`): building every sub-command's parser
    would import every command's modules, a large part of a closed-form command's start."""
    parser = OneLineParser(
        prog="introspect",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    parser.add_argument("--version", action="version", version=f"introspect {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help="one of those above")
    if command is not None:
        importlib.import_module(f"introspect.commands.{command}").add_parser(sub)
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    """The first argument that is not a flag (the top-level flags take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_in(argv)
    if command is not None and command not in COMMANDS:
        print(
            f"introspect: unknown command {command!r}; choose one of {', '.join(COMMANDS)} "
            "(see introspect --help)",
            file=sys.stderr,
        )
        return 2
    parser = build_parser(command)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    debug = args.debug or getattr(args, "sub_debug", False)
    from introspect.units import set_display_unit

    set_display_unit("GiB" if getattr(args, "units", "gb") == "gib" else "GB")
    try:
        return int(args.run(args) or 0)
    except (IntrospectError, ValueError) as err:
        if debug:
            raise
        print(f"introspect {args.command}: error: {err}", file=sys.stderr)
        return getattr(err, "exit_code", 2)
    except KeyboardInterrupt:
        print("introspect: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
