"""A local safetensors checkpoint, read by its headers only: exact parameter counts per
dtype and per component, a tensor inventory with roles, buffers apart, and a ModelSpec.

Accepts one ``.safetensors`` file, or a folder holding ``model.safetensors``, or shards
listed by ``model.safetensors.index.json`` (with or without ``config.json``). Headers are
read through the safetensors library's own reader (``safe_open`` → ``get_slice(name)`` →
``get_shape()``/``get_dtype()``), which validates the JSON, the dtypes and that every
tensor's byte offsets agree with its shape; no tensor data is touched, except a
bitsandbytes 4-bit weight's quant state (a short JSON that records its shape). Before
``safe_open`` the 8-byte little-endian header length is checked against the file size
and a 100 MB cap (as huggingface_hub's ``_safetensors`` does), so a truncated download
gets a precise line instead of a generic one.

With config.json the spec comes from :func:`introspect.adapters.hf_config.spec_from_config`
and is cross-checked against the shapes; without it everything the shapes determine is
inferred (:mod:`.shape_spec`) and the assumed fields are listed in ``notes``.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from introspect.errors import CheckpointError, UnsupportedArchitecture
from introspect.params import parameter_count
from introspect.spec import ModelSpec

from .hf_config import load_config
from .shape_spec import check_complete, cross_check, infer_spec
from .tensor_roles import TensorInfo, tally, tensor_info

#: The most header this reader accepts; real headers are well under 1 MB per shard.
MAX_HEADER_BYTES = 100_000_000
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
CONFIG_FILE = "config.json"
_SHOWN = 3  # mismatches quoted in one line


@dataclass(frozen=True)
class Checkpoint:
    """What the headers of a local checkpoint say.

    ``parameter_count`` counts parameters only (buffers such as rotary ``inv_freq`` are in
    ``buffers``); a tied embedding is stored once, so it is counted once.
    ``params_by_component`` has every key of :data:`introspect.params.COMPONENTS` (plus
    ``other`` only when some tensor names are unrecognised) and sums to
    ``parameter_count`` exactly.
    """

    path: Path
    files: tuple[Path, ...]
    tensors: tuple[TensorInfo, ...]
    parameter_count: int
    params_by_dtype: dict[str, int]
    buffers: tuple[TensorInfo, ...]
    params_by_component: dict[str, int]
    config: dict | None
    config_path: Path | None
    spec: ModelSpec
    mismatches: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def buffer_count(self) -> int:
        """Elements held in buffers (not parameters)."""
        return sum(t.numel for t in self.buffers)


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint file or folder by its headers. Raises :class:`CheckpointError`
    (one line: what, which file, what to do) for anything unreadable or inconsistent."""
    root = Path(path).expanduser()
    files, index_path, config_path = _locate(root)
    notes: list[str] = []
    weight_map = _read_index(index_path) if index_path else None
    if root.is_dir() and index_path is None and len(files) > 1:
        notes.append(f"no {INDEX_FILE}: read all {len(files)} .safetensors files in the folder")

    tensors: list[TensorInfo] = []
    seen: dict[str, str] = {}
    for file in files:
        for info in read_header(file):
            if info.name in seen:
                raise CheckpointError(
                    f"{root}: tensor '{info.name}' is stored in both {seen[info.name]} and "
                    f"{file.name}; the checkpoint is inconsistent (re-download or re-save it)"
                )
            seen[info.name] = file.name
            tensors.append(info)
    if not tensors:
        shown = ", ".join(f.name for f in files[:_SHOWN])
        raise CheckpointError(f"{root}: the safetensors headers ({shown}) hold no tensors")
    if weight_map is not None:
        _check_index(index_path, weight_map, seen)

    # Quantized weights (GPTQ, AWQ, bitsandbytes, FP8, MXFP4) count the parameters they
    # stand for, by each format's packing rule.
    from .quantized import read_quant_config, unpack

    where = str(root)
    config = load_config(config_path) if config_path else None
    folder = root if root.is_dir() else root.parent
    quant = read_quant_config(config, config_path, folder)
    by_file = {f.name: f for f in files}
    tensors, quant_notes = unpack(
        tensors, quant, where=where, read=lambda t: read_tensor_bytes(by_file[t.file], t.name)
    )
    notes.extend(quant_notes)
    check_complete(tensors, where)
    counts = tally(tensors)
    if counts.unknown:
        notes.append(
            f"{len(counts.unknown)} tensors with unrecognised names counted as 'other' "
            f"(e.g. {', '.join(counts.unknown[:_SHOWN])})"
        )
    if counts.buffers:
        notes.append(
            f"{len(counts.buffers)} buffers ({counts.buffer_count:,} values, e.g. "
            f"{counts.buffers[0].name}) are stored but are not parameters"
        )
    count, by_component = counts.parameter_count, counts.params_by_component

    spec, mismatches, spec_notes = _spec(tensors, by_component, config, config_path, where)
    notes.extend(spec_notes)
    spec = spec.replace(num_parameters=count, source=where)
    return Checkpoint(
        path=root,
        files=tuple(files),
        tensors=tuple(tensors),
        parameter_count=count,
        params_by_dtype=counts.params_by_dtype,
        buffers=counts.buffers,
        params_by_component=by_component,
        config=config,
        config_path=config_path,
        spec=spec,
        mismatches=mismatches,
        notes=tuple(notes),
    )


