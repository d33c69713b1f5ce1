"""Every decoder-only ``model_type`` transformers builds from its config class: the count
at the default (full) size, and the closed form beside the dry run at a small shape.

Run:  .venv/bin/python benchmarks/every_type.py [--only SUBSTRING] [--resume]   # ~30 min, 2 cores
      .venv/bin/python benchmarks/every_type.py --redo TYPE,TYPE   # those rows again, in place

For each ``model_type`` in ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``:

(a) the configuration class's default config (``AutoConfig.for_model(t).to_dict()``)
    read by :func:`introspect.adapters.hf_config.spec_from_config`, its ``n_params``
    against ``sum(p.numel())`` of ``AutoModelForCausalLM.from_config`` on the meta device
    (exact integers; ``AutoModelForImageTextToText`` for a config introspect reads as a
    vision-language wrapper, towers included);
(b) the same config shrunk by :func:`shrink` (widths, layers, heads, experts and vocab
    cut, ratios and the layer pattern kept), in three setups (FP32 eager; autocast with
    checkpointing; BF16 SDPA; B=1, T=64, AdamW): ``refined.estimate(spec, setup).total``
    against the dry run of the real class (``runner.measure(..., device="fake",
    impl="transformers")``, as ``introspect measure --impl transformers --device fake``).
    A spec the closed form does not model (``spec.unmodelled``) is answered by that dry
    run, as ``introspect profile`` answers it; the row says so.

A type the tool refuses (encoder-decoders, encoders) or transformers cannot build from its
default config is listed with the first line of the reason. Writes
``benchmarks/results/every-type.md`` and ``every-type.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import warnings
from pathlib import Path

OUT = Path(__file__).parent / "results" / "every-type"
SETUPS = {
    "fp32 eager": dict(precision="fp32", attention="eager"),
    "amp ckpt": dict(precision="amp", attention="eager", activation_checkpointing=True),
    "bf16 sdpa": dict(precision="bf16", attention="memory_efficient"),
}
#: Width keys cut by the same factor as ``hidden_size`` (ratios kept).
WIDTHS = (
    "intermediate_size",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "ffn_hidden_size",
    "n_inner",
    "expert_intermediate_size",
    "moe_ffn_hidden_size",
    "decoder_ffn_dim",
    "encoder_ffn_dim",
)
HEAD_KEYS = (
    "num_attention_heads",
    "n_head",
    "num_heads",
    "n_heads",
    "decoder_attention_heads",
    "encoder_attention_heads",
)
KV_KEYS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num")
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers", "depth")
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
TOPK_KEYS = ("num_experts_per_tok", "moe_topk", "top_k", "num_selected_experts")
PATTERN_KEYS = (
    "layer_types",
    "mlp_layer_types",
    "layers_block_type",
    "block_types",
    "hybrid_override_pattern",
)
#: Layer indices a config lists (a layer pattern written as the layers of one kind):
#: Qwen2.5-VL's full-attention tower blocks, Qwen3-VL's deepstack taps, GOT-OCR2's
#: global-attention blocks, Mllama's tapped tower layers and cross-attention layers.
INDEX_KEYS = (
    "fullatt_block_indexes",
    "deepstack_visual_indexes",
    "global_attn_indexes",
    "intermediate_layers_indices",
    "cross_attention_layers",
)
#: A wrapper's nested configs, each shrunk under its own model_type's keys.
NESTED_KEYS = ("text_config", "vision_config")
#: Tower widths that are the language model's width: the merger's or adapter's output,
#: which the wrapper scatters into the text embeddings (``inputs_embeds.masked_scatter``,
#: e.g. ``models/qwen2_5_vl/modeling_qwen2_5_vl.py`` ``Qwen2_5_VLModel.forward``).
TO_TEXT_KEYS = ("out_hidden_size", "adapter_out_dim")
#: Tower widths that are the tower's own width (dots.llm3-note's adapter input).
TO_TOWER_KEYS = ("adapter_in_dim",)


#: Why a type's default config builds nothing, read from transformers' source: none has
#: a faithful fix (each would invent a value the default config lacks).
NOT_BUILT = {
    "cohere_compass_text": "the default rope_parameters hold no entry per layer type, which "
    "CohereCompassRotaryEmbedding indexes by layer type (modeling_cohere_compass.py:80)",
    "dbrx": "DbrxAttention reads attn_config.rope_theta (modeling_dbrx.py:184), which "
    "DbrxAttentionConfig no longer defines (it holds rope_parameters): transformers' own "
    "mismatch",
    "dots1": "n_routed_experts defaults to None (configuration_dots1.py:90), the expert count "
    "Dots1Experts sizes its weights with (modeling_dots1.py:322)",
}


def shrink(
    raw: dict, *, hidden: int = 64, layers: int = 4, vocab: int = 512, widths: bool = True
) -> dict:
    """A small faithful copy of a default config: ``hidden_size`` to ``hidden`` (head
    count cut so head_dim stays a divisor; kv heads keep the query:kv ratio where they
    can), widths in :data:`WIDTHS` by the same factor, layers to at least ``layers``
    but enough to hold one period of a layer pattern, or its prefix holding every kind
    (``layer_types``, ``mlp_layer_types`` and kin truncated, not reordered), experts
    to 4 (expert groups to 1) and top-k to at most 2, vocab to ``vocab``.

    ``widths=False`` keeps every width and head (only layers, experts and vocab cut): the
    fallback for a type whose width keys this helper does not know (rope or mixer head
    dims); under FakeTensorMode the width costs no memory and little time.

    A wrapper's ``text_config`` and ``vision_config`` (:data:`NESTED_KEYS`) are shrunk the
    same way, each under its own ``model_type``'s key names (:func:`_nested`)."""
    out = dict(raw)
    if any(isinstance(raw.get(k), dict) for k in NESTED_KEYS):
        return _nested(out, hidden=hidden, layers=layers, vocab=vocab, widths=widths)
    alias = _aliases(raw.get("model_type"))
    head_keys, kv_keys = _with(HEAD_KEYS, alias), _with(KV_KEYS, alias)
    layer_keys, expert_keys = _with(LAYER_KEYS, alias), _with(EXPERT_KEYS, alias)
    topk_keys, group_keys = _with(TOPK_KEYS, alias), _with(("n_group", "topk_group"), alias)
    old_h = out.get("hidden_size") or out.get("n_embd") or out.get("d_model")
    if widths and isinstance(old_h, int) and old_h > hidden:
        factor = old_h / hidden
        for key in ("hidden_size", "n_embd", "d_model"):
            if key in out and isinstance(out[key], int):
                out[key] = hidden
        for key in WIDTHS:
            if isinstance(out.get(key), int) and out[key]:
                out[key] = max(8, int(out[key] / factor) // 8 * 8)
            elif isinstance(out.get(key), list):  # one width per layer (Gemma 3n)
                out[key] = [max(8, int(w / factor) // 8 * 8) for w in out[key]]
        for hk in head_keys:
            heads = out.get(hk)
            if not isinstance(heads, int) or heads <= 4:
                continue
            new = 4
            for kk in kv_keys:
                kv = out.get(kk)
                if isinstance(kv, int) and kv:
                    ratio = max(1, heads // kv)
                    out[kk] = max(1, new // ratio) if ratio <= new else 1
            out[hk] = new
            if isinstance(out.get("head_dim"), int):
                out["head_dim"] = max(8, hidden // new)
    patterns = [k for k in PATTERN_KEYS if isinstance(out.get(k), (list, str)) and out[k]]
    old_layers = next((out[k] for k in layer_keys if isinstance(out.get(k), int)), None)
    indexed = {k: out[k] for k in INDEX_KEYS if _indices(out.get(k), old_layers)}
    keep = layers
    seqs = [list(out[k]) for k in patterns]
    seqs += [[i in set(ix) for i in range(old_layers)] for ix in indexed.values()]
    for seq in seqs:
        every = next(i + 1 for i in range(len(seq)) if set(seq[: i + 1]) == set(seq))
        keep = max(keep, min(_period(seq), every))
    keep = _layer_constraints(out, keep)
    for k, ix in indexed.items():  # the listed layers among the kept ones
        out[k] = [i for i in ix if i < keep]
    for key in layer_keys:
        if isinstance(out.get(key), int) and out[key] > keep:
            out[key] = keep
    for k in patterns:
        seq = out[k]
        out[k] = seq[:keep] if isinstance(seq, list) else seq[:keep]
    if old_layers and keep < old_layers:
        _cut_per_layer(out, raw, old_layers, keep, [*patterns, *indexed])
    for key in expert_keys:
        if isinstance(out.get(key), int) and out[key] > 4:
            out[key] = 4
    for key in group_keys:  # expert groups: 4 experts make one group
        if isinstance(out.get(key), int) and out[key] > 1:
            out[key] = 1
    for key in topk_keys:
        if isinstance(out.get(key), int) and out[key] > 2:
            out[key] = 2
    if isinstance(out.get("vocab_size"), int) and out["vocab_size"] > vocab:
        out["vocab_size"] = vocab
        # Marian's decoder vocabulary, Gemma 3n/4's per-layer-input one: their own keys
        for key in ("decoder_vocab_size", "vocab_size_per_layer_input"):
            if isinstance(out.get(key), int):
                out[key] = min(out[key], vocab)
        for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
            if isinstance(out.get(key), int) and out[key] >= vocab:
                out[key] = vocab - 1
    if isinstance(out.get("max_position_embeddings"), int):
        # never below a window or chunk the config holds (Llama 4's 8192-token chunks)
        spans = [out.get(k) for k in ("attention_chunk_size", "sliding_window")]
        floor = max([4096, *(v for v in spans if isinstance(v, int))])
        out["max_position_embeddings"] = min(out["max_position_embeddings"], floor)
    return out


def _indices(value, layers: int | None) -> bool:
    """Whether ``value`` is a non-empty list of layer indices within ``layers``."""
    return (
        isinstance(layers, int)
        and isinstance(value, list)
        and bool(value)
        and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in value)
    )


def _nested(out: dict, **cut) -> dict:
    """:func:`shrink` of a wrapper (``out``, a copy of its config): each nested config of
    :data:`NESTED_KEYS` shrunk as a config of its own ``model_type`` (Qwen2.5-VL's
    ``qwen2_5_vl_text`` and ``qwen2_5_vl_vision``: their own aliases and layer lists), the
    wrapper's own keys after it:

    * a tower width that is the language model's (:data:`TO_TEXT_KEYS`) set to the cut
      text width, so that the tower's output still fits the text embeddings it replaces
      (also where the default config's two disagree: Qwen2.5-VL's 3584 beside 8192), and
      one that is the tower's own (:data:`TO_TOWER_KEYS`) to the cut tower width;
    * the wrapper's special token ids (``image_token_id``, ``image_token_index``,
      ``boi_token_index`` and kin) at or above the cut vocabulary moved to distinct ids at
      its top, in their order, as ``shrink`` moves ``pad_token_id``; the ids themselves
      carry no memory.

    A nested config without a ``model_type`` is cut under the wrapper's names."""
    text = out.get("text_config")
    if isinstance(text, dict):
        sub = {"model_type": out.get("model_type"), **text}
        out["text_config"] = {**shrink(sub, **cut), "model_type": text.get("model_type")}
        if text.get("model_type") is None:
            out["text_config"].pop("model_type")
    vision = out.get("vision_config")
    if isinstance(vision, dict):
        sub = {"model_type": out.get("model_type"), **vision}
        small = {**shrink(sub, **cut), "model_type": vision.get("model_type")}
        if vision.get("model_type") is None:
            small.pop("model_type")
        width = (out.get("text_config") or {}).get("hidden_size")
        for key in TO_TEXT_KEYS:
            if isinstance(small.get(key), int) and isinstance(width, int):
                small[key] = width
        for key in TO_TOWER_KEYS:
            if small.get(key) == vision.get("hidden_size") and isinstance(small[key], int):
                small[key] = small["hidden_size"]
        out["vision_config"] = small
    vocab = (out.get("text_config") or {}).get("vocab_size")
    if isinstance(vocab, int):
        ids = sorted(
            (v, k)
            for k, v in out.items()
            if (k.endswith("_token_id") or k.endswith("_token_index"))
            and isinstance(v, int)
            and v >= vocab
        )
        for n, (_, key) in enumerate(reversed(ids)):
            out[key] = vocab - 1 - n
    return out


def _layer_constraints(out: dict, keep: int) -> int:
    """The layer count a type's own validator or build needs beyond its pattern, and the
    section keys that must add up to it (``out`` changed in place):

    * Dory lists each layer as an (attention, mlp) pair of entries, its counts doubled
      (``DoryConfig.__post_init__``/``to_dict``, ``models/dory/configuration_dory.py``):
      an even count, and ``n_input_layers + n_recurrent_layers + n_output_layers ==
      num_hidden_layers`` (``validate_architecture``), cut in the default's proportions
      with one layer at least in each section;
    * Zamba's hybrid layers share one transformer block, tied from the first hybrid layer
      to the others (``ZambaForCausalLM.__init__``'s ``_tied_weights_keys``,
      ``models/zamba/modeling_zamba.py``): the build refuses a pattern with one hybrid
      layer, so the cut keeps two;
    * GPT-Neo's ``attention_types`` ([[kinds, repeats]]) expands to ``attention_layers``,
      whose length must be ``num_layers`` (``GPTNeoConfig.validate_architecture``): the
      repeats cut so that the pattern covers the kept layers;
    * Gemma 3n's last ``num_kv_shared_layers`` reuse the cache of the last earlier layer
      of their kind, and the config checks that the kinds producing a cache are the kinds
      using one (``Gemma3nTextConfig``, ``models/gemma3n/configuration_gemma3n.py``):
      the cut keeps one period that makes caches and one that reuses them."""
    kinds = out.get("layer_types")
    if isinstance(kinds, list) and "mlp" in kinds and "n_recurrent_layers" in out:
        keep += keep % 2
        total = out.get("num_hidden_layers") or keep
        sections = ("n_input_layers", "n_output_layers")
        for key in sections:
            if isinstance(out.get(key), int):
                out[key] = max(2, round(keep * out[key] / total / 2) * 2)
        if isinstance(out.get("n_recurrent_layers"), int):
            out["n_recurrent_layers"] = keep - sum(out.get(k) or 0 for k in sections)
    blocks = out.get("layers_block_type")
    if out.get("model_type") == "zamba" and isinstance(blocks, list) and blocks.count("hybrid") > 1:
        second = [i for i, b in enumerate(blocks) if b == "hybrid"][1]
        keep = max(keep, second + 1)
    shared = out.get("num_kv_shared_layers")
    if isinstance(shared, int) and shared > 0:  # one period makes caches, one reuses them
        out["num_kv_shared_layers"] = keep
        keep *= 2
    types = out.get("attention_types")
    if isinstance(types, list) and len(types) == 1 and isinstance(types[0], list):
        kinds, _ = types[0]
        keep += -keep % len(kinds)
        out["attention_types"] = [[kinds, keep // len(kinds)]]
    return keep


def _cut_per_layer(out: dict, raw: dict, old: int, keep: int, patterns: list[str]) -> None:
    """Every per-layer entry cut with the layers: a list with one entry per layer (Llama
    4's ``no_rope_layers`` and ``moe_layers``, Gemma 3n's ``activation_sparsity_pattern``,
    GPT-Neo's ``attention_layers``) truncated to the first ``keep``; a ``…_per_layer``
    list of a cut key (Laguna's ``num_attention_heads_per_layer``) scaled as that key
    was; a ``per_layer_config`` (layer index → overrides: Gemma 4's ``head_dim``,
    dots.llm3's attention widths) keeps the kept layers' entries, each overridden width
    scaled as its base key was (``configuration_utils.py`` checks its keys lie in
    ``[0, num_hidden_layers)``)."""

    def scaled(key: str, value):
        base, now = raw.get(key), out.get(key)
        if isinstance(value, int) and isinstance(base, int) and isinstance(now, int) and base:
            return max(1, round(value * now / base)) if now != base else value
        return value

    for key, value in list(out.items()):
        if key in patterns or not isinstance(value, list) or len(value) != old:
            continue
        value = value[:keep]
        if key.endswith("_per_layer"):
            value = [scaled(key[: -len("_per_layer")], v) for v in value]
        out[key] = value
    per_layer = out.get("per_layer_config")
    if isinstance(per_layer, dict):
        out["per_layer_config"] = {
            i: {k: scaled(k, v) for k, v in over.items()} if isinstance(over, dict) else over
            for i, over in per_layer.items()
            if str(i).isdigit() and int(i) < keep
        }


def _aliases(model_type: str | None) -> dict[str, str]:
    """The configuration class's ``attribute_map`` (standard name → the key its config
    stores, e.g. Ernie 4.5 MoE's ``num_experts_per_tok`` → ``moe_k``, Kimi Linear's
    ``n_group`` → ``num_expert_group``; ``transformers/configuration_utils.py``): the
    keys this helper cuts are found under the type's own names too."""
    if not model_type:
        return {}
    from transformers import CONFIG_MAPPING

    try:
        return dict(getattr(CONFIG_MAPPING[model_type], "attribute_map", {}) or {})
    except KeyError:
        return {}


def _with(keys: tuple[str, ...], alias: dict[str, str]) -> tuple[str, ...]:
    """``keys`` and the config's own names for them (:func:`_aliases`)."""
    return keys + tuple(v for k, v in alias.items() if k in keys and v not in keys)


def _period(seq: list) -> int:
    """The shortest prefix length whose repetition reproduces ``seq`` (its layer period)."""
    for p in range(1, len(seq) + 1):
        if all(seq[i] == seq[i % p] for i in range(len(seq))):
            return p
    return len(seq)


def _first(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text}"[:140].replace("|", "/")


def count_row(model_type: str) -> dict:
    """(a): the default config's meta-device total beside introspect's count. A config
    with a ``vision_config`` whose type also has an image-text class is built as that
    wrapper (``AutoModelForImageTextToText``), towers included, since that is the model
    introspect counts (dots.llm3-note, Llama 4, Mllama, Qwen3.5: their causal-LM classes
    drop the towers)."""
    import torch
    from introspect.adapters.hf_config import spec_from_config
    from introspect.adapters.multimodal import is_wrapper
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    from introspect.errors import IntrospectError

    row: dict = {"model_type": model_type}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = AutoConfig.for_model(model_type)
            raw = {**config.to_dict(), "model_type": model_type}
            # the class introspect reads: a config with a vision_config is the wrapper,
            # its towers counted (introspect/adapters/multimodal.py ``is_wrapper``)
            auto = AutoModelForCausalLM
            if is_wrapper(raw, model_type):
                auto = AutoModelForImageTextToText
                row["wrapper"] = True
            with torch.device("meta"):
                model = auto.from_config(config)
        row["built"] = sum(p.numel() for p in model.parameters())
        del model
    except Exception as e:  # noqa: BLE001 - the build's own failure, reported
        row["note"] = f"not built: {_first(e)}"
        return row
    try:
        spec = spec_from_config(raw, source=model_type)
    except IntrospectError as e:
        row["note"] = f"refused: {str(e)[:140]}"
        return row
    except Exception as e:  # noqa: BLE001 - a traceback in our reader: a bug to fix
        row["note"] = f"reader traceback: {_first(e)}"
        return row
    row["raw"] = raw
    row["introspect"] = spec.n_params
    row["exact"] = spec.n_params == row["built"]
    row["unmodelled"] = list(spec.unmodelled)
    return row


def memory_row(row: dict) -> None:
    """(b): closed form against the dry run at the shrunk shape, per setup."""
    from introspect.adapters.hf_config import spec_from_config

    from introspect import refined
    from introspect.errors import DryRunCannot
    from introspect.measure import runner
    from introspect.unmodelled import NotModelled, check_setup

    raw = row.pop("raw")
    small = shrink(raw, widths="shape" not in row)
    try:
        spec = spec_from_config(small, source=row["model_type"])
    except Exception:  # noqa: BLE001 - a width this helper cuts wrongly: keep the widths
        small = shrink(raw, widths=False)
        row["shape"] = "widths kept"
        try:
            spec = spec_from_config(small, source=row["model_type"])
        except Exception as e:  # noqa: BLE001
            note = f"small config refused: {_first(e)}"
            row["setups"] = {name: {"note": note} for name in SETUPS}
            return
    row["setups"] = {}
    for name in SETUPS:
        setup = setup_for(name)
        cell: dict = {}
        try:  # the class's own refusal, as `introspect profile` answers it: no dry run
            check_setup(spec, setup)
        except NotModelled as e:
            cell["refused"] = str(e).split(": ", 1)[-1][:160]
            row["setups"][name] = cell
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m, _ = runner.measure(
                    spec,
                    setup,
                    device="fake",
                    impl="transformers",
                    census=False,
                    config=(small, row["model_type"]),
                )
            cell["dry_run"] = m.peak_bytes
        except DryRunCannot as e:  # no dry run answers this step: the one line says why
            cell["cannot"] = str(e).split("the dry run cannot answer this step: ", 1)[-1]
        except Exception as e:  # noqa: BLE001 - the dry run's failure, reported
            if "shape" not in row:  # the shrunk widths may be inconsistent: retry wide
                row["shape"] = "widths kept"
                row["raw"] = raw
                # does a real step fail the same way? (only a small one: real memory)
                if not _data_dependent(e) and spec.n_params <= REAL_STEP_MAX_PARAMS:
                    cpu = _real_step_error(spec, setup, small, row["model_type"])
                    row["narrow"] = {"error": _first(e), "cpu": cpu}
                memory_row(row)
                return
            narrow = row.get("narrow") or {}
            if _data_dependent(e):
                cell["note"] = (
                    "dry run cannot: the step reads a tensor's value, which a fake tensor "
                    f"does not have ({_first(_data_dependent(e))})"
                )
            elif narrow.get("error") == _first(e) == narrow.get("cpu"):
                cell["class_fails"] = _first(e)
            else:
                cell["note"] = f"dry run failed: {_first(e)}"
        if spec.unmodelled:
            cell["answer"] = "dry_run"
        elif "dry_run" in cell:
            try:
                est = refined.estimate(spec, setup).total
                cell["closed_form"] = est
                cell["ratio"] = est / cell["dry_run"]
            except Exception as e:  # noqa: BLE001
                cell["note"] = f"closed form failed: {_first(e)}"
        row["setups"][name] = cell


#: The largest narrow model :func:`_real_step_error` steps for real (16 bytes a parameter
#: with AdamW: 0.8 GB), so that the check cannot exhaust a shared machine's memory.
REAL_STEP_MAX_PARAMS = 50_000_000


def _data_dependent(error: BaseException) -> BaseException | None:
    """The fake tensor's own exception in ``error``'s chain when the step read a value
    (``DataDependentOutputException``: ``.item()``/``.tolist()``/``if tensor``;
    ``DynamicOutputShapeException``: ``nonzero`` and kin), else ``None``."""
    while error is not None:
        if type(error).__name__ in ("DataDependentOutputException", "DynamicOutputShapeException"):
            return error
        error = error.__cause__ or error.__context__
    return None


def _real_step_error(spec, setup, small: dict, model_type: str) -> str | None:
    """The same step run for real on the CPU at the narrow shape (widths 64, a few MB):
    its failure's first line, or ``None``. A failure the dry run shares with it, and
    that stays at the default widths, is the class's own at its default config
    (DeepSeek-V2's ``num_experts_per_tok`` of None: ``topk(k=None)``,
    ``models/deepseek_v2/modeling_deepseek_v2.py``), not the dry run's."""
    from introspect.measure import runner

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runner.measure(
                spec,
                setup,
                device="cpu",
                impl="transformers",
                census=False,
                config=(small, model_type),
            )
    except Exception as e:  # noqa: BLE001 - the real step's own failure, compared
        return _first(e)
    return None


def types(only: str | None) -> list[str]:
    from transformers.models.auto import modeling_auto

    names = list(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    return [t for t in names if not only or only in t]


def summary(rows: list[dict]) -> list[str]:
    built = [r for r in rows if "built" in r]
    counted = [r for r in built if "introspect" in r]
    exact = sum(bool(r.get("exact")) for r in counted)
    lines = [
        f"- types tried: {len(rows)}; built from the default config: {len(built)}; "
        f"counted by introspect: {len(counted)}; counts exact: {exact}",
    ]
    for name in SETUPS:
        cells = [r["setups"][name] for r in rows if "setups" in r]
        within3 = sum(abs(c.get("ratio", 9) - 1) <= 0.03 for c in cells)
        within5 = sum(0.03 < abs(c.get("ratio", 9) - 1) <= 0.05 for c in cells)
        modelled = sum("ratio" in c for c in cells)
        answered = sum(c.get("answer") == "dry_run" and "dry_run" in c for c in cells)
        refused = sum("refused" in c for c in cells)
        own = sum("class_fails" in c for c in cells)
        cannot = sum("cannot" in c for c in cells)
        failed = sum(not {"dry_run", "refused", "class_fails", "cannot"} & set(c) for c in cells)
        lines.append(
            f"- {name}: closed form {modelled} modelled, {within3} within ±3%, {within5} "
            f"more within ±5%; answered by the dry run {answered}; class refuses this setup "
            f"{refused}; class fails at its default config {own}; no dry run can answer "
            f"{cannot}; dry-run failures {failed}"
        )
    return lines


def cell_text(c: dict) -> str:
    if "ratio" in c:
        return f"{c['ratio']:.3f}"
    if c.get("answer") == "dry_run" and "dry_run" in c:
        return "dry run"
    if "refused" in c:
        return "refused"
    if "class_fails" in c:
        return "class fails"
    if "cannot" in c:
        return "cannot"
    return "fail"


def render(rows: list[dict], seconds: float, command: str) -> str:
    head = "| model_type | built | introspect | count | " + " | ".join(SETUPS) + " | note |"
    lines = [
        "# Every causal-LM model_type: count at full size, closed form beside the dry run",
        "",
        f"`{command}` ({seconds:.0f} s). Counts: default config, meta-device build. Memory: "
        "the default config shrunk (benchmarks/every_type.py `shrink`), B=1, T=64, AdamW; "
        "cells are closed form / dry-run peak, or `dry run` where the closed form does not "
        "model the stack and the dry run is the answer, or `refused` where transformers' "
        "class itself refuses the setup (no SDPA path, no checkpointing): not a dry-run "
        "failure, and `introspect profile` refuses it in one line instead of a number; or "
        "`class fails` where a real CPU step fails as the dry run does, at the default widths "
        "too (the class's own failure at its default config); or `cannot` where no dry run "
        "answers the step (its held bytes follow values of the data; the note says which, "
        "`introspect measure --device fake` prints the same line).",
        "",
        *summary(rows),
        "",
        head,
        "|---|---:|---:|---|" + "---:|" * len(SETUPS) + "---|",
    ]
    for r in rows:
        setups = r.get("setups", {})
        notes = [r["note"]] if "note" in r else []
        if r["model_type"] in NOT_BUILT and "built" not in r:
            notes.append(f"no faithful fix: {NOT_BUILT[r['model_type']]}")
        if r.get("wrapper"):
            notes.append("built as the image-text wrapper (towers counted), as introspect reads it")
        if "shape" in r:
            notes.append("widths kept (shrunk widths refused)")
        if r.get("earlier_shrink"):
            notes.append("memory cells from an earlier shrink, which now cuts this config more")
        if r.get("unmodelled"):
            notes.append("not modelled: " + ", ".join(r["unmodelled"]))
        notes += sorted({c["note"] for c in setups.values() if "note" in c})
        refused = {c["refused"] for c in setups.values() if "refused" in c}
        notes += sorted(f"class refuses: {why}" for why in refused)
        own = {c["class_fails"] for c in setups.values() if "class_fails" in c}
        notes += sorted(f"the class's own step fails (a real CPU step too): {e}" for e in own)
        why = {c["cannot"] for c in setups.values() if "cannot" in c}
        notes += sorted(f"the dry run cannot: {w}" for w in why)
        count = "" if "introspect" not in r else ("exact" if r["exact"] else "differs")
        cells = [cell_text(setups[n]) if n in setups else "" for n in SETUPS]
        built = f"{r['built']:,}" if "built" in r else ""
        mine = f"{r['introspect']:,}" if "introspect" in r else ""
        text = "; ".join(notes).replace("|", "/")
        first = f"| {r['model_type']} | {built} | {mine} | {count} | "
        lines.append(first + " | ".join(cells) + f" | {text} |")
    return "\n".join(lines) + "\n"


def write(
    rows: list[dict],
    seconds: float,
    only: str | None,
    resumed: bool = False,
    redo: list[str] | None = None,
    earlier: str = "",
) -> None:
    command = "benchmarks/every_type.py" + (f" --only {only}" if only else "")
    if redo:  # the other rows came from the earlier run recorded in the file's header
        command = earlier + command + f" --redo {','.join(redo)}"
    elif resumed:  # the seconds are this run's; the rows before it came from an earlier one
        command += " --resume"
    out = OUT.with_name(OUT.name + (f"-{only}" if only else ""))
    replace_text(out.with_suffix(".json"), json.dumps(rows, indent=1, default=str))
    replace_text(out.with_suffix(".md"), render(rows, seconds, command))


def replace_text(path: Path, text: str) -> None:
    """``path`` holds ``text`` or, if the run is cut while writing, what it held before:
    the text goes to a sibling file that ``os.replace`` then renames over ``path`` (an
    atomic rename on POSIX), so a run stopped between two types leaves every row before
    the stop for ``--resume``, and one stopped mid-write no torn JSON."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def setup_for(name: str):
    """The :data:`SETUPS` entry ``name`` as the run trains it (B=1, T=64, AdamW)."""
    from introspect.setup import TrainingSetup

    kw = SETUPS[name]
    return TrainingSetup(
        batch_size=1,
        seq_len=64,
        device="cpu",
        implementation="transformers",
        optimizer="adamw",
        activation_dtype="fp32" if kw["precision"] == "fp32" else "bf16",
        **kw,
    )


def reclassify(rows: list[dict]) -> int:
    """Each failed cell whose setup transformers' class refuses
    (:func:`introspect.adapters.hf_transformers.class_refusal`, what
    ``introspect.unmodelled.check_setup`` and so ``introspect profile`` ask; it reads the
    model type only) marked ``refused`` with the class's reason, as :func:`memory_row`
    now marks it before the dry run. Returns how many were marked."""
    from introspect.adapters.hf_transformers import class_refusal

    marked = 0
    for row in rows:
        for name, cell in row.get("setups", {}).items():
            if {"dry_run", "refused", "class_fails", "cannot"} & set(cell) or name not in SETUPS:
                continue
            why = class_refusal(row["model_type"], setup_for(name))
            if why:
                row["setups"][name] = {"refused": why[:160]}
                marked += 1
    return marked


def _earlier(md: Path) -> str:
    """The earlier run(s) a results file's header records, as the prefix of a command
    that reran some of its rows (``--redo``, ``--recount``): "CMD` (N s), then `"."""
    head = md.read_text(encoding="utf-8").splitlines()[2] if md.exists() else ""
    return earlier_runs(head.split(". Counts")[0])


_RERUNS = re.compile(r"then (\d+) reruns? of some rows \(`--redo`, `--recount`; (\d+) s in all\)")


def earlier_runs(runs: str) -> str:
    """A header's record of the runs behind its rows (``runs``: "`CMD` (N s), then `CMD`
    (M s)…"), as the prefix of the next run's command: the first run as it was, and every
    rerun since folded into one count, so the header stays one readable line."""
    found = re.findall(r"`([^`]*)` \((\d+) s\)", runs)
    if not found:
        return ""
    (first, first_s), later = found[0], found[1:]
    folded = _RERUNS.search(runs)
    count = len(later) + (int(folded.group(1)) if folded else 0)
    seconds = sum(int(s) for _, s in later) + (int(folded.group(2)) if folded else 0)
    if not count:
        return f"{first}` ({first_s} s), then `"
    reruns = "rerun" if count == 1 else "reruns"
    return (
        f"{first}` ({first_s} s), then {count} {reruns} of some rows "
        f"(`--redo`, `--recount`; {seconds} s in all), then `"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="only model_types containing this substring")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the rows already in the results JSON and run only the types not in it",
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="write the markdown again from the results JSON, running nothing",
    )
    parser.add_argument(
        "--reclassify",
        action="store_true",
        help="ask each failed cell of the results JSON whether transformers' class refuses "
        "its setup (as the run now asks before the dry run) and mark it refused; the rest kept",
    )
    parser.add_argument(
        "--recount",
        help="comma-separated model_types whose count (a) is run again in place, their "
        "memory cells (b) kept from the results JSON",
    )
    parser.add_argument(
        "--redo",
        help="comma-separated model_types (exact names) to run again, their rows replaced in "
        "place in the full results (every-type.json) and its summary written again",
    )
    parser.add_argument(
        "--results",
        type=Path,
        help="the folder the results files are read from and written to "
        "(default: benchmarks/results)",
    )
    args = parser.parse_args()
    global OUT
    if args.results:
        OUT = args.results / OUT.name
    from transformers.utils import logging

    logging.set_verbosity_error()
    start, rows = time.perf_counter(), []
    saved = OUT.with_name(OUT.name + (f"-{args.only}" if args.only else "")).with_suffix(".json")
    reads = args.resume or args.redo or args.render or args.recount or args.reclassify
    if reads and saved.exists():
        rows = json.loads(saved.read_text(encoding="utf-8"))
    if args.render:
        md = saved.with_suffix(".md")
        head = md.read_text(encoding="utf-8").splitlines()[2] if md.exists() else ""
        ran = re.match(r"`(.*)` \((\d+) s\)\. Counts", head)
        command, seconds = (ran.group(1), float(ran.group(2))) if ran else ("", 0.0)
        replace_text(md, render(rows, seconds, command))
        return 0
    earlier = _earlier(saved.with_suffix(".md")) if args.redo else ""
    if args.reclassify:
        marked = reclassify(rows)
        print(f"{marked} failed cells are the class's refusal of the setup")
        md = saved.with_suffix(".md")
        command = _earlier(md) + "benchmarks/every_type.py --reclassify"
        replace_text(saved, json.dumps(rows, indent=1, default=str))
        replace_text(md, render(rows, time.perf_counter() - start, command))
        return 0
    if args.recount:
        command = f"benchmarks/every_type.py --recount {args.recount}"
        for t in args.recount.split(","):
            at = [i for i, r in enumerate(rows) if r.get("model_type") == t]
            row = count_row(t)
            row.pop("raw", None)
            if at:
                row = {**rows[at[0]], **row}
                rows[at[0]] = row
            else:
                rows.append(row)
            print(t, row.get("built"), row.get("introspect"), row.get("exact"), flush=True)
        seconds = time.perf_counter() - start
        md = saved.with_suffix(".md")
        replace_text(saved, json.dumps(rows, indent=1, default=str))
        replace_text(md, render(rows, seconds, _earlier(md) + command))
        return 0
    redo = [t for t in (args.redo or "").split(",") if t]
    unknown = sorted(set(redo) - set(types(None)))
    if unknown:
        print(f"--redo: not a causal-LM model_type: {', '.join(unknown)}", file=sys.stderr)
        return 2
    done = {row.get("model_type") for row in rows} - set(redo)
    for t in redo or types(args.only):
        if t in done:
            continue
        row = count_row(t)
        if "raw" in row:
            memory_row(row)
        at = [i for i, r in enumerate(rows) if r.get("model_type") == t]
        if at:
            rows[at[0]] = row
        else:
            rows.append(row)
        # on disk before it is reported: a run stopped after this type keeps its row
        write(rows, time.perf_counter() - start, args.only, bool(done), redo, earlier)
        cells = {k: cell_text(v) for k, v in row.get("setups", {}).items()}
        print(t, row.get("exact"), cells, row.get("note", ""), flush=True)
    print("\n".join(summary(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
