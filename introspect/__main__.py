"""`python -m introspect` is the `introspect` command."""

from introspect.cli import main

raise SystemExit(main())
