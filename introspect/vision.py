"""Images → visual tokens, as a vision-language model's own processor computes them.

Qwen2-VL, Qwen2.5-VL, Qwen3-VL (and its MoE) and Qwen3.5 share one image processor,
``Qwen2VLImageProcessor`` (``transformers/models/qwen2_vl/image_processing_qwen2_vl.py``):
``smart_resize`` rounds H and W to multiples of ``factor = patch_size · merge_size``,
scaled so that H'·W' lies in [``min_pixels``, ``max_pixels``] (the class's
``size = {"shortest_edge": 56·56, "longest_edge": 28·28·1280}``), and refuses an aspect
ratio above 200. A still image is repeated to ``temporal_patch_size`` frames, so its grid
is ``(t, h, w) = (1, H'/p, W'/p)``: the tower sees ``h·w`` patches (each
``C·temporal_patch_size·p²`` values) and its merger hands the language model
``h·w / merge_size²`` tokens, one ``<|image_pad|>`` each in the text
(``processing_qwen3_vl.py``: ``image_grid_thw.prod() // merge_size**2``).

The tower's patch, temporal-patch and merge sizes are the config's ``vision_config``
(``patch_size``, ``temporal_patch_size``, ``spatial_merge_size``); the pixel bounds are
the processor class's defaults (a checkpoint's ``preprocessor_config.json`` may move them;
448×448 and every size between 56·56 and 28·28·1280 pixels is unaffected).

Pure functions: nothing here imports torch or transformers.
"""

from __future__ import annotations

import math

from introspect._record import record

#: model_types whose processor is ``Qwen2VLImageProcessor`` (smart_resize).
QWEN_PROCESSOR = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
#: ``Qwen2VLImageProcessor.size`` (``image_processing_qwen2_vl.py``).
MIN_PIXELS = 56 * 56
MAX_PIXELS = 28 * 28 * 1280
#: ``smart_resize``'s refusal: "absolute aspect ratio must be smaller than 200".
MAX_ASPECT = 200


@record(kw_only=True)
class VisionTower:
    """What a wrapper's processor and tower need to turn images into tokens: the
    processor's rule (``qwen2_vl``: smart_resize; ``""``: not modelled) and the tower's
    patch geometry and width (for the tower's own activations)."""

    processor: str = ""
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    in_channels: int = 3
    min_pixels: int = MIN_PIXELS
    max_pixels: int = MAX_PIXELS
    #: The tower: blocks, width, heads, feed-forward width (0 where not read).
    depth: int = 0
    hidden_size: int = 0
    num_heads: int = 0
    intermediate_size: int = 0
    #: Token ids the text holds for an image (``image_token_id``), when the config says.
    image_token_id: int = 0

    @property
    def factor(self) -> int:
        """H and W are rounded to multiples of patch · merge."""
        return self.patch_size * self.merge_size


