"""LoRA on a mixture of experts, as peft 0.21 puts it on transformers 5's MoE classes.

transformers 5 stores each MoE layer's experts as two 3-D parameters, not as linears
(``Qwen3MoeExperts`` and its kin: ``gate_up_proj`` E × 2f × d, ``down_proj`` E × d × f,
``transformers/models/qwen3_moe/modeling_qwen3_moe.py``), and the router as its own
module holding a weight (``Qwen3MoeTopKRouter``). So:

* **bitsandbytes never quantizes the experts**: ``replace_with_bnb_linear``
  (``transformers/integrations/bitsandbytes.py``) replaces ``nn.Linear`` and ``Conv1D``
  only. Under QLoRA the experts stay at the working dtype; only the attention, shared
  experts and dense feed-forwards are NF4.
* **peft's all-linear reaches the experts only for some model types.** For the types
  transformers' ``conversion_mapping._MODEL_TO_CONVERSION_PATTERN`` maps to the
  ``qwen2_moe`` or ``mixtral`` pattern (and ``mixtral``, which peft adds),
  ``_convert_peft_config_moe`` (``peft/utils/transformers_weight_conversion.py``)
  rewrites the v4 feed-forward names — ``gate_proj``, ``up_proj``, ``down_proj`` (``w1``,
  ``w3``, ``w2``) and the router ``gate`` — into ``target_parameters``: the router's
  weight, ``gate_up_proj`` at rank 2r (gate's and up's adapters fused) and
  ``down_proj`` at rank r. Those names are then gone from ``target_modules``, so a
  shared expert's and a dense layer's ``gate_proj``/``up_proj``/``down_proj`` get no
  adapter. Other MoE types (``qwen2_moe`` itself, gpt-oss, Llama 4) keep all-linear's
  plain meaning: their experts and routers are not linears and get none.
* **A wrapped parameter is materialised every forward.** ``ParamWrapper``
  (``peft/tuners/lora/layer.py``) adapts a 3-D parameter with ``lora_A`` (r·E × d_in)
  and ``lora_B`` (d_out × r·E) — per expert r·(d_in + d_out) — and parametrizes the
  parameter as ``baddbmm(W, lhs, rhs)`` (``_LoraFactorsProxy``): a new tensor the size of
  the layer's experts, which the experts' matmuls keep for the backward, since it now
  needs a gradient. Each MoE layer so keeps a copy of its experts (E·3·d·f values, at the
  parameters' dtype) and of its router weight (``W + ΔW``, E·d), and its backward makes
  the full gradient of each copy before the adapters' own. What the experts keep
  beyond that is what they keep in full training (their input and the matmuls' outputs
  need gradients again).

Checked with the saved-tensor census and real steps (``tests/test_lora.py``): Qwen3-MoE
and Mixtral's adapters as peft counts them, their saved sets to the byte.
"""

from __future__ import annotations

from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: transformers 5.24's ``_MODEL_TO_CONVERSION_PATTERN`` keys whose pattern is
#: ``qwen2_moe`` or ``mixtral``, and ``mixtral`` (peft's own addition): the model types
#: whose experts and router peft's all-linear adapts.
CONVERTED = frozenset(
    {
        *("afmoe", "beam", "cohere2_moe", "deepseek_v2", "deepseek_v3", "deepseek_v32"),
        *("dots1", "ernie4_5_moe", "exaone_moe", "flex_olmo", "glm4_moe", "glm4_moe_lite"),
        *("glm4v_moe", "glm_moe_dsa", "hunyuan_v1_moe", "longcat_flash", "mellum"),
        *("minimax", "minimax_m2", "mixtral", "olmoe", "qwen3_moe", "qwen3_next"),
        *("qwen3_omni_moe", "qwen3_omni_moe_text", "qwen3_omni_moe_thinker", "sarvam_mla"),
        "solar_open",
    }
)
#: The v4 feed-forward names the conversion takes over (so no dense linear keeps them).
CONSUMED = ("gate_proj", "up_proj", "down_proj")


def converts(spec: ModelSpec) -> bool:
    """Whether peft's all-linear adapts this model's experts and routers (and takes
    the feed-forward names from its dense layers, which a view of one dense kind of
    the model shares: hence the model type alone)."""
    return spec.model_type in CONVERTED


