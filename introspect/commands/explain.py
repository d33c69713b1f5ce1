"""`introspect explain TERM`: a memory term's equation, category, source and tests, from
the term registry (:mod:`introspect.terms`); ``--list`` lists every term.

Closed form and fast: the registry is plain data, so this imports no estimator, no
torch and no MLX."""

from __future__ import annotations

import argparse
import json

from introspect import terms
from introspect.errors import IntrospectError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help="a memory term's equation, source and tests (--list: every term)",
        description="What a term of an estimate is: its equation, category, the library "
        "file and function it was derived from, the introspect functions that compute it "
        "and the tests that check it against a real or dry-run step. TERM is a slash path "
        "as the estimates print it (activations/layer/attention/quadratic/probs).",
    )
    p.add_argument("term", nargs="?", metavar="TERM", help="the term's name")
    p.add_argument("--list", action="store_true", help="list every registered term")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--debug", dest="sub_debug", action="store_true", help="show the full traceback")
    p.set_defaults(run=run)


def close_matches(name: str, n: int = 3) -> list[str]:
    """Registered names nearest ``name`` (difflib), or sharing its last component."""
    import difflib

    known = terms.names()
    near = difflib.get_close_matches(name, known, n=n, cutoff=0.6)
    if not near:
        leaf = name.rstrip("/").rpartition("/")[2]
        near = [k for k in known if k.rpartition("/")[2] == leaf][:n]
    return near


def unknown(name: str) -> IntrospectError:
    near = close_matches(name)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    return IntrospectError(
        f"TERM: no registered term {name!r}{hint} (see 'introspect explain --list')"
    )


def text(term: terms.Term, asked: str | None = None) -> str:
    """The record as aligned lines (``asked``: the instance of a pattern asked for)."""
    lines = [f"term:        {term.name}"]
    if asked and asked != term.name:
        lines.append(f"asked:       {asked}")
    lines += [
        f"category:    {term.category}",
        f"equation:    {term.equation}",
        f"source:      {term.source}",
        "computed by: " + ("\n             ".join(term.computed_by) or "-"),
        "tests:       " + ("\n             ".join(term.tests) or f"none ({term.unchecked})"),
    ]
    return "\n".join(lines)


def listing() -> str:
    """Every term, grouped by category, one line each: name and equation's start."""
    out = []
    for category in terms.CATEGORIES:
        rows = sorted((t for t in terms.TERMS if t.category == category), key=lambda t: t.name)
        if not rows:
            continue
        out.append(f"{category} ({len(rows)})")
        width = max(len(t.name) for t in rows)
        for t in rows:
            eq = t.equation if len(t.equation) <= 60 else t.equation[:59] + "…"
            out.append(f"  {t.name:<{width}}  {eq}")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    if args.list:
        if args.term:
            raise IntrospectError("TERM: give a term or --list, not both")
        if args.json:
            print(json.dumps([t.to_json() for t in terms.TERMS], indent=2))
        else:
            print(listing())
        return 0
    if not args.term:
        raise IntrospectError("TERM: name a term (or --list to see them all)")
    found = terms.lookup(args.term.strip())
    if found is None:
        raise unknown(args.term.strip())
    if args.json:
        print(json.dumps({**found.to_json(), "asked": args.term.strip()}, indent=2))
    else:
        print(text(found, args.term.strip()))
    return 0
