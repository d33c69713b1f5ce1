"""Sub-commands of `introspect`, one module each, each with ``add_parser`` and ``run``."""
