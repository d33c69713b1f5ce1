"""`--gpu NAME` for the commands that print what a CUDA GPU holds (profile, table): the
device whose compute capability chooses the CUDA context and the cuBLAS workspaces
(:func:`introspect.overhead.device_view`), and whose memory the figures are set beside.
Not named, the device view takes an H100 (sm90); ``fit`` has its own ``--gpu``, a budget."""

from __future__ import annotations

import argparse

from introspect.errors import IntrospectError


def add_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gpu",
        metavar="NAME",
        default=None,
        help="the CUDA GPU the device figures are for (its context, cuBLAS workspaces and "
        "memory): a100-40gb, a100-80gb, h100-80gb, h200, l4, t4, rtx-3090, rtx-4090 "
        "(default: an H100); torch only",
    )


def resolve(args: argparse.Namespace, framework: str, command: str):
    """The :class:`introspect.devices.Device` ``--gpu`` names, or None when not given.
    A Mac, or an MLX framework, is one line: these figures are CUDA's."""
    name = getattr(args, "gpu", None)
    if name is None:
        return None
    from introspect.devices import lookup

    device = lookup(name)
    if device.kind != "cuda":
        raise IntrospectError(
            f"--gpu {name}: a Mac; {command}'s --gpu prices a CUDA GPU (torch); for a Mac's "
            f"budget use 'introspect fit --gpu {device.name} --framework mlx'"
        )
    if framework.startswith("mlx"):
        raise IntrospectError(
            f"--gpu {name} with --framework {framework}: --gpu prices a CUDA GPU (torch); "
            "drop --gpu, or give --framework torch"
        )
    return device


def check_fit(args: argparse.Namespace, framework: str) -> None:
    """``fit --gpu`` naming a Mac with a torch framework (the default) is one line: a
    Mac's budget is Metal's working set, priced for MLX; torch's figures are CUDA's."""
    name = getattr(args, "gpu", None)
    if name is None or framework.startswith("mlx"):
        return
    from introspect.devices import lookup

    device = lookup(name)
    if device.kind != "cuda":
        raise IntrospectError(
            f"--gpu {name} with --framework {framework}: a Mac, whose budget fit prices "
            f"for MLX; use 'introspect fit ... --gpu {device.name} --framework mlx' (or "
            "mlx-compiled), or name a CUDA GPU"
        )


def device_line(device, view) -> str:
    """What the device holds beside what the step's view shows (decimal GB)."""
    from introspect import report

    left = device.memory_bytes - view.shown
    verdict = (
        f"{report.gb(left)} GB left"
        if left >= 0
        else f"over by {report.gb(-left)} GB (out of memory)"
    )
    return (
        f"  device: {device.description}, {device.maker_figure} = "
        f"{device.memory_bytes:,} bytes ({report.gb(device.memory_bytes)} GB); "
        f"nvidia-smi's figure with the setting in force: {verdict}"
    )