def experts_targeted(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Whether this layer kind's experts carry adapters: a converted type's MoE layer
    under all-linear, or with ``gate_proj``/``up_proj``/``down_proj`` named."""
    if not (converts(spec) and spec.kinds[0][0].feed_forward.is_moe):
        return False
    return "all-linear" in setup.lora_targets or bool(set(CONSUMED) & set(setup.lora_targets))


def check(spec: ModelSpec, setup: TrainingSetup) -> None:
    """peft's ParamWrapper refuses dropout (``lora_dropout`` cannot be factored out of
    ``lora_B(lora_A(dropout(x)))`` for a parameter); and gate and up are fused, so one
    named without the other is peft's ValueError. ``--num-layers`` (peft's
    ``layers_to_transform``) is not modelled here: with the blocks' linear names beside it
    (peft refuses ``"all-linear"`` there) the experts get no adapter (measured on
    Qwen3-MoE), and peft's ``target_parameters`` is not filtered the same way."""
    if not converts(spec):
        return
    if setup.num_layers is not None:
        raise IntrospectError(
            f"--num-layers {setup.num_layers}: peft adapts {spec.source or spec.model_type}'s "
            "experts as parameters (target_parameters), which layers_to_transform with the "
            "blocks' linear names leaves out (measured: the experts get no adapter); not "
            "modelled, drop --num-layers"
        )
    all_linear = "all-linear" in setup.lora_targets
    named = set() if all_linear else set(CONSUMED) & set(setup.lora_targets)
    if len(named & {"gate_proj", "up_proj"}) == 1:
        raise IntrospectError(
            "--lora-targets: gate_proj and up_proj are one fused gate_up_proj in "
            "transformers' experts; name both or neither"
        )
    if setup.lora_dropout and (named or all_linear):
        raise IntrospectError(
            f"--lora-dropout {setup.lora_dropout}: peft's adapters on {spec.model_type}'s "
            "experts (ParamWrapper) do not work with dropout; use --lora-dropout 0"
        )


def _wanted(setup: TrainingSetup, name: str) -> bool:
    return "all-linear" in setup.lora_targets or name in setup.lora_targets


def adapters(spec: ModelSpec, setup: TrainingSetup) -> list[tuple[str, int, int, int]]:
    """This layer kind's parameter adapters as (name, d_in, d_out, r·copies): the
    router's weight (one copy), the experts' ``gate_up_proj`` (rank 2r, E copies) and
    ``down_proj`` (rank r, E copies). Empty where the experts carry none."""
    if not experts_targeted(spec, setup):
        return []
    ff = spec.kinds[0][0].feed_forward
    d, f, E, r = spec.hidden_size, ff.intermediate_size, ff.num_experts, setup.lora_rank
    out = []
    if "all-linear" in setup.lora_targets:
        out.append(("router", d, E, r))
    if _wanted(setup, "gate_proj"):
        out.append(("experts.gate_up_proj", d, 2 * f, 2 * r * E))
    if _wanted(setup, "down_proj"):
        out.append(("experts.down_proj", f, d, r * E))
    return out


def adapter_parameters(spec: ModelSpec, setup: TrainingSetup) -> int:
    """One layer's parameter-adapter weights: Σ r·copies·(d_in + d_out)."""
    return sum(rank * (i + o) for _, i, o, rank in adapters(spec, setup))


def largest_adapter(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Elements of the largest of them (``lora_B`` or ``lora_A`` of one parameter)."""
    return max((rank * max(i, o) for _, i, o, rank in adapters(spec, setup)), default=0)


def _copies(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Elements of each parametrized copy one MoE layer makes: the router's ``W + ΔW``
    (E·d), each adapted expert parameter (E·d·2f for gate_up, E·f·d for down)."""
    E = spec.kinds[0][0].feed_forward.num_experts
    return {n: i * o * (1 if n == "router" else E) for n, i, o, _ in adapters(spec, setup)}


def effective_weights(spec: ModelSpec, setup: TrainingSetup, wb: int) -> int:
    """Bytes one MoE layer keeps of its parametrized copies, at the parameters' dtype
    ``wb``."""
    return sum(_copies(spec, setup).values()) * wb


def copy_gradient(spec: ModelSpec, setup: TrainingSetup, wb: int) -> int:
    """Bytes of the gradient of the first copy the layer's backward reaches: the
    experts' matmul backward (``_grouped_mm``) makes the full E·f·d gradient of
    ``down_proj``'s copy (of ``gate_up_proj``'s when down is not adapted), which
    ``baddbmm``'s backward then reduces to the adapters'. By ``gate_up_proj``'s, down's
    copy and its gradient are freed (traced on Mixtral: the peak is at down's)."""
    copies = _copies(spec, setup)
    return (copies.get("experts.down_proj") or copies.get("experts.gate_up_proj", 0)) * wb
