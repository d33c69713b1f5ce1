"""Devices a training step is sized for: each one's memory as its maker states it, the
bytes that figure stands for, and where the figure comes from.

Makers write memory capacity in "GB", but the chips are binary-sized: NVIDIA's 80 GB
A100 has 81,920 MiB (= 80 GiB; what ``nvidia-smi`` lists as its total), and Apple's
"8GB unified memory" is 8 GiB (``sysctl hw.memsize`` = 8,589,934,592). So a device's
bytes are its maker's figure × 2³⁰ unless the entry says otherwise; the maker's own
words are kept beside them (``maker_figure``), and ``--units`` decides only how the tool
prints them. Some of the memory is never the program's: the CUDA context and, on a Mac,
everything beyond Metal's recommended working set (see :mod:`introspect.overhead`).
"""

from __future__ import annotations

from introspect._record import record
from introspect.errors import IntrospectError
from introspect.units import GiB

NVIDIA_A100 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
NVIDIA_H100 = "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM / PCIe: 80 GB)"
NVIDIA_H200 = "https://www.nvidia.com/en-us/data-center/h200/ (141 GB HBM3e)"
NVIDIA_L4 = "https://www.nvidia.com/en-us/data-center/l4/ (24 GB GDDR6)"
NVIDIA_T4 = "https://www.nvidia.com/en-us/data-center/tesla-t4/ (16 GB GDDR6)"
NVIDIA_3090 = "https://www.nvidia.com/en-us/geforce/graphics-cards/30-series/rtx-3090-3090ti/"
NVIDIA_4090 = "https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/"
APPLE_SPECS = "https://support.apple.com/specs (each Mac's tech specs: unified memory)"

#: Unified-memory sizes Apple has sold M-series Macs with, in Apple's "GB".
APPLE_SIZES_GB = (8, 16, 24, 32, 36, 48, 64, 96, 128, 192)


@record
class Device:
    """One device: ``name`` (what ``--gpu`` takes), its memory in bytes, the maker's
    figure in the maker's words, the source of that figure, and its kind (``cuda`` or
    ``metal``: which overhead model applies)."""

    name: str
    description: str
    memory_bytes: int
    maker_figure: str
    source: str
    kind: str = "cuda"

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "memory_bytes": self.memory_bytes,
            "maker_figure": self.maker_figure,
            "source": self.source,
            "kind": self.kind,
        }


def _nvidia(name: str, description: str, gb: int, memory: str, source: str) -> Device:
    return Device(name, description, gb * GiB, f"{gb} GB {memory}", source, "cuda")


def _mac(size: int) -> Device:
    return Device(
        f"mac-{size}gb",
        f"Apple M-series Mac with {size} GB unified memory",
        size * GiB,
        f"{size}GB unified memory",
        APPLE_SPECS,
        "metal",
    )


DEVICES: tuple[Device, ...] = (
    _nvidia("a100-40gb", "NVIDIA A100 40GB", 40, "HBM2", NVIDIA_A100),
    _nvidia("a100-80gb", "NVIDIA A100 80GB", 80, "HBM2e", NVIDIA_A100),
    _nvidia("h100-80gb", "NVIDIA H100 (SXM or PCIe)", 80, "HBM3 / HBM2e", NVIDIA_H100),
    _nvidia("h200", "NVIDIA H200 (SXM or NVL)", 141, "HBM3e", NVIDIA_H200),
    _nvidia("l4", "NVIDIA L4", 24, "GDDR6", NVIDIA_L4),
    _nvidia("t4", "NVIDIA T4", 16, "GDDR6", NVIDIA_T4),
    _nvidia("rtx-3090", "NVIDIA GeForce RTX 3090", 24, "GDDR6X", NVIDIA_3090),
    _nvidia("rtx-4090", "NVIDIA GeForce RTX 4090", 24, "GDDR6X", NVIDIA_4090),
    *(_mac(size) for size in APPLE_SIZES_GB),
)

#: Other spellings: the chip generation in a Mac's name (m1-8gb … m4-192gb) and the
#: short names people type.
ALIASES = {
    "a100": "a100-80gb",
    "a100-40g": "a100-40gb",
    "a100-80g": "a100-80gb",
    "h100": "h100-80gb",
    "h200-141gb": "h200",
    "3090": "rtx-3090",
    "4090": "rtx-4090",
}


def _canonical(name: str) -> str:
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = ALIASES.get(key, key)
    for chip in ("m1", "m2", "m3", "m4"):
        for variant in ("-pro", "-max", "-ultra", ""):
            prefix = f"{chip}{variant}-"
            if key.startswith(prefix):
                return "mac-" + key[len(prefix) :]
    return key


def lookup(name: str) -> Device:
    """The device ``name`` names (case-insensitive; aliases and ``m2-8gb``-style Mac
    names accepted). An unknown name is an IntrospectError listing the known ones."""
    key = _canonical(name)
    for device in DEVICES:
        if device.name == key:
            return device
    raise IntrospectError(
        f"--gpu {name!r}: unknown device; known: {', '.join(known_names())} "
        "(or give --budget, e.g. --budget 80GB)"
    )


def known_names() -> list[str]:
    """Every device name ``--gpu`` takes (Macs also as m1-…/m2-…/m3-…/m4-…)."""
    return [d.name for d in DEVICES]
