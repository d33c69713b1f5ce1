"""TrainingSetup: how the model is trained, as far as memory is concerned.

Defaults reproduce the seed's setup: B = 1, FP32 weights and activations, ordinary FP32
Adam, eager attention, no checkpointing, no fused loss, one device, no sharding.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from introspect.units import dtype_bytes

Precision = Literal["fp32", "mixed", "bf16"]
Optimizer = Literal["adam", "adamw", "adam8bit", "sgd", "sgd_momentum", "none"]
Attention = Literal["eager", "memory_efficient"]
CrossEntropy = Literal["standard", "fused", "chunked"]
Framework = Literal["generic", "torch", "mlx", "mlx_compiled"]

PRECISIONS = ("fp32", "mixed", "bf16")
OPTIMIZERS = ("adam", "adamw", "adam8bit", "sgd", "sgd_momentum", "none")
ATTENTIONS = ("eager", "memory_efficient")
CROSS_ENTROPIES = ("standard", "fused", "chunked")
FRAMEWORKS = ("generic", "torch", "mlx", "mlx_compiled")
ZERO_STAGES = (0, 1, 2, 3)

#: Optimizer state bytes per parameter (FP32 moments unless the name says otherwise).
OPTIMIZER_STATE_BYTES: dict[str, int] = {
    "adam": 8,  # m and v, FP32
    "adamw": 8,
    "adam8bit": 2,  # m and v quantized to 8 bits (block scales are negligible)
    "sgd_momentum": 4,  # one momentum buffer, FP32
    "sgd": 0,
    "none": 0,
}


@dataclass(frozen=True, kw_only=True)
class TrainingSetup:
    """One training step's settings. ``s`` in the seed is :attr:`activation_bytes`."""

    batch_size: int = 1
    seq_len: int = 2048
    #: Activation dtype name (``fp32``, ``bf16``, ``fp16``); ``s`` = its byte width.
    activation_dtype: str = "fp32"
    #: Bytes per saved activation when given directly (overrides ``activation_dtype``).
    activation_bytes_override: int | None = None
    #: Dtype of the working weights (and their gradients).
    weights_dtype: str = "fp32"
    #: ``fp32``: everything FP32; ``mixed``: 16-bit working weights and grads with an FP32
    #: master copy; ``bf16``: pure BF16 weights, grads and optimizer state.
    precision: Precision = "fp32"
    optimizer: Optimizer = "adam"
    attention: Attention = "eager"
    activation_checkpointing: bool = False
    cross_entropy: CrossEntropy = "standard"
    #: Data-parallel devices the state (and the batch) is spread over.
    devices: int = 1
    #: ZeRO stage 0 (plain data parallel), 1 (optimizer), 2 (+ grads), 3 (+ weights; FSDP).
    zero_stage: int = 0
    framework: Framework = "generic"
    # ---- multimodal (issue 10) ---------------------------------------------------------
    #: Freeze a multimodal wrapper's vision/audio tower (``ModelSpec.tower_parameters``):
    #: its weights stay, it gets no gradients, master copy or optimizer state.
    freeze_tower: bool = False

    def __post_init__(self) -> None:
        for name in ("batch_size", "seq_len", "devices"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.activation_bytes_override is not None and self.activation_bytes_override <= 0:
            raise ValueError(
                f"activation_bytes must be positive, got {self.activation_bytes_override}"
            )
        dtype_bytes(self.activation_dtype)
        dtype_bytes(self.weights_dtype)
        for name, choices in (
            ("precision", PRECISIONS),
            ("optimizer", OPTIMIZERS),
            ("attention", ATTENTIONS),
            ("cross_entropy", CROSS_ENTROPIES),
            ("framework", FRAMEWORKS),
            ("zero_stage", ZERO_STAGES),
        ):
            if getattr(self, name) not in choices:
                allowed = ", ".join(str(c) for c in choices)
                raise ValueError(f"{name} must be one of {allowed}; got {getattr(self, name)!r}")

    @property
    def activation_bytes(self) -> int:
        """``s``: bytes per saved activation value."""
        if self.activation_bytes_override is not None:
            return self.activation_bytes_override
        return dtype_bytes(self.activation_dtype)

    @property
    def weight_bytes(self) -> int:
        """Bytes per working weight (and per gradient)."""
        return dtype_bytes(self.weights_dtype)

    @property
    def tokens(self) -> int:
        """Tokens in one micro-batch, B·T."""
        return self.batch_size * self.seq_len

    def replace(self, **changes: Any) -> TrainingSetup:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["activation_bytes"] = self.activation_bytes
        return out
