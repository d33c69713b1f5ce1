"""`introspect measure`: not built yet (see the open issues)."""

from __future__ import annotations

import argparse

from introspect.commands._args import add_common
from introspect.errors import IntrospectError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("measure", help="(coming soon)")
    add_common(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    raise IntrospectError("'introspect measure' is not built yet")