def read_header(file: Path) -> list[TensorInfo]:
    """Names, shapes and dtypes of one safetensors file, via ``safe_open`` (headers only)."""
    _check_header_length(file)
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(file, framework="numpy") as f:
            out = []
            for name in f.offset_keys():
                view = f.get_slice(name)
                out.append(tensor_info(name, view.get_shape(), view.get_dtype(), file.name))
            return out
    except SafetensorError as e:
        raise CheckpointError(f"{file}: {_explain(str(e))}") from e
    except OSError as e:
        raise CheckpointError(f"{file}: cannot read ({e.strerror or e}); check the path") from e
    except BaseException as e:  # pyo3 raises PanicException (a BaseException) on Rust panics
        if type(e).__name__ != "PanicException":
            raise
        raise CheckpointError(f"{file}: the safetensors reader rejected the header ({e})") from e


def read_tensor_bytes(file: Path, name: str) -> bytes:
    """One small tensor's raw bytes (bitsandbytes keeps a weight's shape in a quant-state
    tensor, not in the header); the only tensor data this reader ever touches."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(file, framework="numpy") as f:
            return f.get_tensor(name).tobytes()
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{file}: cannot read tensor {name} ({e})") from e
    except BaseException as e:  # pyo3's PanicException, as in read_header
        if type(e).__name__ != "PanicException":
            raise
        raise CheckpointError(f"{file}: the safetensors reader rejected tensor {name} ({e})") from e


def _check_header_length(file: Path) -> None:
    """The first 8 bytes are the header length (little-endian u64): it must fit in the
    file and under the cap, else the file is truncated or not safetensors at all."""
    try:
        size = file.stat().st_size
        with file.open("rb") as fh:
            prefix = fh.read(8)
    except OSError as e:
        raise CheckpointError(f"{file}: cannot read ({e.strerror or e}); check the path") from e
    if len(prefix) < 8:
        raise CheckpointError(
            f"{file}: only {size} bytes, too short for a safetensors header; "
            "the file is truncated or empty (re-download it)"
        )
    (length,) = struct.unpack("<Q", prefix)
    if length > MAX_HEADER_BYTES:
        raise CheckpointError(
            f"{file}: header claims {length:,} bytes, over the {MAX_HEADER_BYTES:,}-byte "
            "limit; this is not a safetensors file or it is corrupt"
        )
    if 8 + length > size:
        raise CheckpointError(
            f"{file}: header claims {length:,} bytes but only {size - 8:,} follow; "
            "the file is truncated (re-download it)"
        )


def _explain(message: str) -> str:
    """safetensors' error text, as one line that says what to do."""
    text = " ".join(message.split()).replace("Error while deserializing header: ", "")
    if "unknown variant" in text:
        dtype = text.split("unknown variant", 1)[1].split(",")[0].strip(" `")
        return f"unknown dtype {dtype!r} in the header; the file is corrupt or from a newer format"
    if any(w in text for w in ("invalid type", "invalid value", "missing field")):
        return f"header does not describe tensors ({text}); the file is corrupt (re-download it)"
    if "invalid JSON" in text:
        return f"header is not valid JSON ({text}); the file is corrupt (re-download it)"
    if "offset" in text or "invalid shape" in text:
        return f"tensor byte offsets disagree with shapes and dtypes ({text}); the file is corrupt"
    return f"not a valid safetensors file ({text}); re-download or re-save it"


