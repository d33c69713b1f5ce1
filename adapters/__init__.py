"""Adapters: every input source reduced to a ModelSpec with its exact parameter count.

:func:`resolve` is the one entry point the commands call. It tries, in order:

1. an existing local path — a ``config.json`` (or any JSON config file), a ``.safetensors``
   file, or a folder holding safetensors and/or ``config.json`` (safetensors win: their
   headers give the exact count);
2. the reference models bundled in ``adapters/data/`` (by Hub id or folder name; skipped
   when a ``revision`` is asked for, since the bundled copy is one fixed revision);
3. the Hugging Face cache, then the Hub (``adapters/hub.py``), for a string shaped like a
   Hub id ``org/name``.

Anything else is one :class:`IntrospectError` line saying what was tried.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from introspect._record import field, record
from introspect.errors import HubError, IntrospectError
from introspect.spec import ModelSpec

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any

#: Where a resolved model came from.
ORIGINS = ("bundled", "config", "checkpoint", "cache", "hub", "nominal")

# Hugging Face repo ids: "org/name", letters, digits, "-", "_", "." (no "--" or "..").
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")


@record
class ResolvedModel:
    """A model the tool can describe: its spec (``num_parameters`` set to the exact
    count), where it came from, and its parameters by component (summing exactly to
    ``spec.n_params``)."""

    spec: ModelSpec
    #: One of :data:`ORIGINS`.
    origin: str
    #: The path or Hub id it was read from.
    location: str
    params_by_component: dict[str, int]
    #: What the reader wants the user to know about the source, in words.
    notes: tuple[str, ...] = ()
    revision: str | None = None
    #: Origin-specific details (a checkpoint's tensor inventory, the config path, …).
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_params(self) -> int:
        return self.spec.n_params


def resolve(
    source: str,
    *,
    revision: str | None = None,
    force: bool = False,
    timeout: float | None = None,
) -> ResolvedModel:
    """The model ``source`` names: a local path, a bundled model, or a Hub id (cache
    first, then the Hub). ``revision`` (a branch, tag or commit) applies to the Hub.
    An implausible shape (:mod:`introspect.bounds`) is an error unless ``force``;
    ``timeout`` bounds the whole Hub resolution (:func:`.hub.timeout_seconds`)."""
    from introspect import bounds

    model = _resolve(source, revision, timeout)
    where = model.extra.get("config_path") or model.location
    if model.origin in ("hub", "cache"):
        where = f"{model.location} (config.json)"
    bounds.check_spec(model.spec, str(where), force=force)
    return model


def _resolve(source: str, revision: str | None, timeout: float | None) -> ResolvedModel:
    if not isinstance(source, str) or not source.strip():
        raise IntrospectError("no model given; pass a config.json, a checkpoint, or a Hub id")
    path = Path(source).expanduser()
    if path.exists():
        return _from_path(path)
    nominal = _from_nominal(source)
    if nominal is not None:
        return nominal
    from . import bundled

    if revision is None:
        model = bundled.lookup(source)
        if model is not None:
            return _from_bundled(model)
    if _looks_like_path(source):
        raise IntrospectError(f"{source}: no such file or folder")
    if _HUB_ID.match(source) and "--" not in source and ".." not in source:
        try:
            return _from_hub(source, revision, timeout)
        except HubError as e:
            if revision is not None and bundled.lookup(source) is not None:
                raise HubError(
                    f"{e} (the bundled copy of {source} is used only without --revision)"
                ) from e
            raise
    raise IntrospectError(
        f"{source!r} is not an existing path, a bundled model (see 'introspect profile "
        "--list') or a Hub id of the form org/name"
    )


def _from_nominal(source: str) -> ResolvedModel | None:
    """The seed's nominal sizes (10M … 70B) as ``introspect measure`` builds them: the
    size table's synthetic standard transformer, N counted from its structure."""
    if "/" in source:  # every nominal size is a bare name (40M); spares the import
        return None
    from introspect.measure.shapes import nominal_spec

    spec = nominal_spec(source)
    if spec is None:
        return None
    spec, by_component = _structural(spec)
    return ResolvedModel(
        spec=spec,
        origin="nominal",
        location=source,
        params_by_component=by_component,
        notes=("the seed's size table: a synthetic standard transformer, N from its structure",),
    )


def _looks_like_path(source: str) -> bool:
    return (
        source.startswith(("/", "./", "../", "~", "."))
        or "\\" in source
        or source.count("/") > 1
        or source.endswith((".json", ".safetensors"))
    )


def _from_path(path: Path) -> ResolvedModel:
    if path.is_dir():
        if _has_safetensors(path):
            return _from_checkpoint(path)
        if (path / "config.json").is_file():
            return _from_config_file(path / "config.json")
        raise IntrospectError(
            f"{path}: no config.json or *.safetensors in this folder; point at a model "
            "folder, a config.json or a .safetensors file"
        )
    if path.name.endswith((".safetensors", ".safetensors.index.json")):
        return _from_checkpoint(path)
    if path.is_file():
        return _from_config_file(path)
    raise IntrospectError(f"{path}: not a regular file or folder")


