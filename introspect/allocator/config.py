"""``PYTORCH_CUDA_ALLOC_CONF`` read as torch 2.13 reads it.

Sources (torch 2.13, git cf30153c; the header ships in the wheel,
``torch/include/c10/core/AllocatorConfig.h``; the ``.cpp`` files are pytorch/pytorch's):

* ``ConfigTokenizer`` (``AllocatorConfig.h``): ``,`` ``:`` ``[`` ``]`` are tokens of their
  own, whitespace is dropped, everything else makes up keys and values.
* ``AcceleratorAllocatorConfig::parseArgs`` (``c10/core/AllocatorConfig.cpp``) reads
  ``max_split_size_mb`` (``>= large_segment_size / 1 MiB``, 20 by default, else
  "CachingAllocator option max_split_size_mb too small, must be >= 20"),
  ``max_non_split_rounding_mb`` (the same floor), ``garbage_collection_threshold`` (in
  (0, 1)), ``roundup_power2_divisions`` (one power of two, or ``[boundary_mb:divisions,
  ...,>:divisions]``), ``expandable_segments`` (``True``/``False``),
  ``large_segment_size_mb`` and ``pinned_use_background_threads``; other keys are
  skipped there and checked by the device's hook, ``CUDAAllocatorConfig::parseArgs``
  (``c10/cuda/CUDAAllocatorConfig.cpp``), against ``CUDAAllocatorConfig::getKeys()``
  (``CUDAAllocatorConfig.h``): an unknown key is "Unrecognized key ... in CUDA allocator
  config".
* ``CUDAAllocatorConfig::instance()`` (``CUDAAllocatorConfig.h``) reads
  ``PYTORCH_CUDA_ALLOC_CONF``, else ``PYTORCH_ALLOC_CONF``.
* Each ``parseArgs`` resets ``max_split_size``, ``roundup_power2_divisions`` and
  ``garbage_collection_threshold`` to their defaults first.
"""

from __future__ import annotations

from introspect._record import record, replace
from introspect.errors import IntrospectError

MiB = 2**20
#: ``kRoundUpPowerOfTwoIntervals``: one division count per power of two from 1 MiB
#: (``kRoundUpPowerOfTwoStart``) to 64 GiB (``kRoundUpPowerOfTwoEnd``).
INTERVALS = 16
UNLIMITED = 2**64 - 1  # std::numeric_limits<size_t>::max()

#: Keys ``AcceleratorAllocatorConfig::parseArgs`` parses itself.
COMMON_KEYS = (
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "garbage_collection_threshold",
    "roundup_power2_divisions",
    "expandable_segments",
    "large_segment_size_mb",
    "pinned_use_background_threads",
)
#: ``CUDAAllocatorConfig::getKeys()`` (CUDAAllocatorConfig.h, torch 2.13): accepted, and
#: none changes how the device pool is laid out (backend:cudaMallocAsync is refused below).
CUDA_KEYS = (
    "backend",
    "release_lock_on_cudamalloc",
    "pinned_use_cuda_host_register",
    "release_lock_on_hipmalloc",
    "pinned_use_hip_host_register",
    "graph_capture_record_stream_reuse",
    "pinned_reserve_segment_size_mb",
    "pinned_num_register_threads",
    "per_process_memory_fraction",
    "pinned_free_catch_all",
    "throw_on_cudamalloc_oom",
)
ENV_NAMES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


@record
class AllocatorConfig:
    """The settings the caching allocator's layout depends on (torch's defaults)."""

    max_split_size: int = UNLIMITED
    max_non_split_rounding_size: int = 20 * MiB
    garbage_collection_threshold: float = 0.0
    roundup_power2_divisions: tuple[int, ...] = (0,) * INTERVALS
    expandable_segments: bool = False
    large_segment_size: int = 20 * MiB
    per_process_memory_fraction: float = 1.0
    #: The string it was read from ("" for torch's defaults).
    text: str = ""

    def divisions(self, size: int) -> int:
        """``AcceleratorAllocatorConfig::roundup_power2_divisions(size)``: the count for the
        power-of-two interval ``size`` falls in (below 1 MiB: the first; above 32 GiB: the
        last)."""
        log_size = size.bit_length() - 1
        index = max(0, log_size - 20)
        return self.roundup_power2_divisions[min(index, INTERVALS - 1)]


def _bad(text: str, why: str) -> IntrospectError:
    return IntrospectError(
        f"PYTORCH_CUDA_ALLOC_CONF={text!r}: {why} (torch would refuse it at its first CUDA "
        "allocation); fix the setting or unset it"
    )


def tokens(text: str) -> list[str]:
    """``ConfigTokenizer``: separators are tokens, whitespace dropped."""
    out: list[str] = []
    buf = ""
    for ch in text:
        if ch in ",:[]":
            if buf:
                out.append(buf)
                buf = ""
            out.append(ch)
        elif not ch.isspace():
            buf += ch
    if buf:
        out.append(buf)
    return out


def _int(text: str, value: str, key: str) -> int:
    if not value.isdigit():
        raise _bad(text, f"{key} needs a whole number, not {value!r}")
    return int(value)


