"""`introspect profile`: not built yet (see the open issues)."""

from __future__ import annotations

import argparse

from introspect.commands._args import add_common
from introspect.errors import IntrospectError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="(coming soon)")
    add_common(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    raise IntrospectError("'introspect profile' is not built yet")
