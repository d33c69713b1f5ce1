"""An image-and-text batch for a vision-language wrapper's real step, shaped as its
processor hands it over (:mod:`introspect.vision`), and what the dry run needs to run it.

Per sample: ``seq_len`` text tokens, among them ``<|vision_start|>`` and
``<|vision_end|>`` around each image, and each image's ``<|image_pad|>`` tokens
(``processing_qwen3_vl.py`` expands one per merged patch); ``pixel_values`` of
``(Σ patches, C · temporal_patch_size · p²)`` in FP32 (the processor's output, cast by
the tower to its own dtype) and ``image_grid_thw`` one ``(1, h, w)`` row per image. The
multimodal rotary positions (3, B, T) are the model's own ``get_rope_index``, computed on
real tensors before the step, as the data collator's processor call precedes it; passed
as ``position_ids``, so the forward does not recompute them. Qwen2.5-VL's window
partition (``get_vision_window_index``) is computed the same way and passed as the
``window_index`` / ``cu_window_seqlens`` keywords that function itself accepts.

Under FakeTensorMode the Qwen vision code reads values of small integer tensors (the
grid's ``tolist()``, the per-image ``cu_seqlens`` split, the image-token mask that
scatters the merger's output and the deepstack features): the token ids, the grid and
the positions enter as fake tensors that keep their values (``make_constant``), and
torch's ``CONSTANT_NUMEL_LIMIT`` (``torch/_subclasses/fake_tensor.py``, 1 element) is
raised for the step so that what is computed from them alone (masks, offsets) keeps its
value too. Every op on a weight or an activation still runs fake; the model's code path
is unchanged (:func:`constant_inputs`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from introspect.errors import IntrospectError

#: The dry run's limit on a value-keeping fake tensor's elements (token ids, masks).
CONSTANT_LIMIT = 1 << 24


@contextmanager
def constant_inputs(device: str) -> Iterator[None]:
    """For a dry run: fake tensors computed from value-keeping ones alone keep their
    values up to :data:`CONSTANT_LIMIT` elements (see the module docstring)."""
    if device != "fake":
        yield
        return
    from torch._subclasses import fake_tensor

    limit = fake_tensor.CONSTANT_NUMEL_LIMIT
    fake_tensor.CONSTANT_NUMEL_LIMIT = CONSTANT_LIMIT
    try:
        yield
    finally:
        fake_tensor.CONSTANT_NUMEL_LIMIT = limit


def _token(config, *names: str) -> int:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    raise IntrospectError(f"{type(config).__name__} names no {names[0]}; cannot place images")


def make_batch(model, spec, setup, vocab: int, device: str):
    """``(input_ids, targets, extra)``: the (B, T_text + visual) ids and next-token
    targets, and the keyword arguments the wrapper's forward takes beside them
    (``pixel_values``, ``image_grid_thw``, ``position_ids``)."""
    from introspect.vision import image_grid

    config = model.config
    image = _token(config, "image_token_id", "image_token_index")
    start = _token(config, "vision_start_token_id")
    end = _token(config, "vision_end_token_id")
    tower = spec.vision
    h, w = setup.image_size
    grid = image_grid(tower, h, w)
    B, T, n = setup.batch_size, setup.seq_len, setup.images
    if T < 2 * n + 1:
        raise IntrospectError(
            f"--seq {T}: each image needs its <|vision_start|> and <|vision_end|> text "
            f"tokens; give --seq {2 * n + 1} or more for --images {n}"
        )
    total = T + n * grid.tokens
    with _real():
        g = torch.Generator().manual_seed(0)
        low = min(image, start, end, vocab)
        ids = torch.randint(0, low, (B, total + 1), generator=g)
        for b in range(B):
            at = 1
            for _ in range(n):
                ids[b, at] = start
                ids[b, at + 1 : at + 1 + grid.tokens] = image
                ids[b, at + 1 + grid.tokens] = end
                at += grid.tokens + 3
        targets = ids[:, 1:].contiguous()
        ids = ids[:, :-1].contiguous()
        thw = torch.tensor([grid.grid] * (B * n), dtype=torch.long)
        inner = _language_owner(model)
        mm = (ids == image).int()
        position_ids, _ = inner.get_rope_index(ids, image_grid_thw=thw, mm_token_type_ids=mm)
        windows = _windows(model, thw)
    values = tower.in_channels * tower.temporal_patch_size * tower.patch_size**2
    pixels = torch.randn(B * n * grid.patches, values, dtype=torch.float32)
    ids, targets, thw, position_ids = (_keep(t, device) for t in (ids, targets, thw, position_ids))
    extra = {"pixel_values": pixels, "image_grid_thw": thw, "position_ids": position_ids}
    extra.update({k: _keep(v, device) for k, v in windows.items()})
    return ids, targets, extra


def _windows(model, thw: torch.Tensor) -> dict[str, torch.Tensor]:
    """Qwen2.5-VL's windowed attention: the tower's own ``get_vision_window_index``
    (``transformers/vision_utils.py``) on the real grid, handed to the forward the way
    the function itself takes them (``window_index``, ``cu_window_seqlens`` in its
    kwargs); ``{}`` for a tower without windows."""
    vision = getattr(model.config, "vision_config", None)
    window = getattr(vision, "window_size", None)
    if not window:
        return {}
    from transformers.vision_utils import get_vision_window_index

    index, seqlens = get_vision_window_index(
        thw,
        spatial_merge_size=vision.spatial_merge_size,
        window_size=window,
        patch_size=vision.patch_size,
    )
    return {"window_index": index, "cu_window_seqlens": seqlens}


def _language_owner(model):
    """The wrapper's inner model, which holds ``get_rope_index`` (``Qwen3VLModel``)."""
    for module in model.modules():
        if hasattr(module, "get_rope_index"):
            return module
    raise IntrospectError(f"{type(model).__name__} has no get_rope_index; images not placed")


@contextmanager
def _real() -> Iterator[None]:
    """Real tensors inside a dry run (the processor's integers are data)."""
    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
    except ImportError:  # pragma: no cover - torch without it
        yield
        return
    with unset_fake_temporarily():
        yield


def _keep(t: torch.Tensor, device: str) -> torch.Tensor:
    """``t`` as the step sees it: itself on CPU, a value-keeping fake tensor in a dry
    run."""
    if device != "fake":
        return t
    from torch._guards import detect_fake_mode

    mode = detect_fake_mode()
    if mode is None:
        return t
    return mode.fake_tensor_converter.from_real_tensor(mode, t, make_constant=True)


def with_images(model, extra: dict):
    """``model`` whose forward takes the image arguments on every call (the step's
    loops pass only the ids): ``forward`` replaced by a partial of itself."""
    model.forward = functools.partial(model.forward, **extra)
    return model


def freeze_tower(model) -> int:
    """``--freeze-tower`` on the real class: every parameter outside the language model
    and the head stops requiring a gradient; returns how many weights it froze."""
    from introspect.adapters.composite import kept_prefixes

    keep = kept_prefixes(model)
    frozen = 0
    for name, p in model.named_parameters():
        if not any(name.startswith(k + ".") for k in keep):
            p.requires_grad_(False)
            frozen += p.numel()
    return frozen