def tower_facts(model_type: str, config: dict) -> VisionTower | None:
    """The processor and tower facts of a wrapper config (``None`` without a
    ``vision_config``); the processor rule is set only for :data:`QWEN_PROCESSOR`."""
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        return None

    def integer(d: dict, *keys: str, default: int) -> int:
        for key in keys:
            value = d.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return default

    qwen = model_type in QWEN_PROCESSOR
    return VisionTower(
        processor="qwen2_vl" if qwen else "",
        patch_size=integer(vision, "patch_size", "spatial_patch_size", default=14),
        temporal_patch_size=integer(vision, "temporal_patch_size", default=2 if qwen else 1),
        merge_size=integer(vision, "spatial_merge_size", default=2),
        in_channels=integer(vision, "in_channels", "in_chans", "num_channels", default=3),
        depth=integer(vision, "depth", "num_hidden_layers", default=0),
        hidden_size=integer(vision, "hidden_size", "embed_dim", default=0),
        num_heads=integer(vision, "num_heads", "num_attention_heads", default=0),
        intermediate_size=integer(vision, "intermediate_size", default=0),
        image_token_id=integer(config, "image_token_id", "image_token_index", default=0),
    )


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS
) -> tuple[int, int]:
    """``image_processing_qwen2_vl.smart_resize``, line for line: H and W rounded to
    multiples of ``factor``, scaled down (floor) above ``max_pixels`` or up (ceil) below
    ``min_pixels``. Raises ``ValueError`` for an aspect ratio above 200, as it does."""
    if max(height, width) / min(height, width) > MAX_ASPECT:
        raise ValueError(
            f"absolute aspect ratio must be smaller than {MAX_ASPECT}, got "
            f"{max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


@record(kw_only=True)
class ImageGrid:
    """One image as the processor hands it over: its resized size, its patch grid
    ``(t, h, w)``, the tower's patches and the language model's tokens."""

    height: int
    width: int
    grid: tuple[int, int, int]
    patches: int
    tokens: int


def image_grid(tower: VisionTower, height: int, width: int) -> ImageGrid:
    """The grid of one ``height × width`` image (see the module docstring)."""
    h, w = smart_resize(height, width, tower.factor, tower.min_pixels, tower.max_pixels)
    gh, gw = h // tower.patch_size, w // tower.patch_size
    patches = gh * gw
    return ImageGrid(
        height=h, width=w, grid=(1, gh, gw), patches=patches, tokens=patches // tower.merge_size**2
    )


def check_images(tower: VisionTower | None, images: int, size: tuple[int, int], where: str) -> str:
    """Why the processor refuses ``images`` of ``size`` (H, W), or ``""``: no processor
    rule for this model, fewer than one image, a side below one patch, an aspect ratio
    above 200."""
    h, w = size
    if images < 1:
        return f"--images {images}: give at least 1 image per sample (or drop --image-size)"
    if tower is None:
        return f"--images: {where} has no vision tower (no vision_config); it reads text only"
    if tower.processor != "qwen2_vl":
        return (
            f"--images: {where}'s image processor is not modelled (only the Qwen2-VL "
            f"processor's smart_resize: {', '.join(QWEN_PROCESSOR)})"
        )
    if h < tower.patch_size or w < tower.patch_size:
        return (
            f"--image-size {h}x{w}: a side below one patch ({tower.patch_size} pixels) holds "
            "no patch; give at least "
            f"{tower.patch_size}x{tower.patch_size}"
        )
    if max(h, w) / min(h, w) > MAX_ASPECT:
        return (
            f"--image-size {h}x{w}: the processor refuses an aspect ratio above {MAX_ASPECT} "
            "(smart_resize); give a less elongated size"
        )
    return ""


def visual_tokens(spec, setup) -> int:
    """Visual tokens one sample adds to the language model's sequence:
    ``setup.images`` images of ``setup.image_size``, each :func:`image_grid`'s tokens."""
    if not setup.images:
        return 0
    h, w = setup.image_size
    return setup.images * image_grid(spec.vision, h, w).tokens


def language_setup(spec, setup):
    """The setup the language model trains with: ``seq_len`` grown by the visual tokens
    (T = T_text + images · tokens per image), the images then spent; the tower itself,
    frozen, saves nothing for backward (no input or weight of it requires a gradient),
    so only the longer sequence and the tower's weights reach the peak."""
    if not setup.images:
        return setup
    return setup.replace(
        seq_len=setup.seq_len + visual_tokens(spec, setup),
        images=0,
        image_size=None,
        image_input_bytes=pixel_bytes(spec, setup),
    )


def pixel_bytes(spec, setup) -> int:
    """The batch's ``pixel_values``: B · images · patches rows of
    ``C · temporal_patch_size · p²`` FP32 values (the processor's output)."""
    tower = spec.vision
    h, w = setup.image_size
    rows = setup.batch_size * setup.images * image_grid(tower, h, w).patches
    return rows * tower.in_channels * tower.temporal_patch_size * tower.patch_size**2 * 4


def describe(spec, setup) -> str:
    """One line: the images, their grid and the language model's sequence."""
    h, w = setup.image_size
    grid = image_grid(spec.vision, h, w)
    t, gh, gw = grid.grid
    n = setup.images * grid.tokens
    return (
        f"{setup.images} image(s) of {h}x{w} per sample → {grid.height}x{grid.width} "
        f"(smart_resize, factor {spec.vision.factor}), grid {t}x{gh}x{gw} = {grid.patches} "
        f"patches, {grid.tokens} tokens each after the {spec.vision.merge_size}x"
        f"{spec.vision.merge_size} merger: T = {setup.seq_len} text + {n} visual = "
        f"{setup.seq_len + n}"
    )
