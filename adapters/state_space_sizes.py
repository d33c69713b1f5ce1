"""One line for a state-space config whose sizes cannot build a mixer, before
transformers is asked to build it (Falcon-H1 and the other Mamba-2 stacks no reader
models: their dry run answers, and a zero conv kernel or a width the heads do not split
otherwise surfaces as torch warnings and a failed step; Zamba2's own reader,
``families/zamba2.py``, checks its keys itself).

The keys are the configs' own: ``configuration_falcon_h1.py`` (``mamba_d_ssm``, else
``mamba_expand · hidden_size``, is the mixer width, split into ``mamba_n_heads`` heads;
``mamba_d_conv``, ``mamba_d_state``, ``mamba_n_groups``, ``mamba_chunk_size``) and
``configuration_zamba2.py`` (``mamba_expand · hidden_size`` over ``n_mamba_heads``,
``mamba_ngroups``, ``chunk_size``). The readers' own checks (Granite 4.0-H, Bamba,
Nemotron-H: ``families.hybrid.mamba2_mixer``) are theirs."""

from __future__ import annotations

from typing import Any

from introspect.errors import ConfigError

#: Sizes that must be positive integers when present (None: the class's default).
POSITIVE = (
    "mamba_d_conv",
    "conv_kernel",
    "mamba_d_state",
    "mamba_n_heads",
    "n_mamba_heads",
    "mamba_n_groups",
    "mamba_ngroups",
    "mamba_chunk_size",
    "mamba_d_ssm",
    "mamba_expand",
)


def check(config: dict[str, Any], where: str) -> None:
    """Raise :class:`ConfigError` naming ``where`` and the key for a size that is not a
    positive integer, or a mixer width its heads (or groups its heads) do not divide."""
    for key in POSITIVE:
        value = config.get(key)
        if value is None:
            continue
        number = (int, float) if key == "mamba_expand" else int  # expand may be 1.5
        if isinstance(value, bool) or not isinstance(value, number) or value <= 0:
            raise ConfigError(f"{where}: {key} must be a positive integer, got {value!r}")
    heads_key = next((k for k in ("mamba_n_heads", "n_mamba_heads") if config.get(k)), None)
    if heads_key is None:
        return
    heads = config[heads_key]
    if config.get("mamba_d_ssm") is not None:
        width, width_key = config["mamba_d_ssm"], "mamba_d_ssm"
    elif config.get("mamba_expand") and isinstance(config.get("hidden_size"), int):
        width = int(config["mamba_expand"] * config["hidden_size"])  # as the mixers do
        width_key = "mamba_expand·hidden_size"
    else:
        width = None
    if width is not None and width % heads:
        raise ConfigError(
            f"{where}: {width_key} = {width} is not a multiple of {heads_key} = {heads}; "
            "the mixer splits its width into equal heads"
        )
    groups_key = next((k for k in ("mamba_n_groups", "mamba_ngroups") if config.get(k)), None)
    if groups_key and heads % config[groups_key]:
        raise ConfigError(
            f"{where}: {groups_key} = {config[groups_key]} does not divide {heads_key} = {heads}"
        )
