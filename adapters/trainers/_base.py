"""What every trainer reader shares: a value with its origin, the resolved setup, the
file loader (JSON or YAML by content, not by name) and a key-by-key reader that checks
types and leaves no key unaccounted for.

A reader maps a trainer's keys onto :class:`introspect.setup.TrainingSetup` fields; each
value carries where it came from — the file's key, the trainer's own default (with the
trainer's version and the source line it was read from) — and every memory-relevant key
that the closed form does not model becomes a note, never silently dropped.
"""

from __future__ import annotations

from introspect.errors import IntrospectError

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any


class ConfigFileError(IntrospectError):
    """A trainer config that cannot be read: the one line names the file, the key and
    what to do."""


class Value:
    """A setup field's value and where it came from (``origin``: ``"train.yaml:
    micro_batch_size"``, ``"transformers 5.24.0 default (training_args.py:812)"``,
    ``"introspect default"``, ``"flag --seq"``)."""

    __slots__ = ("value", "origin")

    def __init__(self, value: Any, origin: str) -> None:
        self.value = value
        self.origin = origin

    def __repr__(self) -> str:
        return f"Value({self.value!r}, {self.origin!r})"

    def to_json(self) -> dict[str, Any]:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"value": value, "origin": self.origin}


class Resolved:
    """A trainer config read: the trainer, the files, the model (a Hub id or path, or
    None), the setup fields with origins, the notes (memory-relevant keys not modelled,
    defaults assumed) and ``unsupported``: fields whose value the closed form cannot
    price (field → the line to raise unless a flag overrides it)."""

    def __init__(self, trainer: str, files: list[str]) -> None:
        self.trainer = trainer
        self.files = files
        self.model: Value | None = None
        self.fields: dict[str, Value] = {}
        self.notes: list[str] = []
        self.unsupported: dict[str, str] = {}
        #: Keys read that do not bear on memory (paths, logging, schedules), by count.
        self.ignored = 0
        #: Set by the command: fields a flag overrode (field → "flag --x"), and the model
        #: used (the config's, or SOURCE).
        self.overridden: dict[str, str] = {}
        self.model_used: Value | None = None
        #: What the user typed that brought these values: ``--config`` (a file), or
        #: ``--trainer hf`` (that trainer's defaults, no file).
        self.flag = "--config"
        #: peft's ``layers_to_transform`` as the file lists it (sorted indices, origin),
        #: read as ``num_layers``; checked against the model's top blocks once it is known.
        self.layer_indices: tuple[list[int], str] | None = None

    def set(self, field: str, value: Any, origin: str) -> None:
        self.fields[field] = Value(value, origin)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def refuse(self, field: str, line: str) -> None:
        self.unsupported[field] = line


MISSING = object()


def load(path: str) -> tuple[dict[str, Any], str]:
    """The file's top-level mapping and its format (``json`` or ``yaml``), read by
    content: a first non-blank character ``{`` is JSON, anything else YAML (PyYAML's
    ``safe_load``, imported only then)."""
    import os
    import stat

    from introspect import files

    shown = files.display(path)
    try:  # a FIFO or a device would block or never end: only a regular file is read
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise ConfigFileError(f"--config {shown} is not a regular file; give the config file")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(4_000_001)
    except FileNotFoundError:
        raise ConfigFileError(f"--config {shown}: no such file") from None
    except IsADirectoryError:
        raise ConfigFileError(f"--config {shown} is a folder; give the config file") from None
    except UnicodeDecodeError:
        raise ConfigFileError(
            f"--config {shown} is not text (not UTF-8); give a JSON or YAML trainer config"
        ) from None
    except OSError as err:
        raise ConfigFileError(f"--config {shown}: cannot read it ({err.strerror})") from None
    if len(text) > 4_000_000:
        raise ConfigFileError(f"--config {shown} is over 4 MB; no trainer config is that big")
    if text.lstrip().startswith("{"):
        import json

        try:
            data, kind = json.loads(text), "json"
        except json.JSONDecodeError as err:
            raise ConfigFileError(
                f"--config {shown}: JSON syntax error at line {err.lineno} column "
                f"{err.colno} ({err.msg}); fix the file"
            ) from None
    else:
        import yaml

        try:
            data, kind = yaml.safe_load(text), "yaml"
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
            what = getattr(err, "problem", None) or "not YAML"
            raise ConfigFileError(
                f"--config {shown}: YAML syntax error{where} ({what}); fix the file"
            ) from None
    if not isinstance(data, dict) or not data:
        raise ConfigFileError(
            f"--config {shown} is not a trainer config (a JSON or YAML mapping of keys); "
            "give a TrainingArguments/TRL/axolotl/LLaMA-Factory/torchtune/mlx-lm/DeepSpeed/"
            "accelerate config"
        )
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigFileError(f"--config {shown}: key {bad[0]!r} is not a name; fix the file")
    return data, kind


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
_TYPE_NAMES.update({dict: "a mapping", list: "a list", type(None): "null"})