def _locate(root: Path) -> tuple[list[Path], Path | None, Path | None]:
    """(safetensors files, index file, config.json) for a file or folder."""
    if not root.exists():
        raise CheckpointError(
            f"{root}: no such file or folder; give a .safetensors file or a folder "
            f"holding {SINGLE_FILE} or {INDEX_FILE}"
        )
    folder = root if root.is_dir() else root.parent
    config = folder / CONFIG_FILE
    config_path = config if config.is_file() else None
    if root.is_file():
        if root.name.endswith(".index.json"):
            return _shards(root), root, config_path
        index = folder / INDEX_FILE
        if index.is_file() and root.name in set(_read_index(index).values()):
            # One shard of a sharded checkpoint: its index beside it names the others,
            # and the count is the whole checkpoint's, as for the folder.
            return _shards(index), index, config_path
        return [root], None, config_path
    index = root / INDEX_FILE
    if index.is_file():
        return _shards(index), index, config_path
    if (root / SINGLE_FILE).is_file():
        return [root / SINGLE_FILE], None, config_path
    try:
        files = sorted(p for p in root.glob("*.safetensors") if p.is_file())
    except OSError as e:
        raise CheckpointError(f"{root}: cannot list the folder ({e.strerror or e})") from e
    if not files:
        raise CheckpointError(
            f"{root}: no .safetensors files here (looked for {SINGLE_FILE}, {INDEX_FILE}, "
            "*.safetensors); convert the weights to safetensors or give its config.json"
        )
    return files, None, config_path


def _load_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read {what} ({e.strerror or e})") from e
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: {what} is not valid JSON ({e}); re-download it") from e
    except RecursionError as e:
        raise CheckpointError(f"{path}: {what} is nested too deeply to be one") from e
    except ValueError as e:  # an integer of over 4300 digits
        raise CheckpointError(f"{path}: {what} holds an unreadable value ({e})") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: {what} must hold a JSON object")
    return data


def _read_index(index: Path) -> dict[str, str]:
    weight_map = _load_json(index, "the shard index").get("weight_map")
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise CheckpointError(f"{index}: no 'weight_map' of tensor name → shard file")
    if not weight_map:
        raise CheckpointError(f"{index}: the weight_map is empty; re-download the checkpoint")
    return weight_map


def _shards(index: Path) -> list[Path]:
    """Shard files the index names; each must be a plain file inside the index's folder."""
    names = sorted(set(_read_index(index).values()))
    bad = [n for n in names if Path(n).is_absolute() or ".." in Path(n).parts]
    if bad:
        raise CheckpointError(f"{index}: shard paths must stay inside the folder, got {bad[0]!r}")
    missing = [n for n in names if not (index.parent / n).is_file()]
    if missing:
        raise CheckpointError(
            f"{index}: {len(missing)} of {len(names)} shards are missing "
            f"({', '.join(missing[:_SHOWN])}); finish the download"
        )
    return [index.parent / n for n in names]


def _check_index(index: Path, weight_map: dict[str, str], found: dict[str, str]) -> None:
    """The index's weight_map must name exactly the tensors the shard headers hold, each
    in the shard that holds it."""
    problems = [
        f"{name} listed in {shard} but not there"
        + (f" (in {found[name]})" if name in found else "")
        for name, shard in weight_map.items()
        if found.get(name) != Path(shard).name
    ]
    problems += [
        f"{name} in {shard} but not in the index"
        for name, shard in found.items()
        if name not in weight_map
    ]
    if problems:
        raise CheckpointError(
            f"{index}: weight_map disagrees with the shard headers in {len(problems)} places "
            f"({'; '.join(problems[:_SHOWN])}); re-download the checkpoint"
        )


def _spec(
    tensors: list[TensorInfo],
    by_component: dict[str, int],
    config: dict | None,
    config_path: Path | None,
    where: str,
) -> tuple[ModelSpec, tuple[str, ...], tuple[str, ...]]:
    """(spec, mismatches, notes): from config.json cross-checked against the shapes, or
    from the shapes alone."""
    if config is None:
        spec, notes = infer_spec(tuple(tensors), source=where, where=where)
        notes = (f"no {CONFIG_FILE}: the spec is inferred from tensor shapes", *notes)
        structural, held = parameter_count(spec), sum(by_component.values())
        if structural != held:
            notes += (
                f"the inferred structure accounts for {structural:,} of the {held:,} "
                "parameters in the headers; per-component figures are approximate",
            )
        return spec, (), notes
    from .hf_config import spec_from_config

    try:
        config_spec = spec_from_config(config, source=where, path=str(config_path))
    except UnsupportedArchitecture as e:
        spec, notes = infer_spec(tuple(tensors), source=where, where=where)
        return spec, (), (f"{e}; the spec is inferred from tensor shapes instead", *notes)
    try:
        shape_spec, _ = infer_spec(tuple(tensors), source=where, where=where, advice="")
    except CheckpointError as e:
        return config_spec, (), (f"{CONFIG_FILE} not cross-checked against the shapes: {e}",)
    mismatches = cross_check(config_spec, shape_spec, by_component)
    return config_spec, mismatches, ()
