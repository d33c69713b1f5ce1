"""The tool's own exceptions: each carries the one line a user sees."""


class IntrospectError(Exception):
    """Bad input or an unusable source. ``str(err)`` is the whole message for the user:
    what was wrong, where (file or flag), and what to do."""

    exit_code = 2


class UnsupportedArchitecture(IntrospectError):
    """A config whose ``model_type`` no adapter knows."""


class CheckpointError(IntrospectError):
    """A checkpoint file or folder that cannot be read as safetensors."""


class ConfigError(IntrospectError):
    """A config.json with missing keys, wrong types or impossible values."""


class HubError(IntrospectError):
    """The Hub or its cache could not give what was asked (offline, gated, missing, failing)."""


class DryRunCannot(IntrospectError):
    """A step whose held bytes follow values computed from the data, which a dry run's
    fake tensors do not have (``introspect.measure.fake.DRY_RUN_CANNOT``)."""