def _bool(text: str, value: str, key: str) -> bool:
    if value not in ("True", "False"):
        raise _bad(text, f"Expected 'True' or 'False' for {key}, got {value!r}")
    return value == "True"


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _divisions(text: str, toks: list[str], i: int) -> tuple[tuple[int, ...], int]:
    """``parseRoundUpPower2Divisions``: returns the 16 counts and the index of the last
    token read."""
    out = [0] * INTERVALS
    if i >= len(toks):
        raise _bad(text, "roundup_power2_divisions needs a value")
    if toks[i] != "[":
        value = _int(text, toks[i], "roundup_power2_divisions")
        if not _pow2(value):
            raise _bad(text, "For roundups, the divisions has to be power of 2")
        return (value,) * INTERVALS, i
    first, last_index = True, 0
    i += 1
    while i < len(toks) and toks[i] != "]":
        boundary = toks[i]
        if i + 2 >= len(toks) or toks[i + 1] != ":":
            raise _bad(text, "roundup_power2_divisions entries are boundary_mb:divisions")
        value = _int(text, toks[i + 2], "roundup_power2_divisions")
        if value != 0 and not _pow2(value):
            raise _bad(text, "For roundups, the divisions has to be power of 2 or 0")
        i += 2
        if boundary == ">":
            for j in range(last_index + 1, INTERVALS):
                out[j] = value
        else:
            mb = _int(text, boundary, "roundup_power2_divisions")
            if not _pow2(mb):
                raise _bad(text, "For roundups, the intervals have to be power of 2")
            index = min(max(mb.bit_length() - 1, 0), INTERVALS - 1)
            if first:
                for j in range(index):
                    out[j] = value
                first = False
            out[index] = value
            last_index = index
        if i + 1 < len(toks) and toks[i + 1] != "]":
            if toks[i + 1] != ",":
                raise _bad(text, "expected ',' between roundup_power2_divisions entries")
            i += 1
        i += 1
    if i >= len(toks):
        raise _bad(text, "roundup_power2_divisions list has no closing ']'")
    return tuple(out), i


def parse(text: str) -> AllocatorConfig:
    """``text`` as torch's two ``parseArgs`` read it; a setting torch refuses is one
    :class:`IntrospectError` line naming it."""
    cfg = AllocatorConfig(text=text)
    toks = tokens(text)
    i = 0
    while i < len(toks):
        key = toks[i]
        if key not in COMMON_KEYS and key not in CUDA_KEYS:
            raise _bad(text, f"Unrecognized key {key!r} in CUDA allocator config")
        if i + 2 >= len(toks) or toks[i + 1] != ":":
            raise _bad(text, f"{key} needs ':' and a value")
        value, i = toks[i + 2], i + 2
        floor_mb = cfg.large_segment_size // MiB
        if key == "max_split_size_mb":
            mb = _int(text, value, key)
            if mb < floor_mb:
                raise _bad(
                    text,
                    f"CachingAllocator option max_split_size_mb too small, must be >= {floor_mb}",
                )
            cfg = replace(cfg, max_split_size=min(mb, UNLIMITED // MiB) * MiB)
        elif key == "max_non_split_rounding_mb":
            mb = _int(text, value, key)
            if mb < floor_mb:
                raise _bad(
                    text,
                    f"CachingAllocator option max_non_split_rounding_mb too small, must be >= "
                    f"{floor_mb}",
                )
            cfg = replace(cfg, max_non_split_rounding_size=mb * MiB)
        elif key == "large_segment_size_mb":
            mb = _int(text, value, key)
            if mb <= 2:
                raise _bad(text, "CachingAllocator option large_segment_size_mb must be > 2 MB")
            cfg = replace(cfg, large_segment_size=mb * MiB)
        elif key == "garbage_collection_threshold":
            try:
                threshold = float(value)
            except ValueError:
                raise _bad(text, f"{key} needs a number, not {value!r}") from None
            if not 0 < threshold < 1:
                raise _bad(text, "garbage_collect_threshold is invalid, set it in (0.0, 1.0)")
            cfg = replace(cfg, garbage_collection_threshold=threshold)
        elif key == "roundup_power2_divisions":
            divisions, i = _divisions(text, toks, i)
            cfg = replace(cfg, roundup_power2_divisions=divisions)
        elif key == "expandable_segments":
            cfg = replace(cfg, expandable_segments=_bool(text, value, key))
        elif key == "per_process_memory_fraction":
            try:
                fraction = float(value)
            except ValueError:
                raise _bad(text, f"{key} needs a number, not {value!r}") from None
            if not 0 <= fraction <= 1:
                raise _bad(text, "per_process_memory_fraction must be in [0.0, 1.0]")
            cfg = replace(cfg, per_process_memory_fraction=fraction)
        elif key == "backend":
            if value == "cudaMallocAsync":
                raise IntrospectError(
                    f"PYTORCH_CUDA_ALLOC_CONF={text!r}: backend:cudaMallocAsync is CUDA's own "
                    "pool, not torch's caching allocator: its reserve is not modelled; use "
                    "backend:native or unset it"
                )
            if value != "native":
                raise _bad(
                    text, "Unknown allocator backend, options are native and cudaMallocAsync"
                )
        elif value == "[":  # a list-valued key that does not shape the device pool
            while i < len(toks) and toks[i] != "]":
                i += 1
        i += 1
        if i < len(toks):
            if toks[i] != ",":
                raise _bad(text, f"expected ',' after {key}")
            i += 1
    return cfg


def from_environ(environ) -> tuple[AllocatorConfig, str | None]:
    """The config torch would read from ``environ`` and the variable it came from (None:
    neither is set; torch's defaults)."""
    for name in ENV_NAMES:
        text = environ.get(name)
        if text is not None:
            return parse(text), name
    return AllocatorConfig(), None


def with_expandable(cfg: AllocatorConfig, on: bool) -> AllocatorConfig:
    """``cfg`` with ``expandable_segments`` set to ``on``."""
    return replace(cfg, expandable_segments=on)