class Keys:
    """The keys of one file, taken one at a time with their types checked; what is left
    at the end is either known to the trainer and not memory-relevant (counted) or
    unknown (refused: :meth:`finish`)."""

    def __init__(self, path: str, data: dict[str, Any], trainer: str, prefix: str = "") -> None:
        from introspect import files

        self.path = path
        self.shown = files.display(path)
        self.data = data
        self.trainer = trainer
        self.prefix = prefix
        self.taken: set[str] = set()

    def origin(self, key: str) -> str:
        return f"{self.shown}: {self.prefix}{key}"

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def get(self, key: str, types: tuple[type, ...], default: Any = None) -> Any:
        """The key's value (``default`` when absent or null), checked against ``types``
        (``int`` admits no bool; ``float`` admits an int)."""
        self.taken.add(key)
        if key not in self.data or self.data[key] is None:
            return default
        value = self.data[key]
        ok = any(
            (t is int and isinstance(value, int) and not isinstance(value, bool))
            or (t is float and isinstance(value, (int, float)) and not isinstance(value, bool))
            or (t not in (int, float) and isinstance(value, t))
            for t in types
        )
        if not ok:
            want = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
            raise self.error(key, f"is {value!r}, not {want}")
        return value

    def error(self, key: str, what: str, todo: str = "fix the value") -> ConfigFileError:
        return ConfigFileError(f"--config {self.shown}: {self.prefix}{key} {what}; {todo}")

    def positive(self, key: str, default: Any = None) -> Any:
        value = self.get(key, (int,), default)
        if value is not None and value <= 0:
            raise self.error(key, f"is {value}, not a positive integer")
        return value

    def finish(self, known: frozenset[str] | set[str], resolved: Resolved) -> None:
        """Every key not taken must be one the trainer has (and is counted as not bearing
        on memory); any other is refused."""
        for key in self.data:
            if key in self.taken:
                continue
            if key in known:
                resolved.ignored += 1
                continue
            raise ConfigFileError(
                f"--config {self.shown}: {self.prefix}{key} is not an option of "
                f"{self.trainer} that introspect knows; check its spelling or remove it"
            )

    def not_modelled(self, resolved: Resolved, key: str, *, unless: Any = MISSING) -> None:
        """A memory-relevant key the closed form does not model: a note when its value
        is not the trainer's neutral ``unless`` (absent keys say nothing)."""
        self.taken.add(key)
        if key not in self.data or self.data[key] is None:
            return
        value = self.data[key]
        if unless is not MISSING and value == unless:
            return
        resolved.note(f"`{self.prefix}{key}: {_show(value)}` ({self.shown}) — not modelled")


def _show(value: Any) -> str:
    import json

    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def accumulation(keys: Keys, resolved: Resolved, key: str = "gradient_accumulation_steps") -> None:
    """Gradient accumulation from the trainer's ``key`` (``gradient_accumulation_steps``;
    mlx-lm's ``grad_accumulation_steps``) into ``grad_accum``, where the file sets it
    (the earlier micro-batches' gradients stay alive: 4 bytes per trainable parameter)."""
    steps = keys.positive(key)
    if steps is not None:
        resolved.set("grad_accum", steps, keys.origin(key))
