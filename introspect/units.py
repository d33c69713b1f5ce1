"""Units, in one place. Memory is decimal GB (1 GB = 1e9 bytes) as the seed writes it,
unless ``--units GiB`` asks for binary GiB (2**30 bytes); a budget accepts either, and a
device's memory is stated in the unit its maker uses (:mod:`introspect.devices`)."""

from __future__ import annotations

import re

GB = 10**9
GiB = 2**30

#: Bytes per unit name a budget or ``--units`` accepts (case-insensitive keys).
MEMORY_UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": GB,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": GiB,
    "TiB": 2**40,
}

#: The units ``--units`` offers for printed memory.
DISPLAY_UNITS = ("GB", "GiB")

_display = {"unit": "GB"}

_MEMORY = re.compile(r"^\s*([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]+)\s*$")

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
    """Bytes as a string in the display unit (decimal GB unless ``--units GiB``) with
    ``digits`` decimals, e.g. ``'26.771'`` (:func:`scaled`)."""
    return scaled(n_bytes, display_divisor(), digits)


def scaled(n_bytes: int | float, per: int, digits: int) -> str:
    """``n_bytes / per`` with ``digits`` decimals; an integer past a float's range (only
    ``--force`` lets one through) is written ``1.00e300`` from its digits instead of the
    division's OverflowError."""
    try:
        return f"{n_bytes / per:.{digits}f}"
    except OverflowError:
        from introspect.bounds import fmt_big

        return fmt_big(int(n_bytes) // per)


def fmt_count(n: int) -> str:
    """An exact integer with thousands separators: ``494,032,768``."""
    return f"{n:,}"


def set_display_unit(unit: str) -> None:
    """Print memory in ``unit`` (``GB`` or ``GiB``) from now on; ``--units`` calls this."""
    if unit not in DISPLAY_UNITS:
        raise ValueError(f"unknown unit {unit!r}; expected GB or GiB")
    _display["unit"] = unit


def display_unit() -> str:
    """The unit printed memory is in: ``GB`` (default) or ``GiB``."""
    return _display["unit"]


def display_divisor() -> int:
    """Bytes per printed unit."""
    return MEMORY_UNITS[_display["unit"]]


def unit_name(text: str) -> str:
    """The canonical spelling of a memory unit (``gib`` → ``GiB``); ValueError otherwise."""
    for name in MEMORY_UNITS:
        if name.lower() == text.strip().lower():
            return name
    raise ValueError(f"unknown unit {text!r}; expected one of {', '.join(MEMORY_UNITS)}")


#: The largest amount :func:`parse_memory` accepts: 10^18 bytes (an exabyte, 10^9 GB),
#: far above any device's memory; past it a budget is a typo (``1e400GB``).
MAX_MEMORY_BYTES = 10**18


def shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for a message, cut to ``limit`` characters (a 5000-digit value is
    not echoed whole)."""
    text = str(text)
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"… ({len(text):,} chars)"


def parse_memory(text: str) -> int:
    """An amount of memory with its unit, in bytes: ``80GB`` = 80e9, ``80GiB`` = 80·2³⁰,
    ``1.5 TB``. Bounds first (on the float, which is infinite past 1e308 rather than an
    error), then the exact value in integers (:func:`_exact_bytes`), rounded half to even
    to whole bytes; a bare number, zero, a negative amount, less than a byte, or more
    than :data:`MAX_MEMORY_BYTES` is a ValueError naming what to write."""
    match = _MEMORY.match(str(text))
    if not match:
        raise ValueError(
            f"{shown(text)} is not an amount of memory; write a number and a unit, e.g. 80GB "
            "or 80GiB (GB = 1e9 bytes, GiB = 2^30)"
        )
    number, unit = match.group(1), match.group(2)
    try:
        per = MEMORY_UNITS[unit_name(unit)]
    except ValueError:
        raise ValueError(
            f"{shown(text)}: unknown unit {shown(unit)}; use GB (1e9 bytes) or GiB (2^30), "
            "or MB/MiB/TB/TiB"
        ) from None
    mantissa = _MANTISSA.match(number)
    assert mantissa is not None  # _MEMORY's number is always one
    zero = not any(c in "123456789" for c in mantissa["int"] + mantissa["frac"])
    if mantissa["sign"] == "-" or zero:
        raise ValueError(f"{shown(text)}: a memory budget must be positive")
    allowed = f"allowed: 1 byte to {MAX_MEMORY_BYTES // GB:,} GB (1e18 bytes)"
    approx = float(number) * per
    if approx > 2 * MAX_MEMORY_BYTES:
        raise ValueError(f"{shown(text)} is over the largest memory budget; {allowed}")
    if approx < 0.25:
        raise ValueError(f"{shown(text)} is less than one byte; {allowed}")
    n_bytes = _exact_bytes(mantissa["int"], mantissa["frac"], mantissa["exp"], per)
    if n_bytes > MAX_MEMORY_BYTES:
        raise ValueError(f"{shown(text)} is over the largest memory budget; {allowed}")
    if n_bytes < 1:
        raise ValueError(f"{shown(text)} is less than one byte; {allowed}")
    return n_bytes


_MANTISSA = re.compile(
    r"^(?P<sign>[+-]?)(?P<int>[0-9]*)\.?(?P<frac>[0-9]*)(?:[eE](?P<exp>[+-]?[0-9]+))?$"
)

#: Significant digits kept of a typed number: far more than whole bytes of 10^18 need.
_DIGITS = 60


def _exact_bytes(whole: str, frac: str, exp: str | None, per: int) -> int:
    """``whole.frac × 10^exp × per`` rounded half to even, in integers only (no float
    rounding, no decimal/fractions import). The caller has bounded the magnitude, so the
    powers of ten here stay small."""
    digits = (whole + frac).lstrip("0") or "0"
    exp = exp or "0"
    shift = int(exp.lstrip("+-").lstrip("0") or "0") * (-1 if exp.startswith("-") else 1)
    shift -= len(frac)
    # digits dropped from the end (beyond _DIGITS significant ones) move into the shift
    if len(digits) > _DIGITS:
        shift += len(digits) - _DIGITS
        digits = digits[:_DIGITS]
    num = int(digits) * per
    if shift >= 0:
        return num * 10**shift
    q, r = divmod(num, 10**-shift)
    den = 10**-shift
    return q + (2 * r > den or (2 * r == den and q % 2 == 1))


def fmt_memory(n_bytes: int | float, digits: int = 2, unit: str | None = None) -> str:
    """Bytes with their unit, e.g. ``'26.77 GB'`` (the display unit unless ``unit``)."""
    unit = unit or display_unit()
    return f"{scaled(n_bytes, MEMORY_UNITS[unit], digits)} {unit}"
