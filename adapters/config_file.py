"""Reading a ``config.json`` (or any small JSON settings file beside a checkpoint) as one
JSON object, every failure one line naming the file. Shared by the config reader and the
quantized-checkpoint reader (``quantize_config.json``)."""

from __future__ import annotations

import json
import os

from introspect.errors import ConfigError

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any

#: A config.json larger than this is not a config (guards against reading a checkpoint).
MAX_CONFIG_BYTES = 16 * 1024 * 1024


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object in ``path``; one-line :class:`ConfigError` when the file cannot be
    read, is not JSON, or is not a JSON object."""
    path = os.fspath(path)
    try:
        if os.path.getsize(path) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: too large for a config.json (over 16 MB)")
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ConfigError(f"cannot read {path}: {reason}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text, so not a config.json") from e
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})"
        ) from e
    except RecursionError as e:
        raise ConfigError(f"{path}: JSON nested too deeply to be a config.json") from e
    except ValueError as e:  # an integer of over 4300 digits: Python will not read it
        raise ConfigError(f"{path}: a value is too large to read ({e})") from e
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a JSON object, found {type(config).__name__}")
    return config