def _has_safetensors(folder: Path) -> bool:
    try:
        names = os.listdir(folder)
    except OSError as e:
        raise IntrospectError(f"cannot read folder {folder}: {e.strerror}") from e
    return any(n.endswith((".safetensors", ".safetensors.index.json")) for n in names)


def _structural(spec: ModelSpec) -> tuple[ModelSpec, dict[str, int]]:
    """The spec with N set to its structural count, and that count by component. A spec
    that already carries an exact count (a model_type read from transformers' meta-device
    build) keeps it; what the structure read does not place is ``other``."""
    from introspect.params import COMPONENTS, parameters_by_component

    if spec.unmodelled and spec.num_parameters is not None:  # no structure was read
        return spec, {**dict.fromkeys(COMPONENTS, 0), "other": spec.num_parameters}
    by_component = parameters_by_component(spec.replace(num_parameters=None))
    structural = sum(by_component.values())
    if spec.num_parameters is not None and spec.num_parameters != structural:
        by_component["other"] = spec.num_parameters - structural
        return spec, by_component
    return spec.replace(num_parameters=structural), by_component


def _from_config_file(path: Path) -> ResolvedModel:
    from .hf_config import load_config, spec_from_config

    config = load_config(path)
    spec, by_component = _structural(spec_from_config(config, source=str(path), path=str(path)))
    return ResolvedModel(
        spec=spec,
        origin="config",
        location=str(path),
        params_by_component=by_component,
        notes=("count derived from the config's structure (no checkpoint read)",),
        extra={"config_path": str(path)},
    )


def _from_bundled(model) -> ResolvedModel:
    spec, by_component = _structural(model.spec())
    notes = [f"bundled reference config ({model.source}); exact count from the checkpoint"]
    if model.note:
        notes.append(model.note)
    if spec.n_params != model.parameters:  # the bundled-model tests keep this from happening
        notes.append(
            f"the structure gives {spec.n_params:,} but the checkpoint holds {model.parameters:,}"
        )
    return ResolvedModel(
        spec=spec,
        origin="bundled",
        location=model.hub_id,
        params_by_component=by_component,
        notes=tuple(notes),
        extra={"folder": model.folder, "published_parameters": model.parameters},
    )


def _from_checkpoint(path: Path) -> ResolvedModel:
    from .safetensors import read_checkpoint

    ckpt = read_checkpoint(path)
    by_component = dict(ckpt.params_by_component)
    _check_sum(str(path), by_component, ckpt.parameter_count)
    notes = [*ckpt.notes, *(f"config.json vs tensor shapes: {m}" for m in ckpt.mismatches)]
    return ResolvedModel(
        spec=ckpt.spec.replace(num_parameters=ckpt.parameter_count),
        origin="checkpoint",
        location=str(path),
        params_by_component=by_component,
        notes=tuple(notes),
        extra={
            "files": [str(f) for f in ckpt.files],
            "config_path": str(ckpt.config_path) if ckpt.config_path else None,
            "params_by_dtype": dict(ckpt.params_by_dtype),
            "tensors": ckpt.tensors,
            "buffers": ckpt.buffers,
        },
    )


def _from_hub(repo_id: str, revision: str | None, timeout: float | None = None) -> ResolvedModel:
    """The config read through the registry; the exact count from the safetensors
    headers when the cache or the Hub has them (they are the checkpoint), else from the
    config's structure."""
    from .hf_config import spec_from_config
    from .hub import fetch

    model = fetch(repo_id, revision=revision, timeout=timeout)
    config_spec = spec_from_config(
        model.config, source=repo_id, path=f"{repo_id}: {model.config_path}"
    )
    spec, by_component = _structural(config_spec)
    notes = list(model.notes)
    held = model.parameter_count
    if held is None:
        notes.append("exact count from the config's structure (no safetensors headers to check)")
    elif held == spec.n_params:
        notes.append("count agrees with the checkpoint's safetensors headers")
    else:
        notes.append(
            f"the safetensors headers hold {held:,} parameters, the config's structure "
            f"{spec.n_params:,} (difference {held - spec.n_params:+,}); the headers are used"
        )
        by_component = dict(model.params_by_component or {})
        _check_sum(repo_id, by_component, held)
        spec = spec.replace(num_parameters=held)
    return ResolvedModel(
        spec=spec,
        origin=model.origin,
        location=repo_id,
        params_by_component=by_component,
        notes=tuple(notes),
        revision=revision,
        extra={
            "config_path": model.config_path,
            "commit": model.commit,
            "safetensors_parameter_count": held,
            "params_by_dtype": dict(model.params_by_dtype),
        },
    )


def _check_sum(where: str, by_component: dict[str, int], total: int) -> None:
    if sum(by_component.values()) != total:
        raise IntrospectError(
            f"{where}: components sum to {sum(by_component.values()):,} but the headers "
            f"count {total:,}; please report this checkpoint"
        )


__all__ = ["ORIGINS", "ResolvedModel", "resolve"]
