"""Units, in one place. Memory is decimal GB (1 GB = 1e9 bytes) as the seed writes it;
nothing in the tool prints GiB."""

GB = 10**9

#: Bytes per element of each dtype name the tool accepts (CLI flags and configs).
DTYPE_BYTES: dict[str, int] = {
    "fp32": 4,
    "float32": 4,
    "tf32": 4,
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "fp8": 1,
    "int8": 1,
}

#: The dtype names shown in help texts.
DTYPE_CHOICES = ("fp32", "bf16", "fp16", "fp8", "int8")


def dtype_bytes(name: str) -> int:
    """Bytes per element for ``name`` (``fp32``, ``bf16``, …). Raises ValueError naming the
    accepted names for anything else."""
    try:
        return DTYPE_BYTES[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown dtype {name!r}; expected one of {', '.join(DTYPE_CHOICES)}"
        ) from None


def fmt_gb(n_bytes: int | float, digits: int = 3) -> str:
    """Bytes as a decimal-GB string with ``digits`` decimals, e.g. ``'26.771'``."""
    return f"{n_bytes / GB:.{digits}f}"


def fmt_count(n: int) -> str:
    """An exact integer with thousands separators: ``494,032,768``."""
    return f"{n:,}"
