"""The term registry: every memory term the estimators can emit, declared once.

A term is a slash path of a :class:`~introspect.breakdown.Breakdown` (``weights``,
``activations/layer/attention/quadratic/probs``). Each record says its category, its
equation (from the docstring or, where the docstring gives none, the expression of the
code that computes it, with that function's name), the source it was derived from (the
library file and function the computing module's docstrings name; "source not recorded"
where they name none), the introspect functions that compute it, and the tests that check
it against a real or a dry-run step (test node ids; ``unchecked`` says why a term has
none). A name with a variable part is a pattern: ``{target}`` stands for one path
component (``activations/layer/lora/{target}/a_output``).

``introspect explain TERM`` prints a record; ``tests/test_terms.py`` fails when an
estimate emits a name that is not here, and when a record names no test (or a test that
does not exist). Plain data: this module imports no estimator and nothing heavy.
"""

# ruff: noqa: E501  (records: one string per field, read whole by `introspect explain`)

from __future__ import annotations

from functools import cache

from introspect._record import record

#: Categories, in the order ``explain --list`` groups them.
CATEGORIES = ("weights", "grads", "optimizer", "communication", "activations", "transient")


@record(kw_only=True)
class Term:
    """One registered term (or pattern of terms)."""

    name: str
    #: weights, grads, optimizer, communication, activations or transient (a gradient or a
    #: copy that lives inside one step of backward or of the update).
    category: str
    equation: str
    source: str
    #: ``file: function`` of every introspect function that computes it.
    computed_by: tuple[str, ...] = ()
    #: Test node ids (``tests/test_x.py::test_name``) checking it against a real or a
    #: dry-run step.
    tests: tuple[str, ...] = ()
    #: Why no test checks it against a step (empty when some test does).
    unchecked: str = ""

    @property
    def is_pattern(self) -> bool:
        return "{" in self.name

    def matches(self, name: str) -> bool:
        """Whether ``name`` is this term, or an instance of this pattern (each ``{…}``
        one path component)."""
        if not self.is_pattern:
            return name == self.name
        mine, theirs = self.name.split("/"), name.split("/")
        return len(mine) == len(theirs) and all(
            m == t or (m.startswith("{") and m.endswith("}") and t)
            for m, t in zip(mine, theirs, strict=True)
        )

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "category": self.category,
            "equation": self.equation,
            "source": self.source,
            "computed_by": list(self.computed_by),
            "tests": list(self.tests),
            "unchecked": self.unchecked,
        }


def lookup(name: str) -> Term | None:
    """The record of ``name``: the term itself, else the pattern it is an instance of."""
    found = _registry()[1].get(name)
    if found is not None:
        return found
    return next((t for t in _registry()[0] if t.is_pattern and t.matches(name)), None)


def names() -> tuple[str, ...]:
    """Every registered name (patterns as written), sorted."""
    return tuple(sorted(_registry()[1]))


# ---- names the estimators write in more than one place -------------------------------
# Each is declared once here and read by the estimators (the string is the term's name).
WEIGHTS = "weights"
GRADS = "grads"
ADAM_M = "optimizer/adam_m"
ADAM_V = "optimizer/adam_v"
MASTER_WEIGHTS = "optimizer/master_weights"
MOMENTUM = "optimizer/momentum"
OPTIMIZER_TEMPORARIES = "optimizer/temporaries"
FSDP_ALL_GATHER = "comm/fsdp_all_gather"
REDUCE_SCATTER = "comm/reduce_scatter"
GLOO_COPY = "comm/gloo_copy"
DDP_BUCKETS = "comm/ddp_buckets"
ZERO_REDUCE_BUCKET = "comm/reduce_bucket"
ZERO_ALL_GATHER = "comm/all_gather"
GATHERED_WEIGHTS = "weights/gathered"
BUFFERS = "weights/buffers"
LOGITS_OUTPUT = "activations/logits/output"
LOGITS_GRAD = "activations/logits/grad"
LOG_SOFTMAX = "activations/logits/log_softmax"
EMBEDDING = "activations/embedding"


def _records() -> tuple[Term, ...]:
    """Every record, built when first asked for: the estimators import this module for the
    names above, and a closed-form command's start should not pay for 120 records."""
    return (
        Term(
            name="activations/attention_mask",
            category="activations",
            equation="n·B·T²·r: eager's (B, 1, T, T) additive causal mask at the residual dtype, one per layer type (n: the types of the stack; at layer i's backward those of layers 0..i), kept by every checkpointed layer as one of its inputs  (eager_masks)",
            source="transformers/masking_utils.py create_causal_mask / create_sliding_window_causal_mask; causal_mask_mapping in models/gemma4/modeling_gemma4.py l. 1650-1653, models/gemma3/modeling_gemma3.py l. 525-528, models/gemma2/modeling_gemma2.py l. 431-434 (introspect/refined/hf_saved.py: embedding, eager_masks)",
            computed_by=(
                "introspect/refined/hf_saved.py: embedding",
                "introspect/refined/hf_saved.py: eager_masks",
                "introspect/refined/execution.py: _layer_moments",
                "introspect/refined/execution.py: attention_forward",
            ),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_gemma4_rows.py::test_gemma4_checkpointed_at_longer_sequences_against_the_dry_run",
            ),
        ),
        Term(
            name="activations/autocast_cache",
            category="activations",
            equation="spec.num_hidden_layers * per_layer  (loss_forward); under LoRA 2 * lora.adapter_parameters(spec, setup)  (loss_forward)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): torch.autocast: each nn.Linear casts its weight to BF16 once (the cast cache), the copy saved by the matmul; the cache takes only leaf FP32 tensors that require grad (aten/src/ATen/autocast_mode.cpp cached_cast), so under LoRA the adapters alone",
            computed_by=("introspect/refined/execution.py: loss_forward",),
            tests=(
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_num_layers.py::test_torch_step_within_3_percent",
            ),
        ),
        Term(
            name="activations/inputs/pixel_values",
            category="activations",
            equation="B·images·patches·C·t·p²·4: the image batch's FP32 pixel_values, held by the training loop through the step (on CUDA in every precision; the CPU/dry-run tracker sees it where an FP32 tower views it)",
            source="transformers/models/qwen3_vl/modeling_qwen3_vl.py: Qwen3VLVisionModel.forward, Qwen3VLVisionPatchEmbed.forward; transformers/models/qwen2_vl/image_processing_qwen2_vl.py: smart_resize",
            computed_by=("introspect/refined/execution.py: embedding_saved",),
            tests=(
                "tests/test_vision.py::test_qwen3_vl_image_step_within_3_percent_of_its_dry_run",
            ),
        ),
        Term(
            name="activations/embedding",
            category="activations",
            equation="s·B·T·d: layer 0's input (seed); refined: the embedding's output as its first norm keeps it",
            source="the seed, 'Memory to Train a Transformer' (introspect/simplified.py: activations/embedding: s·B·T·d)",
            computed_by=(
                "introspect/simplified.py: estimate",
                "introspect/refined/architecture.py: estimate",
                "introspect/refined/execution.py: embedding_saved",
                "introspect/refined/execution.py: backward_moments",
                "introspect/refined/hf_saved.py: embedding",
                "introspect/refined/reference.py: embedding",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
            ),
        ),
        Term(
            name="activations/embedding/dropout_mask",
            category="activations",
            equation="BT * d * dropout_mask_bytes(setup, r)  (embedding)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): nn.functional.dropout in train mode, p > 0; CPU: torch's _dropout_impl (mask in the input's dtype), CUDA: native_dropout (one byte)",
            computed_by=("introspect/refined/hf_saved.py: embedding",),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/embedding/norm",
            category="activations",
            equation="BT * d * norm_input_bytes(spec, setup) + the norm's statistics  (embedding; spec.embedding_norm)",
            source="transformers/models/modernbert_decoder/modeling_modernbert_decoder.py l. 49-68, 338-347 (ModernBertDecoderEmbeddings' norm, ModernBertDecoderPredictionHead), read off the built class by adapters/module_walk.py (outside_norm, sibling)",
            computed_by=("introspect/refined/hf_saved.py: embedding",),
            tests=(
                "tests/test_walked_extras.py::test_modernbert_decoder_within_one_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/head/dense",
            category="activations",
            equation="BT * d * s  (head_transform)",
            source="transformers/models/modernbert_decoder/modeling_modernbert_decoder.py l. 49-68, 338-347 (ModernBertDecoderEmbeddings' norm, ModernBertDecoderPredictionHead), read off the built class by adapters/module_walk.py (outside_norm, sibling)",
            computed_by=("introspect/refined/hf_saved.py: head_transform",),
            tests=(
                "tests/test_walked_extras.py::test_modernbert_decoder_within_one_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/head/act",
            category="activations",
            equation="BT * d * norm_input_bytes(spec, setup)  (head_transform)",
            source="transformers/models/modernbert_decoder/modeling_modernbert_decoder.py l. 49-68, 338-347 (ModernBertDecoderEmbeddings' norm, ModernBertDecoderPredictionHead), read off the built class by adapters/module_walk.py (outside_norm, sibling)",
            computed_by=("introspect/refined/hf_saved.py: head_transform",),
            tests=(
                "tests/test_walked_extras.py::test_modernbert_decoder_within_one_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/head/norm",
            category="activations",
            equation="BT * d * out_bytes  (_norm_terms, head_transform)",
            source="transformers/models/modernbert_decoder/modeling_modernbert_decoder.py l. 49-68, 338-347 (ModernBertDecoderEmbeddings' norm, ModernBertDecoderPredictionHead), read off the built class by adapters/module_walk.py (outside_norm, sibling)",
            computed_by=("introspect/refined/hf_saved.py: head_transform",),
            tests=(
                "tests/test_walked_extras.py::test_modernbert_decoder_within_one_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/head/norm/statistics",
            category="activations",
            equation="norm statistics  (_norm_terms, head_transform)",
            source="transformers/models/modernbert_decoder/modeling_modernbert_decoder.py l. 49-68, 338-347 (ModernBertDecoderEmbeddings' norm, ModernBertDecoderPredictionHead), read off the built class by adapters/module_walk.py (outside_norm, sibling)",
            computed_by=("introspect/refined/hf_saved.py: head_transform",),
            tests=(
                "tests/test_walked_extras.py::test_modernbert_decoder_within_one_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/head/norm/normalized",
            category="activations",
            equation="BT * d * normalized  (_norm_terms, head_transform; RMSNorm)",
            source="transformers/models/modernbert_decoder/modeling_modernbert_decoder.py l. 49-68, 338-347 (ModernBertDecoderEmbeddings' norm, ModernBertDecoderPredictionHead), read off the built class by adapters/module_walk.py (outside_norm, sibling)",
            computed_by=("introspect/refined/hf_saved.py: head_transform",),
            tests=(
                "tests/test_walked_extras.py::test_modernbert_decoder_within_one_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/head/autocast_weight",
            category="activations",
            equation="2 * d * d  (head_transform, autocast)",
            source="transformers/models/modernbert_decoder/modeling_modernbert_decoder.py l. 49-68, 338-347 (ModernBertDecoderEmbeddings' norm, ModernBertDecoderPredictionHead), read off the built class by adapters/module_walk.py (outside_norm, sibling)",
            computed_by=("introspect/refined/hf_saved.py: head_transform",),
            tests=(
                "tests/test_walked_extras.py::test_modernbert_decoder_within_one_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/embedding/grad",
            category="transient",
            equation="B·T·d·s: the gradient of layer 0's input, alive while the embedding's V·d gradient is made",
            source="torch embedding_dense_backward (introspect/refined/execution.py: backward_end)",
            computed_by=("introspect/refined/execution.py: backward_end",),
            tests=(
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/final_norm",
            category="activations",
            equation="BT * d * s  (final)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): the final norm, as the block norms (LlamaRMSNorm, GemmaRMSNorm, nn.LayerNorm)",
            computed_by=(
                "introspect/refined/reference.py: final",
                "introspect/refined/hf_saved.py: final",
            ),
            tests=(
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/final_norm/centered",
            category="activations",
            equation="2 * BT * d * FP32  (_norm_terms, final)",
            source="transformers 5: Cohere2LayerNorm (models/cohere2/modeling_cohere2.py): ``(hidden_states - mean)`` written twice, each saved (by ``pow`` and by the rstd multiply), in FP32: the final norm",
            computed_by=("introspect/refined/hf_saved.py: final",),
            tests=("tests/test_refined_transformers.py::test_cohere2_dry_run_is_within_1_percent",),
        ),
        Term(
            name="activations/final_norm/weight_cast",
            category="activations",
            equation="spec.hidden_size * FP32  (final; with 16-bit weights)",
            source="transformers/models/gemma4_unified/modeling_gemma4_unified.py l. 156-173: Gemma4UnifiedRMSNorm's normed_output * self.weight.float(), the FP32 copy of a 16-bit weight saved by the multiply (introspect/refined/transformers_classes.py: rstd_by_pow)",
            computed_by=("introspect/refined/hf_saved.py: final",),
            tests=(
                "tests/test_gemma4_rows.py::test_gemma4_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/final_norm/input",
            category="activations",
            equation="BTd * norm_input_bytes(spec, setup)  (final); BTd * (norm_input_bytes(spec, setup) - layer_input_bytes(spec, setup))  (final)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): the final norm, as the block norms (LlamaRMSNorm, GemmaRMSNorm, nn.LayerNorm)",
            computed_by=("introspect/refined/hf_saved.py: final",),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/final_norm/normalized",
            category="activations",
            equation="norm_extra(spec, BT, d, s)  (final)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): the final norm, as the block norms (LlamaRMSNorm, GemmaRMSNorm, nn.LayerNorm)",
            computed_by=("introspect/refined/reference.py: final",),
            tests=(
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/final_norm/statistics",
            category="activations",
            equation="norm_statistics(spec, BT)  (final)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): the final norm, as the block norms (LlamaRMSNorm, GemmaRMSNorm, nn.LayerNorm)",
            computed_by=("introspect/refined/reference.py: final",),
            tests=(
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/grad_upcast",
            category="transient",
            equation="reduce_b * block if reduce_b != param_b else 0  (post_backward)",
            source="torch/distributed/fsdp/_fully_shard/ (_fsdp_param.py: dim-0 shards padded to a multiple of D; _fsdp_state.py; foreach_reduce's reduce-scatter) (introspect/refined/sharding.py module docstring)",
            computed_by=("introspect/refined/sharding.py: post_backward",),
            tests=(
                "tests/test_sharding.py::test_real_two_process_steps_match_the_per_rank_estimate",
                "tests/test_sharding.py::test_transformers_classes_in_two_processes_match_the_estimate",
            ),
        ),
        Term(
            name="activations/layer/attention/deltanet/chunk_matrices",
            category="activations",
            equation="2 * square * FP32 + 2 * square * BF16  (saved); 5 * square * FP32  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated (introspect/refined/deltanet.py)",
            computed_by=("introspect/refined/deltanet.py: saved",),
            tests=("tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/deltanet/conv/input",
            category="activations",
            equation="B * T * C * a  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated (introspect/refined/deltanet.py)",
            computed_by=("introspect/refined/deltanet.py: saved",),
            tests=("tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba1/decay",
            category="activations",
            equation="2 * I * n * FP32  (saved)",
            source="transformers/models/mamba/modeling_mamba.py: MambaMixer.slow_forward (= falcon_mamba's FalconMambaMixer, jamba's JambaMambaMixer) (introspect/refined/mamba1.py)",
            computed_by=("introspect/refined/mamba1.py: saved",),
            tests=("tests/test_mamba1.py::test_mamba1_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba1/in_proj",
            category="activations",
            equation="B * T * 2 * I * a  (saved)",
            source="transformers/models/mamba/modeling_mamba.py: MambaMixer.slow_forward (= falcon_mamba's FalconMambaMixer, jamba's JambaMambaMixer) (introspect/refined/mamba1.py)",
            computed_by=("introspect/refined/mamba1.py: saved",),
            tests=("tests/test_mamba1.py::test_mamba1_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba1/conv/input",
            category="activations",
            equation="autocast: B * T * I * BF16  (saved)",
            source="transformers/models/mamba/modeling_mamba.py: MambaMixer.slow_forward (= falcon_mamba's FalconMambaMixer, jamba's JambaMambaMixer) (introspect/refined/mamba1.py)",
            computed_by=("introspect/refined/mamba1.py: saved",),
            tests=("tests/test_mamba1.py::test_mamba1_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba1/conv/output",
            category="activations",
            equation="B * I * (T + w - 1) * a  (saved)",
            source="transformers/models/mamba/modeling_mamba.py: MambaMixer.slow_forward (= falcon_mamba's FalconMambaMixer, jamba's JambaMambaMixer) (introspect/refined/mamba1.py)",
            computed_by=("introspect/refined/mamba1.py: saved",),
            tests=("tests/test_mamba1.py::test_mamba1_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba1/x",
            category="activations",
            equation="B * T * I * a + (B·T·I·a when B, T > 1: x_proj's contiguous copy) + B * T * (R + 2n) * a  (saved)",
            source="transformers/models/mamba/modeling_mamba.py: MambaMixer.slow_forward (= falcon_mamba's FalconMambaMixer, jamba's JambaMambaMixer) (introspect/refined/mamba1.py)",
            computed_by=("introspect/refined/mamba1.py: saved",),
            tests=("tests/test_mamba1.py::test_mamba1_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba1/dt",
            category="activations",
            equation="2 * B * T * I * a  (saved)",
            source="transformers/models/mamba/modeling_mamba.py: MambaMixer.slow_forward (= falcon_mamba's FalconMambaMixer, jamba's JambaMambaMixer) (introspect/refined/mamba1.py)",
            computed_by=("introspect/refined/mamba1.py: saved",),
            tests=("tests/test_mamba1.py::test_mamba1_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba1/discretize",
            category="activations",
            equation="2 * B * T * I * n * FP32 (+ B * T * n * FP32 + B * T * I * FP32 off FP32)  (saved)",
            source="transformers/models/mamba/modeling_mamba.py: MambaMixer.slow_forward (= falcon_mamba's FalconMambaMixer, jamba's JambaMambaMixer) (introspect/refined/mamba1.py)",
            computed_by=("introspect/refined/mamba1.py: saved",),
            tests=("tests/test_mamba1.py::test_mamba1_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba1/states",
            category="activations",
            equation="B * I * n * a + T * B * I * n * FP32 (T - 1 off FP32, + T * B * I * n * BF16)  (saved)",
            source="transformers/models/mamba/modeling_mamba.py: MambaMixer.slow_forward (= falcon_mamba's FalconMambaMixer, jamba's JambaMambaMixer) (introspect/refined/mamba1.py)",
            computed_by=("introspect/refined/mamba1.py: saved",),
            tests=("tests/test_mamba1.py::test_mamba1_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba1/output",
            category="activations",
            equation="B * T * I * (FP32 + a) (+ I * FP32 under a 16-bit stream)  (saved)",
            source="transformers/models/mamba/modeling_mamba.py: MambaMixer.slow_forward (= falcon_mamba's FalconMambaMixer, jamba's JambaMambaMixer) (introspect/refined/mamba1.py)",
            computed_by=("introspect/refined/mamba1.py: saved",),
            tests=("tests/test_mamba1.py::test_mamba1_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba1/bcdt_norm",
            category="activations",
            equation="3 * B * T * FP32 + B * T * (R + 2n) * FP32 (16-bit: (R + n) * BF16 kept + FP32 copies) + weighted norms' input  (saved)",
            source="transformers/models/mamba/modeling_mamba.py: MambaMixer.slow_forward (= falcon_mamba's FalconMambaMixer, jamba's JambaMambaMixer) (introspect/refined/mamba1.py)",
            computed_by=("introspect/refined/mamba1.py: saved",),
            tests=("tests/test_mamba1.py::test_mamba1_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/rglru/branches",
            category="activations",
            equation="3 * N * s: linear_y's output, its GELU's, linear_x's output (N = B·T·W)  (saved)",
            source="transformers/models/recurrent_gemma/modeling_recurrent_gemma.py: RecurrentGemmaRecurrentBlock.forward (l. 415-461), RecurrentGemmaRglru.forward and _rnn_scan (l. 301-389), SqrtBoundDerivative (l. 264-278) (introspect/refined/rglru.py)",
            computed_by=("introspect/refined/rglru.py: saved",),
            tests=("tests/test_recurrent_gemma.py::test_rglru_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/rglru/conv",
            category="activations",
            equation="B * W * (T + w - 1) * s: the causal conv's output  (saved)",
            source="transformers/models/recurrent_gemma/modeling_recurrent_gemma.py: RecurrentGemmaRecurrentBlock.forward (l. 415-461), RecurrentGemmaRglru.forward and _rnn_scan (l. 301-389), SqrtBoundDerivative (l. 264-278) (introspect/refined/rglru.py)",
            computed_by=("introspect/refined/rglru.py: saved",),
            tests=("tests/test_recurrent_gemma.py::test_rglru_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/rglru/gates",
            category="activations",
            equation="3 * N * s (+ N * s where B > 1 and T > 1: the reshape copy) + W * p: the two sigmoids, -8·recurrent_gate, softplus(recurrent_param)  (saved)",
            source="transformers/models/recurrent_gemma/modeling_recurrent_gemma.py: RecurrentGemmaRecurrentBlock.forward (l. 415-461), RecurrentGemmaRglru.forward and _rnn_scan (l. 301-389), SqrtBoundDerivative (l. 264-278) (introspect/refined/rglru.py)",
            computed_by=("introspect/refined/rglru.py: saved",),
            tests=("tests/test_recurrent_gemma.py::test_rglru_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/rglru/decay",
            category="activations",
            equation="4 * N * c (c = 2: 3 * N * c): a, a², 1 - a², a·~reset; c the gate times softplus promoted  (saved)",
            source="transformers/models/recurrent_gemma/modeling_recurrent_gemma.py: RecurrentGemmaRecurrentBlock.forward (l. 415-461), RecurrentGemmaRglru.forward and _rnn_scan (l. 301-389), SqrtBoundDerivative (l. 264-278) (introspect/refined/rglru.py)",
            computed_by=("introspect/refined/rglru.py: saved",),
            tests=("tests/test_recurrent_gemma.py::test_rglru_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/rglru/normalized",
            category="activations",
            equation="2 * N * s + 2 * T: the gated input, the multiplier, the two ~reset masks  (saved)",
            source="transformers/models/recurrent_gemma/modeling_recurrent_gemma.py: RecurrentGemmaRecurrentBlock.forward (l. 415-461), RecurrentGemmaRglru.forward and _rnn_scan (l. 301-389), SqrtBoundDerivative (l. 264-278) (introspect/refined/rglru.py)",
            computed_by=("introspect/refined/rglru.py: saved",),
            tests=("tests/test_recurrent_gemma.py::test_rglru_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/rglru/states",
            category="activations",
            equation="T * B * W * FP32 (+ (T - 1) * B * W * FP32 FP32 copies of a[:, t] where c = 2): the Python scan's states  (saved)",
            source="transformers/models/recurrent_gemma/modeling_recurrent_gemma.py: RecurrentGemmaRecurrentBlock.forward (l. 415-461), RecurrentGemmaRglru.forward and _rnn_scan (l. 301-389), SqrtBoundDerivative (l. 264-278) (introspect/refined/rglru.py)",
            computed_by=("introspect/refined/rglru.py: saved",),
            tests=("tests/test_recurrent_gemma.py::test_rglru_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/rglru/output",
            category="activations",
            equation="2 * N * s: contextualized_states and its product with the y branch  (saved)",
            source="transformers/models/recurrent_gemma/modeling_recurrent_gemma.py: RecurrentGemmaRecurrentBlock.forward (l. 415-461), RecurrentGemmaRglru.forward and _rnn_scan (l. 301-389), SqrtBoundDerivative (l. 264-278) (introspect/refined/rglru.py)",
            computed_by=("introspect/refined/rglru.py: saved",),
            tests=("tests/test_recurrent_gemma.py::test_rglru_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/rglru/input_casts",
            category="activations",
            equation="2 * B * T * d * BF16: linear_y's and linear_x's casts of the norm output (autocast)  (saved)",
            source="transformers/models/recurrent_gemma/modeling_recurrent_gemma.py: RecurrentGemmaRecurrentBlock.forward (l. 415-461), RecurrentGemmaRglru.forward and _rnn_scan (l. 301-389), SqrtBoundDerivative (l. 264-278) (introspect/refined/rglru.py)",
            computed_by=("introspect/refined/rglru.py: saved",),
            tests=("tests/test_recurrent_gemma.py::test_rglru_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/rglru/autocast_weights",
            category="activations",
            equation="(3 * W * d + 2 * W * W/h + W * w) * BF16: the linears', gates' and conv's weight casts (autocast)  (saved)",
            source="transformers/models/recurrent_gemma/modeling_recurrent_gemma.py: RecurrentGemmaRecurrentBlock.forward (l. 415-461), RecurrentGemmaRglru.forward and _rnn_scan (l. 301-389), SqrtBoundDerivative (l. 264-278) (introspect/refined/rglru.py)",
            computed_by=("introspect/refined/rglru.py: saved",),
            tests=("tests/test_recurrent_gemma.py::test_rglru_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/rglru/recurrent_states",
            category="activations",
            equation="Σ recurrent layers B * W * FP32: each RG-LRU's last state, stored on the module (self.recurrent_states) until the next forward: resident every moment",
            source="transformers/models/recurrent_gemma/modeling_recurrent_gemma.py: RecurrentGemmaRecurrentBlock.forward (l. 415-461), RecurrentGemmaRglru.forward and _rnn_scan (l. 301-389), SqrtBoundDerivative (l. 264-278) (introspect/refined/rglru.py)",
            computed_by=(
                "introspect/refined/rglru.py: resident",
                "introspect/refined/execution.py: framework_extra",
            ),
            tests=(
                "tests/test_recurrent_gemma.py::test_backward_moment_equals_a_live_storage_trace",
            ),
        ),
        Term(
            name="activations/rglru/recomputed_graph",
            category="activations",
            equation="Σ recomputed recurrent layers: saved - 4 * N * s (- autocast's linear_y input and linear_y/linear_out weight casts) + temporal_pre_norm's input, rstd, x·rstd, 1 + weight (and its output outside autocast): the recomputed graph the module's last state keeps, from the layer's backward to its next forward (non-reentrant checkpointing)",
            source="torch/utils/checkpoint.py: _recomputation_hook (pack_hook returns x); transformers/models/recurrent_gemma/modeling_recurrent_gemma.py: RecurrentGemmaRecurrentBlock.forward (l. 415-461), RecurrentGemmaRglru.forward and _rnn_scan (l. 301-389), SqrtBoundDerivative (l. 264-278) (introspect/refined/rglru.py)",
            computed_by=(
                "introspect/refined/rglru.py: retained",
                "introspect/refined/execution.py: rglru_retained_total",
            ),
            tests=(
                "tests/test_recurrent_gemma.py::test_a_checkpointed_layer_keeps_its_recomputed_graph",
            ),
        ),
        Term(
            name="activations/layer/attention/mamba/decay",
            category="activations",
            equation="2 * h * FP32  (saved)",
            source="transformers/models/granitemoehybrid/modeling_granitemoehybrid.py: GraniteMoeHybridMambaLayer.forward, causal_conv1d_fn, mamba2_chunk_scan, segment_sum, GraniteMoeHybridRMSNormGated (= nemotron_h's NemotronHMamba2Mixer) (introspect/refined/mamba2.py)",
            computed_by=("introspect/refined/mamba2.py: saved",),
            tests=("tests/test_ssm.py::test_mamba2_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba/conv/input",
            category="activations",
            equation="B * T * P * a; autocast: B * T * C * 2  (saved)",
            source="transformers/models/granitemoehybrid/modeling_granitemoehybrid.py: GraniteMoeHybridMambaLayer.forward, causal_conv1d_fn, mamba2_chunk_scan, segment_sum, GraniteMoeHybridRMSNormGated (= nemotron_h's NemotronHMamba2Mixer) (introspect/refined/mamba2.py)",
            computed_by=("introspect/refined/mamba2.py: saved",),
            tests=("tests/test_ssm.py::test_mamba2_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba/conv/output",
            category="activations",
            equation="B * C * (T + w - 1) * a  (saved)",
            source="transformers/models/granitemoehybrid/modeling_granitemoehybrid.py: GraniteMoeHybridMambaLayer.forward, causal_conv1d_fn, mamba2_chunk_scan, segment_sum, GraniteMoeHybridRMSNormGated (= nemotron_h's NemotronHMamba2Mixer) (introspect/refined/mamba2.py)",
            computed_by=("introspect/refined/mamba2.py: saved",),
            tests=("tests/test_ssm.py::test_mamba2_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba/dt",
            category="activations",
            equation="2 * B * T * h * a + (1 or 2) * B * T * h * FP32  (saved)",
            source="transformers/models/granitemoehybrid/modeling_granitemoehybrid.py: GraniteMoeHybridMambaLayer.forward, causal_conv1d_fn, mamba2_chunk_scan, segment_sum, GraniteMoeHybridRMSNormGated (= nemotron_h's NemotronHMamba2Mixer) (introspect/refined/mamba2.py)",
            computed_by=("introspect/refined/mamba2.py: saved",),
            tests=("tests/test_ssm.py::test_mamba2_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba/x",
            category="activations",
            equation="B * T * C * FP32 (FP32: the SiLU output's storage), else B * T * I * FP32  (saved)",
            source="transformers/models/granitemoehybrid/modeling_granitemoehybrid.py: GraniteMoeHybridMambaLayer.forward, causal_conv1d_fn, mamba2_chunk_scan, segment_sum, GraniteMoeHybridRMSNormGated (= nemotron_h's NemotronHMamba2Mixer) (introspect/refined/mamba2.py)",
            computed_by=("introspect/refined/mamba2.py: saved",),
            tests=("tests/test_ssm.py::test_mamba2_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba/residual",
            category="activations",
            equation="B * T_p * I * FP32  (saved)",
            source="transformers/models/granitemoehybrid/modeling_granitemoehybrid.py: GraniteMoeHybridMambaLayer.forward, causal_conv1d_fn, mamba2_chunk_scan, segment_sum, GraniteMoeHybridRMSNormGated (= nemotron_h's NemotronHMamba2Mixer) (introspect/refined/mamba2.py)",
            computed_by=("introspect/refined/mamba2.py: saved",),
            tests=("tests/test_ssm.py::test_mamba2_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba/masks",
            category="activations",
            equation="2 * c**2 + 2 * (N + 1)**2  (saved, bool)",
            source="transformers/models/granitemoehybrid/modeling_granitemoehybrid.py: GraniteMoeHybridMambaLayer.forward, causal_conv1d_fn, mamba2_chunk_scan, segment_sum, GraniteMoeHybridRMSNormGated (= nemotron_h's NemotronHMamba2Mixer) (introspect/refined/mamba2.py)",
            computed_by=("introspect/refined/mamba2.py: saved",),
            tests=("tests/test_ssm.py::test_mamba2_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba/intra_chunk",
            category="activations",
            equation="square * (FP32 + m + FP32 or BF16) + B*h*T_p*(2n + p) * m, square = B*h*N*c**2  (saved)",
            source="transformers/models/granitemoehybrid/modeling_granitemoehybrid.py: GraniteMoeHybridMambaLayer.forward, causal_conv1d_fn, mamba2_chunk_scan, segment_sum, GraniteMoeHybridRMSNormGated (= nemotron_h's NemotronHMamba2Mixer) (introspect/refined/mamba2.py)",
            computed_by=("introspect/refined/mamba2.py: saved",),
            tests=("tests/test_ssm.py::test_mamba2_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba/states",
            category="activations",
            equation="B*h*T_p*FP32 + B*T_p*h*n*FP32 + B*h*T_p*(n + p)*m + B*h*(N+1)**2*FP32 + B*h*(N+1)*p*n*m  (saved)",
            source="transformers/models/granitemoehybrid/modeling_granitemoehybrid.py: GraniteMoeHybridMambaLayer.forward, causal_conv1d_fn, mamba2_chunk_scan, segment_sum, GraniteMoeHybridRMSNormGated (= nemotron_h's NemotronHMamba2Mixer) (introspect/refined/mamba2.py)",
            computed_by=("introspect/refined/mamba2.py: saved",),
            tests=("tests/test_ssm.py::test_mamba2_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba/state_output",
            category="activations",
            equation="B*h*T_p*FP32 + B*h*N*p*n*m + B*h*T_p*(n + p)*m  (saved)",
            source="transformers/models/granitemoehybrid/modeling_granitemoehybrid.py: GraniteMoeHybridMambaLayer.forward, causal_conv1d_fn, mamba2_chunk_scan, segment_sum, GraniteMoeHybridRMSNormGated (= nemotron_h's NemotronHMamba2Mixer) (introspect/refined/mamba2.py)",
            computed_by=("introspect/refined/mamba2.py: saved",),
            tests=("tests/test_ssm.py::test_mamba2_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/shared_block/input_norm",
            category="activations",
            equation="B*T*W*FP32 + B*T*FP32 + B*T*W*rb  (saved: the norm's FP32 input over the concatenation, its rstd, x·rstd cast back)",
            source="transformers/models/zamba2/modeling_zamba2.py: Zamba2HybridLayer.forward, Zamba2AttentionDecoderLayer.forward, Zamba2Attention.forward, Zamba2MLP.forward, Zamba2RMSNorm (introspect/refined/shared_block.py)",
            computed_by=("introspect/refined/shared_block.py: saved",),
            tests=(
                "tests/test_zamba2.py::test_shared_block_saved_set_equals_the_census",
                "tests/test_zamba2.py::test_zamba2_closed_form_within_3_percent_of_its_dry_run",
            ),
        ),
        Term(
            name="activations/layer/shared_block/input_norm/output",
            category="activations",
            equation="B*T*W*rb, or under autocast B*T*W*BF16 per reader (q, k, v and their adapters)  (saved)",
            source="transformers/models/zamba2/modeling_zamba2.py: Zamba2HybridLayer.forward, Zamba2AttentionDecoderLayer.forward, Zamba2Attention.forward, Zamba2MLP.forward, Zamba2RMSNorm (introspect/refined/shared_block.py)",
            computed_by=("introspect/refined/shared_block.py: saved",),
            tests=(
                "tests/test_zamba2.py::test_shared_block_saved_set_equals_the_census",
                "tests/test_zamba2.py::test_zamba2_closed_form_within_3_percent_of_its_dry_run",
            ),
        ),
        Term(
            name="activations/layer/shared_block/ffn_norm",
            category="activations",
            equation="B*T*d*FP32 + B*T*FP32 + B*T*d*s  (saved: pre_ff_layernorm's FP32 input, rstd, x·rstd)",
            source="transformers/models/zamba2/modeling_zamba2.py: Zamba2HybridLayer.forward, Zamba2AttentionDecoderLayer.forward, Zamba2Attention.forward, Zamba2MLP.forward, Zamba2RMSNorm (introspect/refined/shared_block.py)",
            computed_by=("introspect/refined/shared_block.py: saved",),
            tests=(
                "tests/test_zamba2.py::test_shared_block_saved_set_equals_the_census",
                "tests/test_zamba2.py::test_zamba2_closed_form_within_3_percent_of_its_dry_run",
            ),
        ),
        Term(
            name="activations/layer/shared_block/ffn_norm/output",
            category="activations",
            equation="B*T*d*s, or under autocast B*T*d*BF16 per reader (gate_up and its adapter)  (saved)",
            source="transformers/models/zamba2/modeling_zamba2.py: Zamba2HybridLayer.forward, Zamba2AttentionDecoderLayer.forward, Zamba2Attention.forward, Zamba2MLP.forward, Zamba2RMSNorm (introspect/refined/shared_block.py)",
            computed_by=("introspect/refined/shared_block.py: saved",),
            tests=(
                "tests/test_zamba2.py::test_shared_block_saved_set_equals_the_census",
                "tests/test_zamba2.py::test_zamba2_closed_form_within_3_percent_of_its_dry_run",
            ),
        ),
        Term(
            name="activations/layer/shared_block/attention/{tensor}",
            category="activations",
            equation="q, k, v (B*T*q_dim*s, K/V repeated where eager repeats them), context B*T*q_dim*s, eager's probs B*h*T²*4 and probs_cast, SDPA's log-sum-exp B*h*T*4, the q/k/v adapters' middles 3*B*T*r*s  (saved)",
            source="transformers/models/zamba2/modeling_zamba2.py: Zamba2HybridLayer.forward, Zamba2AttentionDecoderLayer.forward, Zamba2Attention.forward, Zamba2MLP.forward, Zamba2RMSNorm (introspect/refined/shared_block.py)",
            computed_by=("introspect/refined/shared_block.py: saved",),
            tests=(
                "tests/test_zamba2.py::test_shared_block_saved_set_equals_the_census",
                "tests/test_zamba2.py::test_zamba2_closed_form_within_3_percent_of_its_dry_run",
            ),
        ),
        Term(
            name="activations/layer/shared_block/feed_forward/{tensor}",
            category="activations",
            equation="gate_up + adapter B*T*2f*s, the adapter's middle B*T*r*s, act and product B*T*f*s each, down_proj's output (kept by the per-use linear) B*T*d*s  (saved)",
            source="transformers/models/zamba2/modeling_zamba2.py: Zamba2HybridLayer.forward, Zamba2AttentionDecoderLayer.forward, Zamba2Attention.forward, Zamba2MLP.forward, Zamba2RMSNorm (introspect/refined/shared_block.py)",
            computed_by=("introspect/refined/shared_block.py: saved",),
            tests=(
                "tests/test_zamba2.py::test_shared_block_saved_set_equals_the_census",
                "tests/test_zamba2.py::test_zamba2_closed_form_within_3_percent_of_its_dry_run",
            ),
        ),
        Term(
            name="activations/layer/shared_block/autocast_weights",
            category="activations",
            equation="autocast: BF16 * (each use's own linears + the block's q, k, v, o, gate_up, down), the block's once per forward (cached_cast)  (saved)",
            source="transformers/models/zamba2/modeling_zamba2.py: Zamba2HybridLayer.forward, Zamba2AttentionDecoderLayer.forward, Zamba2Attention.forward, Zamba2MLP.forward, Zamba2RMSNorm (introspect/refined/shared_block.py)",
            computed_by=("introspect/refined/shared_block.py: saved",),
            tests=(
                "tests/test_zamba2.py::test_shared_block_saved_set_equals_the_census",
                "tests/test_zamba2.py::test_zamba2_closed_form_within_3_percent_of_its_dry_run",
            ),
        ),
        Term(
            name="activations/embedding/copy",
            category="activations",
            equation="checkpointing: B*T*d*rb, Zamba2's original_hidden_states = torch.clone(inputs_embeds), kept among every checkpointed layer's inputs",
            source="transformers/models/zamba2/modeling_zamba2.py: Zamba2Model.forward (introspect/refined/shared_block.py: embedding_copy)",
            computed_by=(
                "introspect/refined/saved.py: embedding",
                "introspect/refined/shared_block.py: embedding_copy",
            ),
            tests=(
                "tests/test_zamba2.py::test_zamba2_closed_form_within_3_percent_of_its_dry_run",
            ),
        ),
        Term(
            name="activations/layer/layernorm/shared_block",
            category="activations",
            equation="s·B·T·(W + d) per use: the block's input norm over W = 2d and its pre-feed-forward norm",
            source="transformers/models/zamba2/modeling_zamba2.py: Zamba2HybridLayer, Zamba2AttentionDecoderLayer (introspect/refined/architecture.py: shared_block_values)",
            computed_by=("introspect/refined/architecture.py: estimate",),
            tests=(
                "tests/test_zamba2.py::test_architecture_layer_counts_the_shared_block_per_use",
            ),
        ),
        Term(
            name="activations/layer/attention/linear/shared_block",
            category="activations",
            equation="s·B·T·(2·q_dim + 2·kv_dim + d) per use: Q, K, V, the context, o_proj's output",
            source="transformers/models/zamba2/modeling_zamba2.py: Zamba2HybridLayer, Zamba2AttentionDecoderLayer (introspect/refined/architecture.py: shared_block_values)",
            computed_by=("introspect/refined/architecture.py: estimate",),
            tests=(
                "tests/test_zamba2.py::test_architecture_layer_counts_the_shared_block_per_use",
            ),
        ),
        Term(
            name="activations/layer/attention/quadratic/shared_block",
            category="activations",
            equation="s·2·B·h·T² per use: the seed's scores and probabilities",
            source="transformers/models/zamba2/modeling_zamba2.py: Zamba2HybridLayer, Zamba2AttentionDecoderLayer (introspect/refined/architecture.py: shared_block_values)",
            computed_by=("introspect/refined/architecture.py: estimate",),
            tests=(
                "tests/test_zamba2.py::test_architecture_layer_counts_the_shared_block_per_use",
            ),
        ),
        Term(
            name="activations/layer/feed_forward/shared_block",
            category="activations",
            equation="s·B·T·(4f + 2d) per use (gated; 2f + 2d plain): gate, up, act, product, the MLP's and the per-use linear's outputs",
            source="transformers/models/zamba2/modeling_zamba2.py: Zamba2HybridLayer, Zamba2AttentionDecoderLayer (introspect/refined/architecture.py: shared_block_values)",
            computed_by=("introspect/refined/architecture.py: estimate",),
            tests=(
                "tests/test_zamba2.py::test_architecture_layer_counts_the_shared_block_per_use",
            ),
        ),
        Term(
            name="activations/layer/attention/mamba/gated_norm",
            category="activations",
            equation="gate + 3 * B*T*I*FP32 + B*T_p*I*FP32 + B*T*g*FP32  (saved)",
            source="transformers/models/granitemoehybrid/modeling_granitemoehybrid.py: GraniteMoeHybridMambaLayer.forward, causal_conv1d_fn, mamba2_chunk_scan, segment_sum, GraniteMoeHybridRMSNormGated (= nemotron_h's NemotronHMamba2Mixer) (introspect/refined/mamba2.py)",
            computed_by=("introspect/refined/mamba2.py: saved",),
            tests=("tests/test_ssm.py::test_mamba2_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba/scaled_input",
            category="activations",
            equation="B * T * d * a: in_proj's input hidden_states * ssm_in_multiplier, a copy of the block norm's output beside the attention's; none under autocast (in_proj keeps its BF16 cast)  (saved)",
            source="transformers/models/falcon_h1/modeling_falcon_h1.py: FalconH1Mixer.forward (ssm_in_multiplier, mup_vector), FalconH1DecoderLayer.forward (introspect/refined/falcon_h1.py)",
            computed_by=("introspect/refined/falcon_h1.py: mixer_saved",),
            tests=("tests/test_falcon_h1.py::test_falcon_h1_mixer_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba/gate",
            category="activations",
            equation="B*T*I*a (SiLU(gate), saved by the product) + B*T_p*I*FP32 (the padded scan output, a view of which the product saves); autocast: + B*T*P*FP32 (the FP32 muP product the gate is a view of) and SiLU in FP32  (saved)",
            source="transformers/models/falcon_h1/modeling_falcon_h1.py: FalconH1Mixer.forward (ssm_in_multiplier, mup_vector), FalconH1DecoderLayer.forward (introspect/refined/falcon_h1.py)",
            computed_by=("introspect/refined/falcon_h1.py: mixer_saved",),
            tests=("tests/test_falcon_h1.py::test_falcon_h1_mixer_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/mamba/context",
            category="activations",
            equation="B * T * I * (FP32 in FP32, else BF16): the parallel mixer's out_proj input, beside the attention's context  (saved)",
            source="transformers/models/falcon_h1/modeling_falcon_h1.py: FalconH1Mixer.forward (ssm_in_multiplier, mup_vector), FalconH1DecoderLayer.forward (introspect/refined/falcon_h1.py)",
            computed_by=("introspect/refined/falcon_h1.py: mixer_saved",),
            tests=("tests/test_falcon_h1.py::test_falcon_h1_mixer_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/deltanet/conv/output",
            category="activations",
            equation="B * (T + w - 1) * C * a  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated (introspect/refined/deltanet.py)",
            computed_by=("introspect/refined/deltanet.py: saved",),
            tests=("tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/deltanet/decays",
            category="activations",
            equation="(3 * heads * Tp + heads * N) * FP32  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated (introspect/refined/deltanet.py)",
            computed_by=("introspect/refined/deltanet.py: saved",),
            tests=("tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/deltanet/gated_norm",
            category="activations",
            equation="kernel_out + rows * (a + weighted + FP32) + B * T * nv * FP32 + gate  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated (introspect/refined/deltanet.py)",
            computed_by=("introspect/refined/deltanet.py: saved",),
            tests=("tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/deltanet/k_beta",
            category="activations",
            equation="heads * Tp * dk * FP32  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated (introspect/refined/deltanet.py)",
            computed_by=("introspect/refined/deltanet.py: saved",),
            tests=("tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/deltanet/mask",
            category="activations",
            equation="c * c  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated (introspect/refined/deltanet.py)",
            computed_by=("introspect/refined/deltanet.py: saved",),
            tests=("tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/deltanet/matmul_casts",
            category="activations",
            equation="(4 * Tp * dk + loop) * heads * BF16  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated (introspect/refined/deltanet.py)",
            computed_by=("introspect/refined/deltanet.py: saved",),
            tests=("tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/deltanet/matmul_copies",
            category="activations",
            equation="4 * heads * Tp * dk * FP32  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated (introspect/refined/deltanet.py)",
            computed_by=("introspect/refined/deltanet.py: saved",),
            tests=("tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/deltanet/padded",
            category="activations",
            equation="heads * Tp * (2 * dk + dv + 1) * FP32  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated (introspect/refined/deltanet.py)",
            computed_by=("introspect/refined/deltanet.py: saved",),
            tests=("tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/deltanet/qk_l2norm",
            category="activations",
            equation="qk + 2 * heads * T * FP32  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated (introspect/refined/deltanet.py)",
            computed_by=("introspect/refined/deltanet.py: saved",),
            tests=("tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/deltanet/scan",
            category="activations",
            equation="heads * Tp * (dv + dk) * FP32 + query  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated (introspect/refined/deltanet.py)",
            computed_by=("introspect/refined/deltanet.py: saved",),
            tests=("tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/deltanet/solved",
            category="activations",
            equation="heads * Tp * (dv + dk) * FP32  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated (introspect/refined/deltanet.py)",
            computed_by=("introspect/refined/deltanet.py: saved",),
            tests=("tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/deltanet/state",
            category="activations",
            equation="N * heads * dk * dv * FP32  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated (introspect/refined/deltanet.py)",
            computed_by=("introspect/refined/deltanet.py: saved",),
            tests=("tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/attention/dropout_mask",
            category="activations",
            equation="BT * d * dropout_mask_bytes(setup, s)  (per_layer)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): nn.functional.dropout in train mode, p > 0; CPU: torch's _dropout_impl (mask in the input's dtype), CUDA: native_dropout (one byte)",
            computed_by=("introspect/refined/hf_saved.py: per_layer",),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/layer/attention/grad",
            category="transient",
            equation="eager: 2·B·h·T²·4, the FP32 gradients of the probabilities and of the scores, plus 2·B·T·d (the residual stream's gradient and grad-of-V); SDPA: the gradients of Q, K and V instead; Mamba-2: the larger of 5·B·T·I·4 of its gated norm's backward less x·rstd, the rstd (and autocast's out_proj weight copy) it freed, and the scan's backward (the largest of three moments: B * decay_states's, four B·h·T_p·n·4 gradients; M = G * L's, M's gradient beside both products, B·h·N·c²·4 each; G's einsum's; beside the off-diagonal branch's C, B, x and A_cumsum gradients, less steps 2-4's saved set, M, G and the gated norm's as each is freed), plus the stream's gradient B·T·d (introspect/refined/mamba2.py: backward_transient, scan_backward_transient); Falcon-H1's parallel mixer: the larger of the attention's and the same scan backward over its own saved set, less the attention's own saved terms its earlier backward freed (introspect/refined/falcon_h1.py: backward_transient)",
            source="eager softmax backward, SDPA's backward; transformers/models/granitemoehybrid/modeling_granitemoehybrid.py: mamba2_chunk_scan (l. 389-500, Falcon-H1's and Nemotron-H's the same); torch/csrc/autograd/engine.cpp: ReadyQueue by sequence number; torch/utils/checkpoint.py: unpack_hook (introspect/refined/execution.py: attention_transient)",
            computed_by=("introspect/refined/execution.py: at_layer",),
            tests=(
                "tests/test_falcon_h1.py::test_falcon_h1_mixer_scan_moments_against_the_dry_run",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_ssm.py::test_granite_closed_form_is_within_3_percent_of_the_dry_run",
                "tests/test_ssm.py::test_mamba2_scan_backward_peak_is_within_3_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/attention/recompute",
            category="transient",
            equation="checkpointing, Mamba-2: what mamba2_chunk_scan holds at (Y_diag + Y_off).contiguous() beyond the mixer's saved set as the recomputation runs it: B·T_p·I·(4·4 + m) (D_residual, Y_off, the sum, its copy, Y_diag) + B·h·p·n·m + 2·B·T_p·h·4; under autocast the FP32 locals behind the BF16 einsum casts B·T_p·(2·h·n + I)·4 + B·h·N·c²·4 and B·T·P·2; less the gated norm's and out_proj's saved set not yet made; under autocast with B·N > 1 the larger of that line and two einsum moments, each with its FP32 operand copy alive through the bmm (C_times_states: C's, B·h·T_p·n·4, before Y_off; Y_diag: M's and x's, before B_decay); plus the stream's gradient B·T·d, under autocast also its BF16 cast for the branch B·T·d·2 (a Gated DeltaNet layer: the stream's gradient alone, its peak being attention/deltanet/forward)",
            source="transformers/models/nemotron_h/modeling_nemotron_h.py: mamba2_chunk_scan (l. 273-377), NemotronHMamba2Mixer.torch_forward; torch/utils/checkpoint.py: unpack_hook (recompute at the first unpack) (introspect/refined/mamba2.py: recompute_extra)",
            computed_by=(
                "introspect/refined/mamba2.py: recompute_extra",
                "introspect/refined/execution.py: at_layer",
                "introspect/refined/execution.py: _mixer_recompute",
                "introspect/refined/execution.py: _parallel_mixer_recompute",
            ),
            tests=(
                "tests/test_falcon_h1.py::test_falcon_h1_mixer_scan_moments_against_the_dry_run",
                "tests/test_ssm.py::test_mamba2_recomputed_scan_peak_is_within_3_percent_of_the_dry_run",
                "tests/test_deltanet_rows.py::test_every_type_stacks_are_within_3_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/attention/mamba/forward",
            category="transient",
            equation="Mamba-2 without checkpointing, at the topmost Mamba-2 layer's scan peak ((Y_diag + Y_off).contiguous() in mamba2_chunk_scan, or an einsum's bmm under autocast): the same bytes beyond the mixer's saved set as attention/recompute's (recompute_extra), with no gradient beside them; the layers below saved, the feed-forward not made yet (Falcon-H1: the mixer runs before the attention, none of whose saved set is made yet)",
            source="transformers/models/mamba2/modeling_mamba2.py: mamba2_chunk_scan (l. 258-362), Mamba2Mixer.forward (l. 461-606) (introspect/refined/mamba2.py: recompute_extra)",
            computed_by=(
                "introspect/refined/mamba2.py: recompute_extra",
                "introspect/refined/execution.py: mixer_forward",
                "introspect/refined/execution.py: _mamba2_at_forward_peak",
                "introspect/refined/execution.py: _parallel_mixer_at_scan",
            ),
            tests=(
                "tests/test_mamba2_stack.py::test_mamba2_forward_peak_at_the_default_widths_is_within_3_percent_of_the_dry_run",
                "tests/test_falcon_h1.py::test_falcon_h1_mixer_scan_moments_against_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/attention/deltanet/forward",
            category="transient",
            equation="Gated DeltaNet, at its forward's peak (the topmost DeltaNet layer's forward, or under checkpointing its recomputation): the largest over the last chunk's state update (locals + B·n_v·d_k·d_v·(4 + m + 4)), its output line (+ 2·B·n_v·c·d_v·m), the output's reshape (+ B·n_v·T_p·d_v·4) and cast (+ B·T·V·a), the gated norm and out_proj; locals: the conv's SiLU output B·C·T·a, g B·T·n_v·4, the projections' outputs, the kernel's unsaved FP32 tensors (decay and its cumsum, v_beta, decayed k_beta, core_attn_out, the decayed query, under autocast the decayed key and intra_chunk_attn), v_new and inter_chunk_attn; less the saved set not yet made (the gated norm's, out_proj's input, autocast's later casts) and, after the scan, what it releases",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: torch_chunk_gated_delta_rule (l. 371-509), Qwen3NextGatedDeltaNet.forward (l. 660-770), Qwen3NextRMSNormGated.forward (l. 66-75); models/olmo_hybrid/modeling_olmo_hybrid.py: OlmoHybridGatedDeltaNet.forward (l. 637-749) (introspect/refined/deltanet.py: forward_moments)",
            computed_by=(
                "introspect/refined/deltanet.py: forward_extra",
                "introspect/refined/execution.py: mixer_forward",
                "introspect/refined/execution.py: _mixer_recompute",
            ),
            tests=(
                "tests/test_deltanet_rows.py::test_forward_peak_equals_a_live_storage_trace",
                "tests/test_deltanet_rows.py::test_every_type_stacks_are_within_3_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/attention/deltanet/backward",
            category="transient",
            equation="Gated DeltaNet, inside its kernel's first solve_triangular backward (run last of the kernel's nodes after it): 4·B·n_v·N·c²·4 (intra_chunk_attn's gradient, the other solve's ut_system gradient, this solve's bmm and neg) + B·n_v·T_p·((3 or, one chunk, 2)·d_k + 2·d_v + 1)·4 (gradients of query, key, v_beta, decayed k_beta, v_beta's mul, the decayed key's with N > 1, cum_decay's) + OLMo-Hybrid g_proj's input gradient B·T·d (FP32 under autocast) / Qwen3-Next and Qwen3.5 the gate's gradient B·T·V·a (BF16 under autocast); less what is freed by then (k_cumdecay B·n_v·T_p·d_k·4, the decays' exps 2·B·n_v·T_p·4 and chunk_decay B·n_v·N·4, the states, the gated norm, context, less released; autocast: the scan's casts, the padded query, out_proj's weight cast V·d·2, OLMo-Hybrid g_proj's casts B·T·d·2 + d·V·2; else the scan term and intra_chunk_attn B·n_v·N·c²·4, and with matmul_copies the padded query); plus the stream's gradient B·T·d",
            source="transformers/models/olmo_hybrid/modeling_olmo_hybrid.py: torch_chunk_gated_delta_rule (l. 360-500; Qwen3-Next's and Qwen3.5's the same); torch/csrc/autograd/FunctionsManual.cpp: linalg_solve_triangular_backward; torch/csrc/autograd/engine.cpp: ReadyQueue by sequence number (introspect/refined/deltanet.py: backward_transient)",
            computed_by=(
                "introspect/refined/deltanet.py: backward_transient",
                "introspect/refined/execution.py: at_layer",
                "introspect/refined/execution.py: _deltanet_backward",
            ),
            tests=(
                "tests/test_deltanet_rows.py::test_backward_moment_equals_a_live_storage_trace",
                "tests/test_hybrids.py::test_olmo_hybrid_closed_form_is_within_3_percent_of_the_dry_run",
                "tests/test_hybrids.py::test_qwen3_5_closed_form_is_within_3_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/attention/deltanet/released",
            category="activations",
            equation="minus, per finished Gated DeltaNet layer below the forward's peak, the saved tensors only the last chunk's dropped state update kept: autocast B·n_v·d_k·d_v·4 + B·n_v·c·(d_k + d_v)·2; else the decayed key B·n_v·c·d_k·4 with one chunk or with copied slices, 0 otherwise; under checkpointing the same for the recomputed layer (the recomputation stores a tensor only where the original holder is alive)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: torch_chunk_gated_delta_rule l. 500 and l. 503 (last_recurrent_state = None frees the node); torch/utils/checkpoint.py l. 1119-1126 (recomputation pack hook, weak_holders) (introspect/refined/deltanet.py: released)",
            computed_by=(
                "introspect/refined/deltanet.py: released",
                "introspect/refined/execution.py: mixer_forward",
                "introspect/refined/execution.py: _recomputed_released",
            ),
            tests=(
                "tests/test_deltanet_rows.py::test_released_equals_what_the_forward_frees",
                "tests/test_deltanet_rows.py::test_every_type_stacks_are_within_3_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/attention/linear",
            category="activations",
            equation="s·L·5·B·T·d: Q, K, V, probs·V and the output (the seed's attention_linear_values)",
            source="the seed, 'Memory to Train a Transformer' (introspect/simplified.py: attention_linear_values)",
            computed_by=("introspect/simplified.py: estimate",),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
            ),
        ),
        Term(
            name="activations/layer/attention/linear/autocast_weights",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); weights * BF16  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet (introspect/refined/deltanet.py)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/deltanet.py: saved",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",
            ),
        ),
        Term(
            name="activations/layer/attention/linear/context",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); rows * a  (saved); full['attention/linear/context']  (_kind_parts); BT * spec.q_dim * s  (per_layer)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): the context's transpose(1, 2).reshape copy, saved by o_proj",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/deltanet.py: saved",
                "introspect/refined/execution.py: _kind_parts",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/lora.py: per_layer",
                "introspect/refined/reference.py: _attention",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_lora.py::test_lora_step_peak",
                "tests/test_lora.py::test_peft_all_linear_on_other_blocks",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
            ),
        ),
        Term(
            name="activations/layer/attention/rotary_tables",
            category="activations",
            equation="2 * BT * rotary * table  (per_layer; table = FP32 where the tables are returned uncast, else the stream's dtype)",
            source="transformers/models/helium/modeling_helium.py, models/ernie4_5/modeling_ernie4_5.py, models/ernie4_5_moe/modeling_ernie4_5_moe.py: apply_rotary_pos_emb's cos[..., : half].repeat_interleave(2), a copy per layer kept by the multiplies (introspect/refined/transformers_classes.py: rotary_tables_per_layer)",
            computed_by=("introspect/refined/hf_saved.py: per_layer",),
            tests=(
                "tests/test_every_type_bf16.py::test_bf16_sdpa_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/attention/linear/context_copy",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); BT * spec.q_dim * s  (per_layer); BT * att.q_dim * s  (_attention)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): a head-major Q gives SDPA a head-major output; the reshape for o_proj copies it",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/reference.py: _attention",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/attention/linear/gate",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3-Next's gated attention, q_proj's gate half (introspect/refined/reference.py: _attention)",
            computed_by=("introspect/refined/architecture.py: _kind_terms",),
            tests=(
                "tests/test_refined_moe.py::test_qwen3_next_gated_attention_and_the_linear_layers",
            ),
        ),
        Term(
            name="activations/layer/attention/linear/gates",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); B * T * nv * a + 2 * B * T * nv * FP32 + 2 * nv * FP32  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet (introspect/refined/deltanet.py)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/deltanet.py: saved",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",
            ),
        ),
        Term(
            name="activations/layer/attention/linear/input_casts",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); casts * B * T * d * BF16, casts the linears reading the FP32 norm output: 2 (in_proj_qkvz, in_proj_ba), 6 (OLMo-Hybrid's q, k, v, a, b, g_proj), 4 (Qwen3.5's in_proj_qkv, _z, _b, _a)  (saved)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3NextGatedDeltaNet; models/olmo_hybrid/modeling_olmo_hybrid.py: OlmoHybridGatedDeltaNet; models/qwen3_5/modeling_qwen3_5.py: Qwen3_5GatedDeltaNet (introspect/refined/deltanet.py)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/deltanet.py: saved",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_deltanet.py::test_gated_deltanet_saved_set_equals_the_census",
                "tests/test_deltanet.py::test_qwen3_5_deltanet_saved_set_equals_the_census",
            ),
        ),
        Term(
            name="activations/layer/attention/linear/k",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); BT * kv * inner  (per_layer); BT * (att.k_dim if att.kind == 'mla' else kv) * s  (_attention)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): Q, K, V as the kernel keeps them; eager repeat_kv copies K and V to every query head, SDPA keeps num_key_value_heads under use_gqa_in_sdpa (integrations/sdpa_attention.py)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/reference.py: _attention",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/attention/linear/latent",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); FP32 step: BT * (3·(r_q + r_kv) + rope) * s + stats; 16-bit: BT * (r_q + r_kv) * (4 + 2·s) + stats, + BT * d * s under autocast  (mla_latent_bytes)",
            source="transformers/models/deepseek_v3/modeling_deepseek_v3.py: DeepseekV3Attention.forward l. 437-462, DeepseekV3RMSNorm l. 47-52 (introspect/refined/reference.py: mla_latent_bytes)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/reference.py: mla_latent_bytes",
            ),
            tests=(
                "tests/test_refined_moe.py::test_deepseek_experts_and_shared_experts_and_mla_latents",
                "tests/test_walked_mla.py::test_deepseek_v3_mla_at_longer_t_within_one_percent",
            ),
        ),
        Term(
            name="activations/layer/attention/linear/out",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); BT * d * stream_kept_bytes(setup, 2 if gated else 1)  (per_layer); BT * d * norm_input_bytes(spec, setup)  (per_layer); BT * spec.hidden_size * s  (_attention)",
            source="source not recorded",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/reference.py: _attention",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/attention/linear/output_gate",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); 3 * BT * att.q_dim * s  (_attention); 2 * BT * spec.q_dim * s  (per_layer: a separate gate_proj, ClassFacts.output_gate_proj)",
            source="transformers/models/qwen3_next/modeling_qwen3_next.py: Qwen3-Next's gated attention, q_proj's gate half (introspect/refined/reference.py: _attention); models/afmoe/modeling_afmoe.py, models/beam/modeling_beam.py: output * torch.sigmoid(gate_proj(x)) (introspect/refined/transformers_classes.py)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/reference.py: _attention",
                "introspect/refined/hf_saved.py: per_layer",
            ),
            tests=(
                "tests/test_refined_moe.py::test_qwen3_next_gated_attention_and_the_linear_layers",
                "tests/test_every_type_bf16.py::test_bf16_sdpa_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/attention/linear/q",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); BT * spec.q_dim * inner  (per_layer); BT * att.q_dim * s  (_attention)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): Q, K, V as the kernel keeps them; eager repeat_kv copies K and V to every query head, SDPA keeps num_key_value_heads under use_gqa_in_sdpa (integrations/sdpa_attention.py)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/reference.py: _attention",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/attention/linear/qkv_fused",
            category="activations",
            equation="B·T·(q_dim + kv_dim)·s per layer: the fused q/k/v output's q and k parts, kept "
            "alive by SDPA's saved V view while rotary made Q and K anew (hf_saved._fused_qkv_kept)",
            source="transformers/models/phi3/modeling_phi3.py: Phi3Attention.forward, "
            "qkv[..., q + kv:] as V; repeat_kv returns its input when K and V are not repeated",
            computed_by=("introspect/refined/hf_saved.py: _fused_qkv_kept",),
            tests=("tests/test_refined_transformers.py::test_phi3_fused_qkv_is_kept_by_sdpa",),
        ),
        Term(
            name="activations/layer/attention/linear/v",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); BT * kv * inner  (per_layer); BT * (att.v_dim if att.kind == 'mla' else kv) * s  (_attention)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): Q, K, V as the kernel keeps them; eager repeat_kv copies K and V to every query head, SDPA keeps num_key_value_heads under use_gqa_in_sdpa (integrations/sdpa_attention.py)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/reference.py: _attention",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/attention/logsumexp",
            category="activations",
            equation="B·h·T·4 per layer: SDPA's log-sum-exp per row, in place of the T×T tensors",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): SDPA on CPU, _scaled_dot_product_flash_attention_for_cpu, saves its output and a log-sum-exp per row",
            computed_by=(
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/reference.py: _attention",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_memory_efficient_attention_keeps_no_quadratic_tensor",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/layer/attention/mask",
            category="activations",
            equation="B * T * T * s  (_attention); setup.batch_size * setup.seq_len ** 2 * setup.activation_bytes  (per_layer)",
            source="transformers/integrations/sdpa_attention.py: convert_boolean_attn_mask, the additive window mask SDPA keeps (introspect/refined/reference.py: _attention)",
            computed_by=(
                "introspect/refined/reference.py: _attention",
                "introspect/refined/implementations.py: Transformers.per_layer",
            ),
            tests=("tests/test_refined_moe.py::test_sdpa_sliding_window_keeps_its_mask_per_layer",),
        ),
        Term(
            name="activations/layer/attention/quadratic",
            category="activations",
            equation="s·L·2·B·h·T²: the scores and the softmax, B·h·T² each, per layer (the seed's attention_quadratic_values)",
            source="the seed, 'Memory to Train a Transformer' (introspect/simplified.py: attention_quadratic_values: 2·B·h·T², scores + softmax)",
            computed_by=("introspect/simplified.py: estimate",),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
            ),
        ),
        Term(
            name="activations/layer/attention/quadratic/dropout_mask",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); t2 * mask  (per_layer)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): nn.functional.dropout on the probabilities; CPU: torch's _dropout_impl, empty_like(input).bernoulli_()",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/layer/attention/quadratic/dropped",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); t2 * inner  (per_layer)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): nn.functional.dropout on the probabilities; CPU: torch's _dropout_impl, empty_like(input).bernoulli_()",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/layer/attention/quadratic/probs",
            category="activations",
            equation="B·h·T·(T + sinks)·4 per layer: the FP32 softmax output, one T×T tensor per head (eager; also SDPA's math fallback)",
            source="transformers/models/llama/modeling_llama.py: eager_attention_forward — softmax(dtype=float32) saves its FP32 output (introspect/refined/hf_saved.py, reference.py _attention)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/reference.py: _attention",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_eager_attention_keeps_one_quadratic_tensor_per_layer",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/layer/attention/quadratic/sink_scores",
            category="activations",
            equation="B·h·T²·r per layer: the masked scores logsumexp saves (the mask at the residual dtype r promotes them: FP32 under autocast)",
            source="transformers/models/granite_swa/modeling_granite_swa.py: eager_attention_forward (l. 105-117): torch.logsumexp, (lse - sinks).to(torch.float32).sigmoid(), attn_output * sink_scale.unsqueeze(-1).to(attn_output.dtype) (introspect/refined/hf_saved.py: _lse_sink_terms)",
            computed_by=("introspect/refined/hf_saved.py: per_layer",),
            tests=("tests/test_every_type_gpt.py::test_granite_swa_lse_sink_scale",),
        ),
        Term(
            name="activations/layer/attention/sink_scale",
            category="activations",
            equation="B·h·T·(r + 4 + s if s < 4) per layer: logsumexp's output, the FP32 sigmoid's output, its cast to the activations' dtype",
            source="transformers/models/granite_swa/modeling_granite_swa.py: eager_attention_forward (l. 105-117): torch.logsumexp, (lse - sinks).to(torch.float32).sigmoid(), attn_output * sink_scale.unsqueeze(-1).to(attn_output.dtype) (introspect/refined/hf_saved.py: _lse_sink_terms)",
            computed_by=("introspect/refined/hf_saved.py: per_layer",),
            tests=("tests/test_every_type_gpt.py::test_granite_swa_lse_sink_scale",),
        ),
        Term(
            name="activations/layer/attention/linear/sink_context",
            category="activations",
            equation="B·T·q·s per layer: probabilities·V, saved by its product with the sink scale",
            source="transformers/models/granite_swa/modeling_granite_swa.py: eager_attention_forward (l. 105-117): torch.logsumexp, (lse - sinks).to(torch.float32).sigmoid(), attn_output * sink_scale.unsqueeze(-1).to(attn_output.dtype) (introspect/refined/hf_saved.py: _lse_sink_terms)",
            computed_by=("introspect/refined/hf_saved.py: per_layer",),
            tests=("tests/test_every_type_gpt.py::test_granite_swa_lse_sink_scale",),
        ),
        Term(
            name="activations/layer/attention/quadratic/probs_cast",
            category="activations",
            equation="B·h·T·(T + sinks)·s per layer when s < 4: the softmax cast back to the activation dtype",
            source="transformers/models/llama/modeling_llama.py: eager_attention_forward — .to(query.dtype), the 16-bit copy probs·V saves (introspect/refined/hf_saved.py)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/reference.py: _attention",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/attention/quadratic/scores",
            category="activations",
            equation="s·B·h·T·keys per layer: the scores QKᵀ, one per query head (keys = T, or the window / chunk, + a sink column)",
            source="the seed's (eq:attention_activations) T² part for real widths (introspect/refined/architecture.py: attention_quadratic_values)",
            computed_by=("introspect/refined/architecture.py: _kind_terms",),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
            ),
        ),
        Term(
            name="activations/layer/attention/quadratic/softcap",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); t2 * s  (per_layer); B * h * T * keys * s  (_attention)",
            source="transformers/models/gemma2/modeling_gemma2.py: attention soft-capping (introspect/refined/hf_saved.py, reference.py _attention)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/reference.py: _attention",
            ),
            tests=("tests/test_measure_hf.py::test_gemma2_soft_capping_is_counted",),
        ),
        Term(
            name="activations/layer/attention/quadratic/clamped",
            category="activations",
            equation="B·h·T²·s per layer (FP32 under autocast): the masked scores torch.max "
            "keeps for its backward (ClassFacts.scores_clamped)",
            source="transformers/models/xglm/modeling_xglm.py: XGLMAttention.forward l. 206-214, "
            "torch.max(attn_weights + attention_mask, torch.full((), finfo.min)) "
            "(introspect/refined/hf_saved.py: per_layer)",
            computed_by=("introspect/refined/hf_saved.py: per_layer",),
            tests=(
                "tests/test_every_type_long_misc.py::test_xglm_clamped_scores_and_plain_ffn_backward",
            ),
        ),
        Term(
            name="activations/layer/attention/quadratic/state",
            category="activations",
            equation="s·B·h_v·d_k·d_v per chunk of LINEAR_CHUNK tokens: linear attention's state in place of the T² term",
            source="the seed's bookkeeping for Gated DeltaNet (introspect/refined/architecture.py: attention_quadratic_values)",
            computed_by=("introspect/refined/architecture.py: _kind_terms",),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
            ),
        ),
        Term(
            name="activations/layer/attention/rope",
            category="activations",
            equation="4 * T * width * s  (_attention)",
            source="the reference model's rotary multiply (introspect/refined/reference.py module docstring: the cos/sin tables of each RoPE multiply)",
            computed_by=("introspect/refined/reference.py: _attention",),
            tests=(
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/autocast_weights",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture.estimate)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): torch.autocast: each nn.Linear casts its weight to BF16 once (the cast cache), the copy saved by the matmul",
            computed_by=("introspect/refined/architecture.py: estimate",),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
            ),
        ),
        Term(
            name="activations/layer/feed_forward",
            category="activations",
            equation="s·L·9·B·T·d: up (4d), act (4d), down (d) (the seed's ff_activations)",
            source="the seed, 'Memory to Train a Transformer' (introspect/simplified.py: ff_activations)",
            computed_by=(
                "introspect/simplified.py: estimate",
                "introspect/refined/architecture.py: estimate",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
            ),
        ),
        Term(
            name="activations/layer/feed_forward/act",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); BT * f * s  (per_layer); k * BT * f * s  (feed_forward); rows * f * s  (all_experts)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): the feed-forward's gate, up, act, product (gated) or up, act (plain); reference model: introspect/refined/saved_feed_forward.py",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/saved_feed_forward.py: feed_forward",
                "introspect/refined/saved_feed_forward.py: all_experts",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/feed_forward/act_intermediates",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); extra * BT * f * s  (per_layer)",
            source="transformers/activations.py: the activation's own ops (introspect/refined/hf_saved.py: ACTIVATION_EXTRA)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/layer/feed_forward/down",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); BT * d * layer_input_bytes(spec, setup)  (per_layer); setup.tokens * spec.hidden_size * residual_bytes(setup)  (checkpointed_layer); setup.tokens * spec.hidden_size * setup.activation_bytes  (checkpointed_layer)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): the feed-forward's gate, up, act, product (gated) or up, act (plain); reference model: introspect/refined/saved_feed_forward.py",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/hf_saved.py: checkpointed_layer",
                "introspect/refined/reference.py: checkpointed_layer",
                "introspect/refined/saved_feed_forward.py: feed_forward",
                "introspect/refined/saved_feed_forward.py: all_experts",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/feed_forward/dropout_mask",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); BT * d * dropout_mask_bytes(setup, s)  (per_layer)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): nn.functional.dropout in train mode, p > 0; CPU: torch's _dropout_impl (mask in the input's dtype), CUDA: native_dropout (one byte)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/layer/feed_forward/expert_down",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); k * BT * d * s  (feed_forward)",
            source="transformers/integrations/moe.py: grouped_mm experts (use_experts_implementation), the router's softmax/sigmoid (introspect/refined/saved_feed_forward.py: feed_forward, expert_bytes)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/saved_feed_forward.py: feed_forward",
            ),
            tests=("tests/test_refined_moe.py::test_moe_feed_forward_keeps_what_autograd_keeps",),
        ),
        Term(
            name="activations/layer/feed_forward/gate",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); BT * f * s  (per_layer); k * BT * f * s  (feed_forward); rows * f * s  (all_experts)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): the feed-forward's gate, up, act, product (gated) or up, act (plain); reference model: introspect/refined/saved_feed_forward.py",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/saved_feed_forward.py: feed_forward",
                "introspect/refined/saved_feed_forward.py: all_experts",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/feed_forward/glu",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); 3 * k * BT * f * s  (feed_forward)",
            source="transformers/integrations/moe.py: grouped_mm experts (use_experts_implementation), the router's softmax/sigmoid (introspect/refined/saved_feed_forward.py: feed_forward, expert_bytes)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/saved_feed_forward.py: feed_forward",
            ),
            tests=(
                "tests/test_refined_moe.py::test_moe_feed_forward_keeps_what_autograd_keeps",
                "tests/test_every_type_odd.py::test_minimax_m3_clamped_swiglu_everywhere",
            ),
        ),
        Term(
            name="activations/layer/feed_forward/grad",
            category="transient",
            equation="the gradients of the activation and of up (B·T·f each; + the product's, gated) and the residual stream's gradient B·T·d; MoE: routed_transient, the largest of the routed rows' three moments (S = k·B·T rows: the activation's backward, the up matmul's, or weighted_out[inv_perm]'s, three S·d)",
            source="transformers/integrations/moe.py: grouped_mm_experts_forward run in reverse (routed experts); dense: source not recorded (introspect/refined/execution.py: ffn_transient, routed_transient)",
            computed_by=("introspect/refined/execution.py: at_layer",),
            tests=(
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_hybrids.py::test_nemotron_h_with_experts_is_within_3_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/feed_forward/product",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); BT * f * s  (per_layer); k * BT * f * s  (feed_forward); rows * f * s  (all_experts)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): the feed-forward's gate, up, act, product (gated) or up, act (plain); reference model: introspect/refined/saved_feed_forward.py",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/saved_feed_forward.py: feed_forward",
                "introspect/refined/saved_feed_forward.py: all_experts",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/feed_forward/repeated_input",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); rows * d * norm_out  (all_experts)",
            source="transformers/models/llama4/modeling_llama4.py: Llama4TextMoe.forward, Llama4TextExperts, Llama4Router (introspect/refined/saved_feed_forward.py: all_experts)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/saved_feed_forward.py: all_experts",
            ),
            tests=("tests/test_measure_hf.py::test_llama4_runs_every_expert_on_every_token",),
        ),
        Term(
            name="activations/layer/feed_forward/routed_input",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); k * BT * d * s  (feed_forward); rows * d * s  (all_experts)",
            source="transformers/integrations/moe.py: grouped_mm experts (use_experts_implementation), the router's softmax/sigmoid (introspect/refined/saved_feed_forward.py: feed_forward, expert_bytes)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/saved_feed_forward.py: feed_forward",
                "introspect/refined/saved_feed_forward.py: all_experts",
            ),
            tests=("tests/test_refined_moe.py::test_moe_feed_forward_keeps_what_autograd_keeps",),
        ),
        Term(
            name="activations/layer/feed_forward/router",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); BT * scored * FP32 + router_copies  (feed_forward; router_copies: BT * d * FP32 for DeepSeek's FP32 router input under a 16-bit stream without autocast); BT * E * FP32  (all_experts)",
            source="transformers/integrations/moe.py: grouped_mm experts (use_experts_implementation), the router's softmax/sigmoid; models/deepseek_v2/modeling_deepseek_v2.py: DeepseekV2TopkRouter.forward (hidden_states.type(torch.float32)) (introspect/refined/saved_feed_forward.py: feed_forward, expert_bytes, router_copies)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/saved_feed_forward.py: feed_forward",
                "introspect/refined/saved_feed_forward.py: router_copies",
                "introspect/refined/saved_feed_forward.py: all_experts",
            ),
            tests=(
                "tests/test_refined_moe.py::test_moe_feed_forward_keeps_what_autograd_keeps",
                "tests/test_mla_families.py::test_deepseek_router_keeps_an_fp32_copy_of_its_bf16_input",
                "tests/test_every_type_bf16.py::test_bf16_sdpa_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/feed_forward/router_groups",
            category="activations",
            equation="BT * groups * 2 * 8 + BT * topk_groups * 8 + BT * E + BT * r + BT * k * r  (_fp32_group_router)",
            source="transformers/models/nemotron_h/modeling_nemotron_h.py: NemotronHTopkRouter.forward, NemotronHMoE.forward (introspect/refined/saved_feed_forward.py: _fp32_group_router)",
            computed_by=("introspect/refined/saved_feed_forward.py: _fp32_group_router",),
            tests=("tests/test_hybrids.py::test_nemotron_h_moe_block_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/feed_forward/router_input",
            category="activations",
            equation="amp: BT * d * 2; 16-bit: (BT * d + E * d) * FP32  (_fp32_group_router)",
            source="transformers/models/nemotron_h/modeling_nemotron_h.py: NemotronHTopkRouter.forward, NemotronHMoE.forward (introspect/refined/saved_feed_forward.py: _fp32_group_router)",
            computed_by=("introspect/refined/saved_feed_forward.py: _fp32_group_router",),
            tests=("tests/test_hybrids.py::test_nemotron_h_moe_block_saved_set_equals_the_census",),
        ),
        Term(
            name="activations/layer/feed_forward/routing",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); k * BT * s  (feed_forward); BT * E * s + BT * ff.top_k * 8  (all_experts)",
            source="transformers/integrations/moe.py: grouped_mm experts (use_experts_implementation), the router's softmax/sigmoid (introspect/refined/saved_feed_forward.py: feed_forward, expert_bytes)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/saved_feed_forward.py: feed_forward",
                "introspect/refined/saved_feed_forward.py: all_experts",
            ),
            tests=("tests/test_refined_moe.py::test_moe_feed_forward_keeps_what_autograd_keeps",),
        ),
        Term(
            name="activations/layer/feed_forward/routing_index",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); k * BT * 3 * 8 + BT * k * 8 + ff.num_experts * 4  (feed_forward)",
            source="transformers/integrations/moe.py: grouped_mm experts (use_experts_implementation), the router's softmax/sigmoid (introspect/refined/saved_feed_forward.py: feed_forward, expert_bytes)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/saved_feed_forward.py: feed_forward",
            ),
            tests=("tests/test_refined_moe.py::test_moe_feed_forward_keeps_what_autograd_keeps",),
        ),
        Term(
            name="activations/layer/feed_forward/shared",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); += setup.tokens * fs * setup.activation_bytes  (_after_down_projection); 4 * BT * ff.shared_intermediate_size * s  (all_experts); shared  (feed_forward)",
            source="transformers/integrations/moe.py: grouped_mm experts (use_experts_implementation), the router's softmax/sigmoid (introspect/refined/saved_feed_forward.py: feed_forward, expert_bytes)",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/execution.py: _after_down_projection",
                "introspect/refined/saved_feed_forward.py: all_experts",
                "introspect/refined/saved_feed_forward.py: feed_forward",
            ),
            tests=(
                "tests/test_refined_moe.py::test_moe_feed_forward_keeps_what_autograd_keeps",
                "tests/test_measure_hf.py::test_qwen2_moe_shared_experts_and_mixed_stacks",
            ),
        ),
        Term(
            name="activations/layer/feed_forward/up",
            category="activations",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture._kind_terms); BT * f * s  (per_layer); k * BT * f * s  (feed_forward); rows * f * s  (all_experts)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): the feed-forward's gate, up, act, product (gated) or up, act (plain); reference model: introspect/refined/saved_feed_forward.py",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/saved_feed_forward.py: feed_forward",
                "introspect/refined/saved_feed_forward.py: all_experts",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/grad",
            category="transient",
            equation="s · (the term's values in one layer of a kind) · (layers of that kind), the seed's bookkeeping  (architecture.estimate); BT * d * s  (at_layer)",
            source="source not recorded",
            computed_by=(
                "introspect/refined/architecture.py: estimate",
                "introspect/refined/execution.py: at_layer",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/layer/layernorm",
            category="activations",
            equation="s·L·2·B·T·d: two norm outputs per layer (the seed's layernorm_activations)",
            source="the seed, 'Memory to Train a Transformer' (introspect/simplified.py: layernorm_activations)",
            computed_by=(
                "introspect/simplified.py: estimate",
                "introspect/refined/architecture.py: estimate",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
            ),
        ),
        Term(
            name="activations/layer/layernorm/sub_norms",
            category="activations",
            equation="BT * q * FP32 (when s < FP32) + 2 * BT * FP32 + BT * (q + f) * s  (sub_norms)",
            source="transformers/models/bitnet/modeling_bitnet.py: BitNetRMSNorm, attn_sub_norm before o_proj and ffn_sub_norm before down_proj: the FP32 copy of the attention output, the two rstds, the outputs o_proj and down_proj keep (introspect/refined/hf_saved.py: sub_norms)",
            computed_by=("introspect/refined/hf_saved.py: sub_norms",),
            tests=(
                "tests/test_every_type_bf16.py::test_bf16_sdpa_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/layernorm/sub_norms/normalized",
            category="activations",
            equation="BT * (q + f) * r  (sub_norms)",
            source="transformers/models/bitnet/modeling_bitnet.py: BitNetRMSNorm's x·rstd cast back to the input dtype, saved by the weight multiply (introspect/refined/hf_saved.py: sub_norms)",
            computed_by=("introspect/refined/hf_saved.py: sub_norms",),
            tests=(
                "tests/test_every_type_bf16.py::test_bf16_sdpa_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/attention/sink_lse_grad",
            category="transient",
            equation="4·B·h·T²·r + attention_stream  (lse_sink_transient; Granite-SWA eager attention, inside logsumexp's backward)",
            source="transformers/models/granite_swa/modeling_granite_swa.py: eager_attention_forward (l. 105-117), models/granitemoe_swa/modeling_granitemoe_swa.py (l. 189-197): logsumexp and the sigmoid made before the softmax, so their backward runs after it; the softmax's gradient of the scores waits beside logsumexp_backward's grad * (self - result).exp() (torch/csrc/autograd/FunctionsManual.cpp) (introspect/refined/execution.py: _at_lse_sink_backward)",
            computed_by=(
                "introspect/refined/execution.py: lse_sink_transient",
                "introspect/refined/execution.py: _layer_moments",
            ),
            tests=("tests/test_every_type_gpt.py::test_lse_sink_backward_peak_at_long_t",),
        ),
        Term(
            name="activations/layer/attention/probs_v_grad",
            category="transient",
            equation="B·T·q_dim·s + B·h·T²·s + attention_stream  (probs_v_transient; eager attention, inside probs·V's backward)",
            source="transformers eager_attention_forward (e.g. models/gemma4/modeling_gemma4.py): torch.matmul(attn_weights, value_states)'s backward holds o_proj's input gradient and makes the probabilities' and V's gradients, before the softmax's backward frees V and the 16-bit probabilities (introspect/refined/execution.py: _at_probs_v_backward)",
            computed_by=(
                "introspect/refined/execution.py: probs_v_transient",
                "introspect/refined/execution.py: _layer_moments",
            ),
            tests=(
                "tests/test_gemma4_rows.py::test_gemma4_wide_global_heads_fp32_against_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/attention/softmax_forward",
            category="transient",
            equation="B·h·T²·(s + 2·4 + 2·p) with p = dropped_bytes (the cast only where p < 4: then s + 2·4 + p + p); checkpointing, ClassFacts.returns_attention_probs (checkpointed_softmax_forward)",
            source="transformers/models/falcon/modeling_falcon.py l. 349-362, 623, 789-800 and models/bloom/modeling_bloom.py l. 271-311, 403, 528-537: the raw scores bound through the softmax, the FP32 masked scores and softmax, and the previous block's returned probabilities held by the model loop's `outputs` (introspect/refined/execution.py: checkpointed_softmax_forward)",
            computed_by=("introspect/refined/execution.py: checkpointed_softmax_forward",),
            tests=(
                "tests/test_attention_dropout_rows.py::test_the_checkpointed_forward_at_the_softmax_against_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/attention/forward_inflight",
            category="transient",
            equation="n·B·h·T·keys·4, n = ClassFacts.attention_forward_inflight (keys = T, T + 1 with sinks); the top layer's forward inside its eager attention, no checkpointing (attention_forward)",
            source="transformers/models/gpt_neox_japanese/modeling_gpt_neox_japanese.py l. 234-268 (torch.zeros for baddbmm and the masked scores bound through probs·V) and models/flint/modeling_flint.py l. 221-228 (the masked scores and their cat with the sinks alive at the softmax) (introspect/refined/execution.py: attention_forward)",
            computed_by=("introspect/refined/execution.py: attention_forward",),
            tests=("tests/test_every_type_long_misc.py::test_top_layer_attention_forward_moment",),
        ),
        Term(
            name="activations/layer/attention/quadratic/returned",
            category="activations",
            equation="B·h·T²·4 under autocast with attention dropout where the dropout ran in FP32 (returned_probs); checkpointing: in the recomputed layer's feed-forward moment",
            source="transformers eager_attention_forward returns attn_weights (the dropout's output), bound by the decoder layer as `hidden_states, _ = self.self_attn(...)` until it returns (models/seed_oss/modeling_seed_oss.py l. 149-154, 254); probs·V's matmul saves only its 16-bit cast (introspect/refined/execution.py: returned_probs)",
            computed_by=(
                "introspect/refined/execution.py: returned_probs",
                "introspect/refined/execution.py: _layer_moments",
            ),
            tests=(
                "tests/test_attention_dropout_rows.py::test_the_returned_probabilities_against_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/attention/dropout_grad",
            category="transient",
            equation="2·B·h·T²·dropped_bytes + attention_stream  (dropout_transient; eager attention with attention dropout, inside the dropout's backward, the mask still held)",
            source="transformers eager_attention_forward (models/emu3/modeling_emu3.py l. 147-150, models/biogpt/modeling_biogpt.py l. 112-115): nn.functional.dropout on the probabilities; its backward (grad * noise) holds the dropped probabilities' gradient and makes the probabilities', the mask alive until it returns (introspect/refined/execution.py: _at_dropout_backward)",
            computed_by=(
                "introspect/refined/execution.py: dropout_transient",
                "introspect/refined/execution.py: _layer_moments",
            ),
            tests=(
                "tests/test_attention_dropout_rows.py::test_the_dropout_backward_moment_against_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/attention/kv_store",
            category="activations",
            equation="forward and backward's start: sum over store layers of kv_store_outputs = BT * kv_dim * (max(s, table) + s); at layer i's backward: kv_store_graph (norm input + 2 stats + FP32 x·rstd, k/v projection inputs and BF16 weights, k_norm's and v_norm's FP32 copies and stats, K and V) for each store layer above i, kv_store_outputs for the others  (kv_store; with checkpointing)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 1230-1231 (models/gemma4_unified/modeling_gemma4_unified.py l. 412-413): the topmost layer of each type puts K and V into shared_kv_states (configuration_gemma4.py l. 226-251: 'store' with num_kv_shared_layers 0), a dict every checkpointed layer's call keeps; torch/utils/checkpoint.py l. 1132-1133: the recomputation's pack hook returns each tensor, so the recomputed graph under the stored K and V keeps its saved tensors to the end of backward",
            computed_by=(
                "introspect/refined/hf_saved.py: kv_store_outputs",
                "introspect/refined/hf_saved.py: kv_store_graph",
                "introspect/refined/execution.py: kv_store",
            ),
            tests=(
                "tests/test_gemma4_rows.py::test_gemma4_checkpointed_at_longer_sequences_against_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/layernorm/v_norm",
            category="activations",
            equation="BT * spec.kv_dim * FP32 + _rms_stats(spec) * v_rows * FP32  (per_layer; v_rows = BT * kv_heads)",
            source="transformers/models/gemma4_unified/modeling_gemma4_unified.py l. 156-173, 355, 406: v_norm = Gemma4UnifiedRMSNorm(head_dim, with_scale=False): the FP32 copy of v_proj's output (saved by pow and x * rstd), mean_squared and the rstd per head row; its cast-back output is attention's V (introspect/refined/transformers_classes.py: v_norm)",
            computed_by=("introspect/refined/hf_saved.py: per_layer",),
            tests=(
                "tests/test_gemma4_rows.py::test_gemma4_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/layernorm/weight_casts",
            category="activations",
            equation="(spec.norms_per_layer * d + 2 * head_dim) * FP32  (norm_weight_casts; with 16-bit weights)",
            source="transformers/models/gemma4_unified/modeling_gemma4_unified.py l. 156-173: normed_output * self.weight.float() in each scaled RMSNorm (the block's four, q_norm, k_norm), the FP32 copy of a 16-bit weight saved by the multiply (introspect/refined/transformers_classes.py: rstd_by_pow)",
            computed_by=("introspect/refined/hf_saved.py: per_layer",),
            tests=(
                "tests/test_gemma4_rows.py::test_gemma4_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/layernorm/branch_outputs",
            category="activations",
            equation="2 * (BT * d * FP32 + BT * FP32)  (per_layer)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): LlamaRMSNorm (models/llama/modeling_llama.py), GemmaRMSNorm (models/gemma/modeling_gemma.py), nn.LayerNorm: input/FP32 copy, rstd (mean), x·rstd",
            computed_by=("introspect/refined/hf_saved.py: per_layer",),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/layer/layernorm/branch_outputs/normalized",
            category="activations",
            equation="2 * BT * d * FP32  (per_layer)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): LlamaRMSNorm (models/llama/modeling_llama.py), GemmaRMSNorm (models/gemma/modeling_gemma.py), nn.LayerNorm: input/FP32 copy, rstd (mean), x·rstd",
            computed_by=("introspect/refined/hf_saved.py: per_layer",),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/layer/layernorm/centered",
            category="activations",
            equation="2 * BT * d * FP32  (_norm_terms)",
            source="transformers 5: Cohere2LayerNorm (models/cohere2/modeling_cohere2.py): ``(hidden_states - mean)`` written twice, each saved (by ``pow`` and by the rstd multiply), in FP32: the block norm",
            computed_by=("introspect/refined/hf_saved.py: _norm_terms",),
            tests=("tests/test_refined_transformers.py::test_cohere2_dry_run_is_within_1_percent",),
        ),
        Term(
            name="activations/layer/layernorm/input",
            category="activations",
            equation="2 * BT * d * FP32  (_post_norm_terms); setup.tokens * spec.hidden_size * kept  (recomputed_extra)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): LlamaRMSNorm (models/llama/modeling_llama.py), GemmaRMSNorm (models/gemma/modeling_gemma.py), nn.LayerNorm: input/FP32 copy, rstd (mean), x·rstd",
            computed_by=(
                "introspect/refined/hf_saved.py: _post_norm_terms",
                "introspect/refined/hf_saved.py: recomputed_extra",
            ),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/layer/layernorm/normalized",
            category="activations",
            equation="BT * d * normalized  (_norm_terms); 2 * BT * d * FP32  (_post_norm_terms); n * norm_extra(spec, BT, d, s)  (per_layer)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): LlamaRMSNorm (models/llama/modeling_llama.py), GemmaRMSNorm (models/gemma/modeling_gemma.py), nn.LayerNorm: input/FP32 copy, rstd (mean), x·rstd",
            computed_by=(
                "introspect/refined/hf_saved.py: _norm_terms",
                "introspect/refined/hf_saved.py: _post_norm_terms",
                "introspect/refined/reference.py: per_layer",
            ),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/layernorm/qk_norm",
            category="activations",
            equation="qk_norm_output_values(spec, BT, kind)  (_kind_terms); BT * widths * FP32 + BT * (h + spec.kv_heads) * FP32  (per_layer); BT * widths * kept + 2 * rows * FP32  (per_layer); BT * widths * FP32 + rows * FP32  (per_layer)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): LlamaRMSNorm (models/llama/modeling_llama.py), GemmaRMSNorm (models/gemma/modeling_gemma.py), nn.LayerNorm: input/FP32 copy, rstd (mean), x·rstd",
            computed_by=(
                "introspect/refined/architecture.py: _kind_terms",
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/reference.py: per_layer",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/layernorm/qk_norm/normalized",
            category="activations",
            equation="BT * widths * normalized  (per_layer); BT * widths * s  (per_layer)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): LlamaRMSNorm (models/llama/modeling_llama.py), GemmaRMSNorm (models/gemma/modeling_gemma.py), nn.LayerNorm: input/FP32 copy, rstd (mean), x·rstd",
            computed_by=(
                "introspect/refined/hf_saved.py: per_layer",
                "introspect/refined/reference.py: per_layer",
            ),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/layernorm/statistics",
            category="activations",
            equation="(2 if spec.norm == 'layernorm' else _rms_stats(spec)) * BT * FP32  (_norm_terms; _rms_stats = 2 with torch.pow(mean_squared, -0.5), Gemma 4); 2 * BT * FP32  (_post_norm_terms); (2 if spec.norm == 'layernorm' else 1) * BT * FP32  (first_layer_saving); n * norm_statistics(spec, BT)  (per_layer)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): LlamaRMSNorm (models/llama/modeling_llama.py), GemmaRMSNorm (models/gemma/modeling_gemma.py), nn.LayerNorm: input/FP32 copy, rstd (mean), x·rstd",
            computed_by=(
                "introspect/refined/hf_saved.py: _norm_terms",
                "introspect/refined/hf_saved.py: _post_norm_terms",
                "introspect/refined/lora.py: first_layer_saving",
                "introspect/refined/reference.py: per_layer",
            ),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_lora.py::test_lora_step_peak",
                "tests/test_lora.py::test_peft_all_linear_on_other_blocks",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/layer/lora/experts/effective_weights",
            category="activations",
            equation="lora_moe.effective_weights(spec, setup, working_weight_bytes(setup))  (per_layer)",
            source="peft/tuners/lora/layer.py: Linear.forward — lora_A keeps its input (x.to(fp32) over a 16-bit base), lora_B keeps lora_A's output B·T·r (introspect/refined/lora.py)",
            computed_by=("introspect/refined/lora.py: per_layer",),
            tests=("tests/test_lora.py::test_peft_on_transformers_experts",),
        ),
        Term(
            name="activations/layer/lora/inputs",
            category="activations",
            equation="copies  (per_layer); len(first) * BT * spec.hidden_size * mask  (first_layer_saving)",
            source="peft/tuners/lora/layer.py: Linear.forward — lora_A keeps its input (x.to(fp32) over a 16-bit base), lora_B keeps lora_A's output B·T·r (introspect/refined/lora.py)",
            computed_by=(
                "introspect/refined/lora.py: per_layer",
                "introspect/refined/lora.py: first_layer_saving",
            ),
            tests=(
                "tests/test_lora.py::test_lora_step_peak",
                "tests/test_lora.py::test_peft_all_linear_on_other_blocks",
            ),
        ),
        Term(
            name="activations/layer/lora/{target}/a_output",
            category="activations",
            equation="B·T·r·a per adapted linear (target): lora_A's output, kept by lora_B",
            source="peft/tuners/lora/layer.py: Linear.forward — lora_A keeps its input (x.to(fp32) over a 16-bit base), lora_B keeps lora_A's output B·T·r (introspect/refined/lora.py)",
            computed_by=("introspect/refined/lora.py: per_layer",),
            tests=(
                "tests/test_lora.py::test_lora_step_peak",
                "tests/test_lora.py::test_peft_all_linear_on_other_blocks",
            ),
        ),
        Term(
            name="activations/logits",
            category="activations",
            equation="s·B·T·V (the seed's logits term)",
            source="the seed, 'Memory to Train a Transformer' (introspect/simplified.py: activations/logits: s·B·T·V)",
            computed_by=(
                "introspect/simplified.py: estimate",
                "introspect/refined/architecture.py: estimate",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
            ),
        ),
        Term(
            name="activations/logits/autocast_weight",
            category="activations",
            equation="2 * spec.vocab_size * spec.hidden_size  (final)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): torch.autocast: each nn.Linear casts its weight to BF16 once (the cast cache), the copy saved by the matmul",
            computed_by=("introspect/refined/hf_saved.py: final",),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/logits/grad",
            category="transient",
            equation="standard cross-entropy: 2·B·T·V·4, the FP32 gradients of the log-probabilities and of the logits alive together; fused: one chunk's logits, log-softmax and gradient; torchtune / trl / liger: introspect/refined/losses.py (backward_start, head)",
            source="source not recorded (introspect/refined/execution.py: logits_transient; measured: exactly 2·B·T·V·4 of 'temporary' at the start of backward)",
            computed_by=(
                "introspect/refined/execution.py: forward_end",
                "introspect/refined/execution.py: backward_moments",
                "introspect/refined/losses.py: backward_start",
                "introspect/refined/losses.py: head",
            ),
            tests=(
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
                "tests/test_losses.py::test_the_closed_form_holds_to_the_measured_step",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/logits/labels",
            category="activations",
            equation="BT * 8  (logits_saved)",
            source="transformers/loss/loss_utils.py: ForCausalLMLoss (logits.float(), F.cross_entropy) (introspect/refined/execution.py, hf_saved.py)",
            computed_by=("introspect/refined/hf_saved.py: logits_saved",),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/logits/log_softmax",
            category="activations",
            equation="BT * V * loss_bytes(setup)  (logits_saved); BTV * FP32  (logits_saved)",
            source="transformers/loss/loss_utils.py: ForCausalLMLoss (logits.float(), F.cross_entropy) (introspect/refined/execution.py, hf_saved.py)",
            computed_by=(
                "introspect/refined/hf_saved.py: logits_saved",
                "introspect/refined/reference.py: logits_saved",
            ),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/logits/logsumexp",
            category="activations",
            equation="BT * FP32  (logits_saved); setup.tokens * FP32  (logits_saved)",
            source="transformers/loss/loss_utils.py: ForCausalLMLoss (logits.float(), F.cross_entropy) (introspect/refined/execution.py, hf_saved.py)",
            computed_by=(
                "introspect/refined/hf_saved.py: logits_saved",
                "introspect/refined/reference.py: logits_saved",
            ),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_refined_execution.py::test_saved_activations_equal_the_torch_census",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="activations/logits/output",
            category="activations",
            equation="BTV * s  (loss_forward); saved_all['activations/logits/output']  (master_gradients); saved_all['activations/logits/output']  (backward_end); saved_all['activations/logits/output']  (optimizer_step)",
            source="transformers/loss/loss_utils.py: ForCausalLMLoss (logits.float(), F.cross_entropy) (introspect/refined/execution.py, hf_saved.py)",
            computed_by=(
                "introspect/refined/execution.py: loss_forward",
                "introspect/refined/execution.py: master_gradients",
                "introspect/refined/execution.py: backward_end",
                "introspect/refined/execution.py: optimizer_step",
            ),
            tests=(
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
            ),
        ),
        Term(
            name="activations/logits/softcap",
            category="activations",
            equation="BT * V * setup.activation_bytes  (logits_saved); BT * V * FP32 where the class caps an FP32 copy (ClassFacts.softcap_fp32)",
            source="transformers/models/gemma2/modeling_gemma2.py: final logit soft-capping; models/beam/modeling_beam.py: logits.float() / cap, tanh (introspect/refined/hf_saved.py)",
            computed_by=("introspect/refined/hf_saved.py: logits_saved",),
            tests=(
                "tests/test_measure_hf.py::test_gemma2_soft_capping_is_counted",
                "tests/test_every_type_bf16.py::test_bf16_sdpa_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/logits/upcast",
            category="transient",
            equation="BTV * FP32  (loss_forward)",
            source="transformers/loss/loss_utils.py: ForCausalLMLoss (logits.float(), F.cross_entropy) (introspect/refined/execution.py, hf_saved.py)",
            computed_by=("introspect/refined/execution.py: loss_forward",),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_measure_hf.py::test_peak_moments_under_autocast",
            ),
        ),
        Term(
            name="activations/logits/buffer",
            category="transient",
            equation="min(B·(T-1), 4096) · 32768 · the compute dtype's bytes (--cross-entropy trl)",
            source="trl/kernels/chunked_logprob.py: ChunkedLogProbFunction.forward mm_buf (introspect/refined/losses.py)",
            computed_by=("introspect/refined/losses.py: forward_transients",),
            tests=(
                "tests/test_losses.py::test_the_closed_form_holds_to_the_measured_step",
                "tests/test_losses.py::test_the_dry_run_equals_the_real_cpu_step",
            ),
        ),
        Term(
            name="activations/logits/chunk",
            category="transient",
            equation="Liger's chunk · V · the logits' bytes; chunk = min(B·T, next_power_of_2(ceil(B·T / ceil(V/d))))",
            source="liger_kernel/ops/fused_linear_cross_entropy.py: fused_linear_cross_entropy_forward (introspect/refined/losses.py)",
            computed_by=("introspect/refined/losses.py: forward_transients",),
            tests=(
                "tests/test_losses.py::test_the_closed_form_holds_to_the_measured_step",
                "tests/test_losses.py::test_the_dry_run_equals_the_real_cpu_step",
            ),
        ),
        Term(
            name="activations/logits/grad_input",
            category="activations",
            equation="B·T·d · the hidden states' bytes (--cross-entropy liger: saved for backward)",
            source="liger_kernel/ops/fused_linear_cross_entropy.py: grad_input made in the forward, ctx.save_for_backward (introspect/refined/losses.py)",
            computed_by=("introspect/refined/losses.py: saved",),
            tests=(
                "tests/test_losses.py::test_the_closed_form_holds_to_the_measured_step",
                "tests/test_losses.py::test_the_dry_run_equals_the_real_cpu_step",
            ),
        ),
        Term(
            name="activations/logits/grad_weight",
            category="activations",
            equation="V·d · w (--cross-entropy liger: the head weight's gradient, saved for backward)",
            source="liger_kernel/ops/fused_linear_cross_entropy.py: grad_weight made in the forward, ctx.save_for_backward (introspect/refined/losses.py)",
            computed_by=("introspect/refined/losses.py: saved",),
            tests=(
                "tests/test_losses.py::test_the_closed_form_holds_to_the_measured_step",
                "tests/test_losses.py::test_the_dry_run_equals_the_real_cpu_step",
            ),
        ),
        Term(
            name="activations/logits/grad_weight_chunk",
            category="transient",
            equation="V·d · the logits' bytes, plus V·d·4 for 16-bit logits (off CUDA or under autocast: torch.mm(grad.t(), x).float())",
            source="liger_kernel/ops/fused_linear_cross_entropy.py: the legacy grad_weight path (introspect/refined/losses.py)",
            computed_by=("introspect/refined/losses.py: forward_transients",),
            tests=(
                "tests/test_losses.py::test_the_closed_form_holds_to_the_measured_step",
                "tests/test_losses.py::test_the_dry_run_equals_the_real_cpu_step",
            ),
        ),
        Term(
            name="activations/logits/hidden_copy",
            category="activations",
            equation="B·(T-1)·d · s (--cross-entropy trl on CUDA: hidden_states[mask], saved)",
            source="trl/trainer/utils.py: add_fused_lm_head, compact path (introspect/refined/losses.py)",
            computed_by=("introspect/refined/losses.py: saved",),
            tests=(
                "tests/test_losses.py::test_the_closed_form_holds_to_the_measured_step",
                "tests/test_losses.py::test_the_dry_run_equals_the_real_cpu_step",
            ),
        ),
        Term(
            name="activations/logits/loss_1d",
            category="activations",
            equation="B·T · 4 (--cross-entropy liger: the per-token loss)",
            source="liger_kernel/ops/fused_linear_cross_entropy.py: loss_1d (introspect/refined/losses.py)",
            computed_by=("introspect/refined/losses.py: saved",),
            tests=(
                "tests/test_losses.py::test_the_closed_form_holds_to_the_measured_step",
                "tests/test_losses.py::test_the_dry_run_equals_the_real_cpu_step",
            ),
        ),
        Term(
            name="activations/logits/mask",
            category="activations",
            equation="B·(T-1) bytes (--cross-entropy trl: the label mask masked_fill saves)",
            source="trl/trainer/utils.py: add_fused_lm_head (introspect/refined/losses.py)",
            computed_by=("introspect/refined/losses.py: saved",),
            tests=(
                "tests/test_losses.py::test_the_closed_form_holds_to_the_measured_step",
                "tests/test_losses.py::test_the_dry_run_equals_the_real_cpu_step",
            ),
        ),
        Term(
            name="activations/logits/statistics",
            category="transient",
            equation="5 · B·(T-1) · 4 (--cross-entropy trl: the online log-sum-exp statistics not saved)",
            source="trl/kernels/chunked_logprob.py: ChunkedLogProbFunction.forward (introspect/refined/losses.py)",
            computed_by=("introspect/refined/losses.py: forward_transients",),
            tests=(
                "tests/test_losses.py::test_the_closed_form_holds_to_the_measured_step",
                "tests/test_losses.py::test_the_dry_run_equals_the_real_cpu_step",
            ),
        ),
        Term(
            name="activations/logits/tile_temporaries",
            category="transient",
            equation="12 · n · min(V, 32768) (--cross-entropy trl off CUDA: _forward_tile's FP32 z, z - max, exp)",
            source="trl/kernels/chunked_logprob.py: _forward_tile, the torch fallback (introspect/refined/losses.py)",
            computed_by=("introspect/refined/losses.py: forward_transients",),
            tests=(
                "tests/test_losses.py::test_the_closed_form_holds_to_the_measured_step",
                "tests/test_losses.py::test_the_dry_run_equals_the_real_cpu_step",
            ),
        ),
        Term(
            name="activations/mlx/attention",
            category="activations",
            equation="Σ over the graph's tensor kinds in this group: count at the moment × the kind's size (B·T·V, B·h·T², B·T·f, …) × bytes (introspect/refined/mlx_counts.py: COUNTS)",
            source="MLX v0.32's CPU evaluator (mlx/transforms.cpp, scheduler.h, cpu/encoder.h) as introspect/measure/mlx_replay_eval.py replays it; counts in introspect/refined/mlx_counts.py (introspect/refined/mlx.py)",
            computed_by=("introspect/refined/mlx.py: candidate_terms (GROUPS, group)",),
            tests=(
                "tests/test_refined_mlx.py::test_closed_form_within_5_percent_of_the_replay",
                "tests/test_refined_mlx_dense.py::test_closed_form_within_5_percent_of_a_measured_step",
            ),
        ),
        Term(
            name="activations/mlx/experts",
            category="activations",
            equation="Σ over the graph's tensor kinds in this group: count at the moment × the kind's size (B·T·V, B·h·T², B·T·f, …) × bytes (introspect/refined/mlx_counts.py: COUNTS)",
            source="MLX v0.32's CPU evaluator (mlx/transforms.cpp, scheduler.h, cpu/encoder.h) as introspect/measure/mlx_replay_eval.py replays it; counts in introspect/refined/mlx_counts.py (introspect/refined/mlx.py)",
            computed_by=("introspect/refined/mlx.py: candidate_terms (GROUPS, group)",),
            tests=(
                "tests/test_refined_mlx_moe.py::test_a_measured_and_a_replayed_qwen3_moe_step_are_within_5_percent",
            ),
        ),
        Term(
            name="activations/mlx/feed_forward",
            category="activations",
            equation="Σ over the graph's tensor kinds in this group: count at the moment × the kind's size (B·T·V, B·h·T², B·T·f, …) × bytes (introspect/refined/mlx_counts.py: COUNTS)",
            source="MLX v0.32's CPU evaluator (mlx/transforms.cpp, scheduler.h, cpu/encoder.h) as introspect/measure/mlx_replay_eval.py replays it; counts in introspect/refined/mlx_counts.py (introspect/refined/mlx.py)",
            computed_by=("introspect/refined/mlx.py: candidate_terms (GROUPS, group)",),
            tests=(
                "tests/test_refined_mlx.py::test_closed_form_within_5_percent_of_the_replay",
                "tests/test_refined_mlx_dense.py::test_closed_form_within_5_percent_of_a_measured_step",
            ),
        ),
        Term(
            name="activations/mlx/hidden",
            category="activations",
            equation="Σ over the graph's tensor kinds in this group: count at the moment × the kind's size (B·T·V, B·h·T², B·T·f, …) × bytes (introspect/refined/mlx_counts.py: COUNTS)",
            source="MLX v0.32's CPU evaluator (mlx/transforms.cpp, scheduler.h, cpu/encoder.h) as introspect/measure/mlx_replay_eval.py replays it; counts in introspect/refined/mlx_counts.py (introspect/refined/mlx.py)",
            computed_by=("introspect/refined/mlx.py: candidate_terms (GROUPS, group)",),
            tests=(
                "tests/test_refined_mlx.py::test_closed_form_within_5_percent_of_the_replay",
                "tests/test_refined_mlx_dense.py::test_closed_form_within_5_percent_of_a_measured_step",
            ),
        ),
        Term(
            name="activations/mlx/hidden/dora_unscaled",
            category="activations",
            equation="K · B·T · Σ d_out · s over the adapted linears  (dora_graph_terms)",
            source="mlx_lm/tuner/dora.py: DoRALinear (set_linear, __call__); mlx_lm/tuner/utils.py: linear_to_lora_layers(use_dora=True) (introspect/refined/mlx_dora.py)",
            computed_by=("introspect/refined/mlx_dora.py: dora_graph_terms",),
            tests=(
                "tests/test_mlx_dora.py::test_dora_step_within_5_percent_of_a_real_mlx_lm_step",
            ),
        ),
        Term(
            name="activations/mlx/hidden/lora_dropout_copies",
            category="activations",
            equation="K · B·T · 4 · (Σ d_in over the adapters − what the step kept without dropout: Σ d_in over the distinct inputs, or over the adapters for eager BF16)  (dropout_terms)",
            source="mlx/nn/layers/dropout.py: Dropout (bernoulli mask, (mask·x)·1/(1-p)); mlx_lm/tuner/lora.py: LoRALinear.__call__ (introspect/refined/mlx_dora.py)",
            computed_by=("introspect/refined/mlx_dora.py: dropout_terms",),
            tests=(
                "tests/test_mlx_dora.py::test_dropout_step_within_5_percent_of_a_real_mlx_lm_step",
            ),
        ),
        Term(
            name="activations/mlx/hidden/lora_dropout_mask",
            category="activations",
            equation="K · B·T · Σ d_in · s over the adapters (the mask cast to the activations' dtype by multiply)  (dropout_terms)",
            source="mlx/nn/layers/dropout.py: Dropout (bernoulli mask, (mask·x)·1/(1-p)); mlx_lm/tuner/lora.py: LoRALinear.__call__ (introspect/refined/mlx_dora.py)",
            computed_by=("introspect/refined/mlx_dora.py: dropout_terms",),
            tests=(
                "tests/test_mlx_dora.py::test_dropout_step_within_5_percent_of_a_real_mlx_lm_step",
            ),
        ),
        Term(
            name="activations/mlx/hidden/lora_upcasts",
            category="activations",
            equation="upcasts  (moments)",
            source="MLX v0.32's CPU evaluator (mlx/transforms.cpp, scheduler.h, cpu/encoder.h) as introspect/measure/mlx_replay_eval.py replays it; counts in introspect/refined/mlx_counts.py (introspect/refined/mlx.py)",
            computed_by=("introspect/refined/mlx.py: moments",),
            tests=(
                "tests/test_mlx_lora.py::test_bf16_eager_lora_step_keeps_the_fp32_upcasts_the_trace_merges",
            ),
        ),
        Term(
            name="activations/mlx/logits",
            category="activations",
            equation="Σ over the graph's tensor kinds in this group: count at the moment × the kind's size (B·T·V, B·h·T², B·T·f, …) × bytes (introspect/refined/mlx_counts.py: COUNTS)",
            source="MLX v0.32's CPU evaluator (mlx/transforms.cpp, scheduler.h, cpu/encoder.h) as introspect/measure/mlx_replay_eval.py replays it; counts in introspect/refined/mlx_counts.py (introspect/refined/mlx.py)",
            computed_by=("introspect/refined/mlx.py: candidate_terms (GROUPS, group)",),
            tests=(
                "tests/test_refined_mlx.py::test_closed_form_within_5_percent_of_the_replay",
                "tests/test_refined_mlx_dense.py::test_closed_form_within_5_percent_of_a_measured_step",
            ),
        ),
        Term(
            name="activations/mlx/router",
            category="activations",
            equation="Σ over the graph's tensor kinds in this group: count at the moment × the kind's size (B·T·V, B·h·T², B·T·f, …) × bytes (introspect/refined/mlx_counts.py: COUNTS)",
            source="MLX v0.32's CPU evaluator (mlx/transforms.cpp, scheduler.h, cpu/encoder.h) as introspect/measure/mlx_replay_eval.py replays it; counts in introspect/refined/mlx_counts.py (introspect/refined/mlx.py)",
            computed_by=("introspect/refined/mlx.py: candidate_terms (GROUPS, group)",),
            tests=(
                "tests/test_refined_mlx_moe.py::test_a_measured_and_a_replayed_qwen3_moe_step_are_within_5_percent",
            ),
        ),
        Term(
            name="activations/positions",
            category="activations",
            equation="2 * setup.seq_len * width * table  (embedding; width = _table_widths(spec): the rotary width (MLA: qk_rope_head_dim), or the sum of the layer types' head_dims)",
            source="transformers 5 (introspect/refined/hf_saved.py module docstring): the rotary cos/sin made once per forward by the model's rotary_emb, shared by every layer; Gemma 4 one pair per layer type (models/gemma4_unified/modeling_gemma4_unified.py l. 631; transformers_classes.py: rope_tables_per_layer_type)",
            computed_by=("introspect/refined/hf_saved.py: embedding",),
            tests=(
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_gemma4_rows.py::test_gemma4_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/per_layer_input/gate_input",
            category="activations",
            equation="BT * d * stream_kept_bytes(setup, 1)  (per_layer_input_terms)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 1408-1410: residual = hidden_states; per_layer_input_gate(hidden_states) keeps its input, the stream after the feed-forward's residual add (under autocast its BF16 cast)",
            computed_by=("introspect/refined/hf_saved.py: per_layer_input_terms",),
            tests=(
                "tests/test_gemma4_rows.py::test_the_per_layer_inputs_saved_set_is_byte_exact_against_the_census",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/per_layer_input/gate",
            category="activations",
            equation="BT * d_pl * s  (per_layer_input_terms)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 1410-1411: the gate's output, kept by act_fn (GELUTanh: F.gelu(approximate='tanh'), transformers/activations.py)",
            computed_by=("introspect/refined/hf_saved.py: per_layer_input_terms",),
            tests=(
                "tests/test_gemma4_rows.py::test_the_per_layer_inputs_saved_set_is_byte_exact_against_the_census",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/per_layer_input/act",
            category="activations",
            equation="BT * d_pl * s  (per_layer_input_terms)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 1411-1412: the activation's output, kept by the product with the layer's per-layer input",
            computed_by=("introspect/refined/hf_saved.py: per_layer_input_terms",),
            tests=(
                "tests/test_gemma4_rows.py::test_the_per_layer_inputs_saved_set_is_byte_exact_against_the_census",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/per_layer_input/product",
            category="activations",
            equation="BT * d_pl * s  (per_layer_input_terms)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 1412-1413: hidden_states * per_layer_input, kept by per_layer_projection (under autocast its BF16 cast of the FP32 product)",
            computed_by=("introspect/refined/hf_saved.py: per_layer_input_terms",),
            tests=(
                "tests/test_gemma4_rows.py::test_the_per_layer_inputs_saved_set_is_byte_exact_against_the_census",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/per_layer_input/norm",
            category="activations",
            equation="BT * d * FP32 + 2 * BT * FP32  (per_layer_input_terms)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 196-214, 1414: post_per_layer_input_norm (Gemma4RMSNorm): the FP32 copy of the projection's output, mean_squared and torch.pow(mean_squared, -0.5)",
            computed_by=("introspect/refined/hf_saved.py: per_layer_input_terms",),
            tests=(
                "tests/test_gemma4_rows.py::test_the_per_layer_inputs_saved_set_is_byte_exact_against_the_census",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/per_layer_input/norm/normalized",
            category="activations",
            equation="BT * d * FP32  (per_layer_input_terms)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 196-214: normed_output * self.weight.float(): the FP32 x·rstd",
            computed_by=("introspect/refined/hf_saved.py: per_layer_input_terms",),
            tests=(
                "tests/test_gemma4_rows.py::test_the_per_layer_inputs_saved_set_is_byte_exact_against_the_census",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/layer/per_layer_input/norm/weight_cast",
            category="activations",
            equation="d * FP32  (per_layer_input_terms; with 16-bit weights)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 212: self.weight.float(), the FP32 copy of post_per_layer_input_norm's 16-bit weight saved by the multiply",
            computed_by=("introspect/refined/hf_saved.py: per_layer_input_terms",),
            tests=(
                "tests/test_gemma4_rows.py::test_the_per_layer_inputs_saved_set_is_byte_exact_against_the_census",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/per_layer_inputs",
            category="activations",
            equation="BT * L * d_pl * residual_bytes(setup)  (per_layer_input_embedding)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 1626-1629, 1684, 1784: (per_layer_projection + per_layer_inputs) * per_layer_input_scale, kept by every layer's product through its slice per_layer_inputs[:, :, i, :] (a view)",
            computed_by=("introspect/refined/hf_saved.py: per_layer_input_embedding",),
            tests=(
                "tests/test_gemma4_rows.py::test_the_per_layer_inputs_saved_set_is_byte_exact_against_the_census",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/per_layer_inputs/scale",
            category="activations",
            equation="working_weight_bytes(setup)  (per_layer_input_embedding)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 1431-1432: super().forward(input_ids) * self.embed_scale.to(self.weight.dtype): the 0-dim scale kept by the multiply",
            computed_by=("introspect/refined/hf_saved.py: per_layer_input_embedding",),
            tests=(
                "tests/test_gemma4_rows.py::test_the_per_layer_inputs_saved_set_is_byte_exact_against_the_census",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/per_layer_inputs/norm",
            category="activations",
            equation="BT * L * d_pl * FP32 + 2 * BT * L * FP32  (per_layer_input_embedding)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 196-214, 1779: per_layer_projection_norm over B·T·L rows of width d_pl: its input's FP32 copy, mean_squared and the rstd",
            computed_by=("introspect/refined/hf_saved.py: per_layer_input_embedding",),
            tests=(
                "tests/test_gemma4_rows.py::test_the_per_layer_inputs_saved_set_is_byte_exact_against_the_census",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/per_layer_inputs/norm/normalized",
            category="activations",
            equation="BT * L * d_pl * FP32  (per_layer_input_embedding)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 196-214: the FP32 x·rstd of per_layer_projection_norm",
            computed_by=("introspect/refined/hf_saved.py: per_layer_input_embedding",),
            tests=(
                "tests/test_gemma4_rows.py::test_the_per_layer_inputs_saved_set_is_byte_exact_against_the_census",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/per_layer_inputs/norm/weight_cast",
            category="activations",
            equation="d_pl * FP32  (per_layer_input_embedding; with 16-bit weights)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 212: self.weight.float() of per_layer_projection_norm's 16-bit weight",
            computed_by=("introspect/refined/hf_saved.py: per_layer_input_embedding",),
            tests=(
                "tests/test_gemma4_rows.py::test_the_per_layer_inputs_saved_set_is_byte_exact_against_the_census",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/per_layer_inputs/projection_input",
            category="activations",
            equation="BT * d * s  (per_layer_input_embedding; BF16 without checkpointing, or autocast)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 1772: per_layer_model_projection(inputs_embeds) keeps its input: the 16-bit embedding output (the first norm keeps an FP32 copy) or autocast's BF16 cast",
            computed_by=("introspect/refined/hf_saved.py: per_layer_input_embedding",),
            tests=(
                "tests/test_gemma4_rows.py::test_the_per_layer_inputs_saved_set_is_byte_exact_against_the_census",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/per_layer_inputs/autocast_weight",
            category="activations",
            equation="2 * d * L * d_pl  (per_layer_input_embedding; autocast)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 1574-1578, 1772: autocast's BF16 copy of per_layer_model_projection's weight, saved by the matmul",
            computed_by=("introspect/refined/hf_saved.py: per_layer_input_embedding",),
            tests=(
                "tests/test_gemma4_rows.py::test_the_per_layer_inputs_saved_set_is_byte_exact_against_the_census",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/per_layer_inputs/grad",
            category="activations",
            equation="BT * L * d_pl * residual_bytes(setup)  (per_layer_input_grad; at every layer's backward but the top layer's)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 1684: per_layer_inputs[:, :, i, :]; select_backward puts each layer's slice gradient into a zero B·T·L·d_pl tensor, summed in the engine's input buffer (torch/csrc/autograd/input_buffer.cpp) until layer 0's backward",
            computed_by=(
                "introspect/refined/hf_saved.py: per_layer_input_grad",
                "introspect/refined/execution.py: _layer_moments",
            ),
            tests=(
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_closed_form_within_three_percent_of_the_dry_run",
            ),
        ),
        Term(
            name="activations/per_layer_inputs/grad/slice",
            category="activations",
            equation="BT * d_pl * residual_bytes(setup)  (per_layer_input_grad; at each layer's backward)",
            source="transformers/models/gemma4/modeling_gemma4.py l. 1408-1415, 1684: the product's backward makes the layer's slice gradient first in the layer; its select_backward (made before the layer's call: a lower sequence number, torch/csrc/autograd/engine.cpp runs the highest first) runs after the whole layer",
            computed_by=(
                "introspect/refined/hf_saved.py: per_layer_input_grad",
                "introspect/refined/execution.py: _layer_moments",
            ),
            tests=(
                "tests/test_gemma4_rows.py::test_gemma4_checkpointed_at_longer_sequences_against_the_dry_run",
                "tests/test_gemma4_rows.py::test_gemma4_per_layer_inputs_at_a_longer_sequence_against_the_dry_run",
            ),
        ),
        Term(
            name="comm/all_gather",
            category="communication",
            equation="working * min(DS_PREFETCH_BUCKET, spec.n_params)  (moment_terms)",
            source="DeepSpeed runtime/zero/config.py: reduce_bucket_size=5e8, stage3_prefetch_bucket_size=5e7 (introspect/refined/sharding.py; not measured)",
            computed_by=("introspect/refined/sharding.py: moment_terms",),
            tests=(),
            unchecked="DeepSpeed ZeRO-3's prefetch bucket: 'not measured' (introspect/refined/sharding.py)",
        ),
        Term(
            name="comm/ddp_buckets",
            category="communication",
            equation="N·(gradient bytes): the reducer's flat buckets, alive the whole step (none beside the gradients under gradient_as_bucket_view)",
            source="torch/nn/parallel/distributed.py, torch/csrc/distributed/c10d/reducer.cpp: the reducer's flat gradient buckets, bucket_cap_mb=25 (introspect/refined/sharding.py)",
            computed_by=("introspect/refined/sharding.py: state_terms",),
            tests=(
                "tests/test_sharding.py::test_real_two_process_steps_match_the_per_rank_estimate",
                "tests/test_sharding.py::test_transformers_classes_in_two_processes_match_the_estimate",
            ),
        ),
        Term(
            name="comm/fsdp_all_gather",
            category="communication",
            equation="param_b·D·shard(block): one block's all-gather output (every parameter's dim 0 padded to a multiple of D), alive during its copy-out in backward, at the gathered weights' bytes (BF16 under MixedPrecisionPolicy(param_dtype=bf16))",
            source="torch/distributed/fsdp/_fully_shard/ (_fsdp_param.py: dim-0 shards padded to a multiple of D; _fsdp_state.py; foreach_reduce's reduce-scatter) (introspect/refined/sharding.py module docstring)",
            computed_by=(
                "introspect/refined/sharding.py: moment_terms",
                "introspect/refined/sharding.py: post_backward",
            ),
            tests=(
                "tests/test_sharding.py::test_real_two_process_steps_match_the_per_rank_estimate",
                "tests/test_sharding.py::test_transformers_classes_in_two_processes_match_the_estimate",
            ),
        ),
        Term(
            name="comm/gloo_copy",
            category="communication",
            equation="reduce_b * D * shard if setup.resolved_device == 'cpu' else 0  (post_backward)",
            source="torch/distributed/fsdp/_fully_shard/ (_fsdp_param.py: dim-0 shards padded to a multiple of D; _fsdp_state.py; foreach_reduce's reduce-scatter) (introspect/refined/sharding.py module docstring)",
            computed_by=("introspect/refined/sharding.py: post_backward",),
            tests=(
                "tests/test_sharding.py::test_real_two_process_steps_match_the_per_rank_estimate",
                "tests/test_sharding.py::test_transformers_classes_in_two_processes_match_the_estimate",
            ),
        ),
        Term(
            name="comm/reduce_bucket",
            category="communication",
            equation="ZeRO-2 (and ZeRO-3 under LoRA or an offload): buckets * working * min(DS_REDUCE_BUCKET, spec.n_params) in backward (moment_terms); ZeRO-3 full training: working * DS_REDUCE_BUCKET, one IPG buffer held at every moment (deepspeed.stage3_state)",
            source="DeepSpeed runtime/zero/config.py: reduce_bucket_size=5e8, stage3_prefetch_bucket_size=5e7; stage3.py _setup_for_real_optimizer: torch.empty(self.reduce_bucket_size, dtype=dtype) per IPG bucket (introspect/refined/sharding.py, introspect/refined/deepspeed.py; not measured)",
            computed_by=(
                "introspect/refined/sharding.py: moment_terms",
                "introspect/refined/deepspeed.py: stage3_state",
            ),
            tests=(),
            unchecked="DeepSpeed ZeRO-2/3's reduce bucket: 'not measured here' (introspect/refined/sharding.py)",
        ),
        Term(
            name="comm/reduce_scatter",
            category="communication",
            equation="the previous block's reduce-scatter input, kept until the next reduce-scatter (reduce_scatter_max_input_buffers=1), FP32 under reduce_dtype=fp32",
            source="torch/distributed/fsdp/_fully_shard/ (_fsdp_param.py: dim-0 shards padded to a multiple of D; _fsdp_state.py; foreach_reduce's reduce-scatter) (introspect/refined/sharding.py module docstring)",
            computed_by=(
                "introspect/refined/sharding.py: post_backward",
                "introspect/refined/sharding.py: backward_end",
                "introspect/refined/sharding.py: moment_terms",
            ),
            tests=(
                "tests/test_sharding.py::test_real_two_process_steps_match_the_per_rank_estimate",
                "tests/test_sharding.py::test_transformers_classes_in_two_processes_match_the_estimate",
            ),
        ),
        Term(
            name="grads",
            category="grads",
            equation="w·N: one gradient per weight (the seed); refined: the gradients alive at the moment",
            source="the seed, 'Memory to Train a Transformer' (introspect/simplified.py: estimate: w·N gradients)",
            computed_by=(
                "introspect/simplified.py: estimate",
                "introspect/refined/architecture.py: state_terms",
                "introspect/refined/execution.py: master_gradients",
                "introspect/refined/execution.py: forward_end",
                "introspect/refined/execution.py: loss_forward",
                "introspect/refined/execution.py: backward_moments",
                "introspect/refined/execution.py: backward_end",
                "introspect/refined/execution.py: optimizer_step",
                "introspect/refined/execution.py: at_layer",
                "introspect/refined/sharding.py: backward_end",
                "introspect/refined/sharding.py: post_backward",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_sharding.py::test_real_two_process_steps_match_the_per_rank_estimate",
                "tests/test_sharding.py::test_transformers_classes_in_two_processes_match_the_estimate",
            ),
        ),
        Term(
            name="grads/embedding_sum",
            category="grads",
            equation="tied: 2·V·d at the gradients' dtype beyond the N gradients — lm_head's and the embedding's V·d gradients and their out-of-place sum alive at once; from the second micro-batch of --grad-accum, 3·V·d (the sum is added into the existing .grad, not stolen)",
            source="torch/csrc/autograd/input_buffer.cpp: the AccumulateGrad input buffer sums a weight's two gradients out of place; torch/csrc/autograd/functions/accumulate_grad.h: accumulateGrad adds into a defined .grad in place (introspect/refined/execution.py: backward_end; introspect/refined/accumulation.py)",
            computed_by=(
                "introspect/refined/execution.py: backward_end",
                "introspect/refined/accumulation.py: later_micro_batch",
            ),
            tests=(
                "tests/test_refined_transformers.py::test_optimizer_step_and_tied_embedding_sum",
                "tests/test_accumulation.py::test_grad_accum_real_step_equals_dry_run_and_closed_form",
            ),
        ),
        Term(
            name="grads/accumulating",
            category="grads",
            equation="(V·d + V if lm_head has a bias)·wb at lm_head's backward (tied: through every layer's backward, waiting in the input buffer); untied: V·d·wb at the embedding's backward; only from the second micro-batch of --grad-accum, with a trained head",
            source="torch/csrc/autograd/functions/accumulate_grad.h: accumulateGrad (variable_grad += new_grad once .grad is defined); torch/csrc/autograd/input_buffer.cpp; transformers/trainer.py: training_step (introspect/refined/accumulation.py)",
            computed_by=("introspect/refined/accumulation.py: later_micro_batch",),
            tests=(
                "tests/test_accumulation.py::test_grad_accum_real_step_equals_dry_run_and_closed_form",
                "tests/test_accumulation.py::test_lora_accumulates_the_adapters_gradients",
            ),
        ),
        Term(
            name="activations/offload/unpacked_weight",
            category="activations",
            equation="V·d·wb (under autocast lm_head's saved BF16 copy, V·d·2) at lm_head's backward with --offload-activations",
            source="torch/autograd/graph.py: save_on_cpu packs every saved tensor, a matmul's t() view of its weight too, and unpacks a device copy when the node runs (introspect/refined/activation_offload.py: at_head)",
            computed_by=("introspect/refined/activation_offload.py: at_head",),
            tests=("tests/test_accumulation.py::test_offloaded_activations_real_equals_dry_run",),
        ),
        Term(
            name="activations/layer/attention/forward",
            category="activations",
            equation="attention_transient(spec, setup) beside one layer's saved set, with --offload-activations (layer_forward): an approximation of the forward's working set",
            source="torch/autograd/graph.py: save_on_cpu (the saved set leaves the device as it is saved; a layer's forward working set stays) (introspect/refined/activation_offload.py: layer_forward)",
            computed_by=("introspect/refined/activation_offload.py: layer_forward",),
            tests=("tests/test_accumulation.py::test_offloaded_activations_real_equals_dry_run",),
        ),
        Term(
            name="activations/logits/previous_micro_batch",
            category="activations",
            equation="B·T·V·s in the logits loop's loss forward (transformers' classes), from the second micro-batch of --grad-accum",
            source="a plain Python loop: `loss, logits = ...` rebinds the previous micro-batch's logits only when the new loss returns (introspect/measure/torch_step.py: TorchStep; introspect/refined/accumulation.py)",
            computed_by=("introspect/refined/accumulation.py: later_micro_batch",),
            tests=(
                "tests/test_accumulation.py::test_grad_accum_real_step_equals_dry_run_and_closed_form",
            ),
        ),
        Term(
            name="grads/last_bf16",
            category="grads",
            equation="working_weight_bytes(setup) * last  (master_gradients)",
            source="torch mixed precision: the BF16 gradient freed once its FP32 master gradient exists (introspect/refined/execution.py: master_grads)",
            computed_by=("introspect/refined/execution.py: master_gradients",),
            tests=(
                "tests/test_measure_hf.py::test_mixed_update_estimate_counts_the_fp32_master_gradients",
            ),
        ),
        Term(
            name="grads/mlx/accumulated",
            category="grads",
            equation="trainable parameters × their bytes (4 for mlx-lm's adapters and DoRA's magnitudes; s under full fine-tuning), from --grad-accum 2 on  (accumulation_terms)",
            source="mlx_lm/tuner/trainer.py: train's step (tree_map add of prev_grad, ÷ grad_accumulation_steps, optimizer.update on the M-th) (introspect/refined/mlx_dora.py)",
            computed_by=("introspect/refined/mlx_dora.py: accumulation_terms",),
            tests=("tests/test_mlx_dora.py::test_accumulating_trainer_within_5_percent",),
        ),
        Term(
            name="grads/mlx/dora_magnitude",
            category="grads",
            equation="4 · K · Σ d_out  (dora_graph_terms)",
            source="mlx_lm/tuner/dora.py: DoRALinear (set_linear, __call__); mlx_lm/tuner/utils.py: linear_to_lora_layers(use_dora=True) (introspect/refined/mlx_dora.py)",
            computed_by=("introspect/refined/mlx_dora.py: dora_graph_terms",),
            tests=("tests/test_mlx_dora.py::test_dora_state_is_the_modules_magnitudes",),
        ),
        Term(
            name="grads/mlx/weight_sized",
            category="grads",
            equation="Σ over the graph's tensor kinds in this group: count at the moment × the kind's size (B·T·V, B·h·T², B·T·f, …) × bytes (introspect/refined/mlx_counts.py: COUNTS)",
            source="MLX v0.32's CPU evaluator: weight-sized gradients, Adam temporaries and new weights/moments (introspect/refined/mlx.py)",
            computed_by=("introspect/refined/mlx.py: candidate_terms (GROUPS, group)",),
            tests=(
                "tests/test_refined_mlx.py::test_closed_form_within_5_percent_of_the_replay",
                "tests/test_refined_mlx_dense.py::test_closed_form_within_5_percent_of_a_measured_step",
            ),
        ),
        Term(
            name="optimizer/adam_m",
            category="optimizer",
            equation="4·N (FP32; 2·N under pure BF16; 1·N for 8-bit Adam), ÷D when sharded; under the HF Trainer's 8-bit bitsandbytes AdamW per tensor: n (uint8, n ≥ 4096) or 4n (FP32 below), embeddings apart (optimizer/bnb_embedding_state)",
            source="the seed, 'Memory to Train a Transformer' (introspect/simplified.py: estimate: FP32·N each); torch/optim/adam.py state (introspect/refined/execution.py: optimizer_state)",
            computed_by=(
                "introspect/simplified.py: estimate",
                "introspect/refined/architecture.py: state_terms",
                "introspect/refined/execution.py: optimizer_state",
                "introspect/refined/lora.py: optimizer_state",
                "introspect/refined/mlx.py: state_terms",
                "introspect/refined/mlx.py: lora_state_terms",
                "introspect/refined/trainers.py: bnb_state",
            ),
            tests=(
                "tests/test_trainer_terms.py::test_bnb_state_after_real_trainer_steps_is_the_closed_form_to_the_byte",
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_lora.py::test_lora_step_peak",
                "tests/test_lora.py::test_peft_all_linear_on_other_blocks",
                "tests/test_refined_mlx.py::test_closed_form_within_5_percent_of_the_replay",
                "tests/test_refined_mlx_dense.py::test_closed_form_within_5_percent_of_a_measured_step",
            ),
        ),
        Term(
            name="optimizer/adam_v",
            category="optimizer",
            equation="4·N (FP32; 2·N under pure BF16; 1·N for 8-bit Adam), ÷D when sharded; under the HF Trainer's 8-bit bitsandbytes AdamW per tensor: n (uint8, n ≥ 4096) or 4n (FP32 below), embeddings apart (optimizer/bnb_embedding_state)",
            source="the seed, 'Memory to Train a Transformer' (introspect/simplified.py: estimate: FP32·N each); torch/optim/adam.py state (introspect/refined/execution.py: optimizer_state)",
            computed_by=(
                "introspect/simplified.py: estimate",
                "introspect/refined/architecture.py: state_terms",
                "introspect/refined/execution.py: optimizer_state",
                "introspect/refined/lora.py: optimizer_state",
                "introspect/refined/mlx.py: state_terms",
                "introspect/refined/mlx.py: lora_state_terms",
                "introspect/refined/trainers.py: bnb_state",
            ),
            tests=(
                "tests/test_trainer_terms.py::test_bnb_state_after_real_trainer_steps_is_the_closed_form_to_the_byte",
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
                "tests/test_refined_transformers.py::test_refined_is_within_3_percent_of_the_real_step",
                "tests/test_lora.py::test_lora_step_peak",
                "tests/test_lora.py::test_peft_all_linear_on_other_blocks",
                "tests/test_refined_mlx.py::test_closed_form_within_5_percent_of_the_replay",
                "tests/test_refined_mlx_dense.py::test_closed_form_within_5_percent_of_a_measured_step",
            ),
        ),
        Term(
            name="optimizer/master_weights",
            category="optimizer",
            equation="4·N: the FP32 master copy when the working weights are 16-bit",
            source="the seed, 'Memory to Train a Transformer' (introspect/simplified.py: estimate: FP32·N when w < 4)",
            computed_by=(
                "introspect/simplified.py: estimate",
                "introspect/refined/architecture.py: state_terms",
                "introspect/refined/sharding.py: state_terms",
            ),
            tests=(
                "tests/test_measure_hf.py::test_mixed_keeps_an_fp32_master_copy",
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
            ),
        ),
        Term(
            name="optimizer/momentum",
            category="optimizer",
            equation="per·N: one SGD momentum buffer at the state's dtype (4 bytes FP32; 2 under pure BF16), ÷D when sharded",
            source="source not recorded (introspect/refined/execution.py: optimizer_state, 'SGD with momentum one buffer'; setup.OPTIMIZER_STATE_BYTES)",
            computed_by=(
                "introspect/refined/execution.py: optimizer_state",
                "introspect/refined/lora.py: optimizer_state",
            ),
            tests=(
                "tests/test_optimizer_state.py::test_measured_peak_is_byte_identical_to_the_warm_up_form",
            ),
        ),
        Term(
            name="optimizer/temporaries",
            category="optimizer",
            equation="optimizer_temporaries(spec, setup, local)  (optimizer_step); with the optimizer in backward, one tensor's own step: 2·n (single-tensor Adam) or n (foreach) at the state's dtype, for lm_head's and the embedding's V·d  (in_backward_step_temporaries)",
            source="torch/optim/adam.py: single-tensor, foreach and fused update temporaries (introspect/refined/execution.py: optimizer_temporaries; introspect/refined/offload.py: in_backward_step_temporaries)",
            computed_by=(
                "introspect/refined/execution.py: optimizer_step",
                "introspect/refined/execution.py: _in_backward_steps",
                "introspect/refined/trainers.py: optimizer_temporaries",
            ),
            tests=(
                "tests/test_refined_execution.py::test_peak_matches_a_measured_torch_step",
                "tests/test_trainer_terms.py::test_trainer_peak_is_the_closed_form",
                "tests/test_optimizer_state.py::test_measure_step_peak_matches_the_warm_up_form",
                "tests/test_accumulation.py::test_optimizer_in_backward_real_equals_dry_run_and_closed_form",
            ),
        ),
        Term(
            name="grads/deepspeed_flat_partition",
            category="grads",
            equation="w · ceil(N/D): the flat copy of this rank's gradients DeepSpeed ZeRO-2's step makes (beside the gradients themselves); ZeRO-3: w · min(sub_group_size, ceil(N/D)), one sub-group's",
            source="deepspeed/runtime/zero/stage_1_and_2.py: DeepSpeedZeroOptimizer.step, flatten_dense_tensors_aligned(averaged_gradients[i], partition_size); stage3.py: _prepare_fp32_grad_for_sub_group, self.flatten(averaged_gradients[i]).to(fp32) (introspect/refined/deepspeed.py: grad_partition_moment, stage3_step_moments)",
            computed_by=(
                "introspect/refined/deepspeed.py: grad_partition_moment",
                "introspect/refined/deepspeed.py: stage3_step_moments",
            ),
            unchecked="DeepSpeed is not a dependency and its ZeRO kernels need an accelerator: from the source (tests/test_deepspeed_one_device.py checks the closed form's mechanism)",
        ),
        Term(
            name="grads/deepspeed_fp32_partition",
            category="grads",
            equation="4 · ceil(N/D) under 16-bit weights (0 under FP32: .to() returns the flat copy): single_grad_partition = flat_grad_partition.to(fp32)",
            source="deepspeed/runtime/zero/stage_1_and_2.py: DeepSpeedZeroOptimizer.step; stage3.py: _prepare_fp32_grad_for_sub_group (introspect/refined/deepspeed.py: grad_partition_moment, stage3_step_moments)",
            computed_by=(
                "introspect/refined/deepspeed.py: grad_partition_moment",
                "introspect/refined/deepspeed.py: stage3_step_moments",
            ),
            unchecked="DeepSpeed is not a dependency and its ZeRO kernels need an accelerator: from the source (tests/test_deepspeed_one_device.py checks the closed form's mechanism)",
        ),
        Term(
            name="activations/lora/lm_head/input",
            category="activations",
            equation="B·T·d·(adapter_input_bytes or s): lora_A's input over the final norm's output (its own FP32 cast or dropped copy, else the output itself)",
            source="peft/tuners/lora/layer.py: Linear.forward (x = self._cast_input_dtype(x, lora_A.weight.dtype); lora_B(lora_A(dropout(x)))) on lm_head (introspect/refined/lora.py: final_terms)",
            computed_by=("introspect/refined/lora.py: final_terms",),
            tests=("tests/test_lora_heads.py::test_lora_on_head_and_embedding_step_peak",),
        ),
        Term(
            name="activations/lora/lm_head/a_output",
            category="activations",
            equation="B·T·r·a: lm_head's lora_A output, kept by lora_B",
            source="peft/tuners/lora/layer.py: Linear.forward on lm_head (introspect/refined/lora.py: final_terms)",
            computed_by=("introspect/refined/lora.py: final_terms",),
            tests=("tests/test_lora_heads.py::test_lora_on_head_and_embedding_step_peak",),
        ),
        Term(
            name="activations/lora/embed_tokens/a_output",
            category="activations",
            equation="B·T·r·a: after_A = F.embedding(x, lora_embedding_A.T), kept by its matmul with lora_embedding_B.T",
            source="peft/tuners/lora/layer.py: Embedding.forward (introspect/refined/lora.py: embedding_terms)",
            computed_by=("introspect/refined/lora.py: embedding_terms",),
            tests=("tests/test_lora_heads.py::test_lora_on_head_and_embedding_step_peak",),
        ),
        Term(
            name="optimizer/adafactor_factored",
            category="optimizer",
            equation="4 · Σ over ≥2-D trainable tensors (..., R, C) of prod(s[:-1]) + prod(s[:-2])·C: FP32 exp_avg_sq_row and exp_avg_sq_col",
            source="transformers/optimization.py: Adafactor.step state initialisation (factored = len(shape) >= 2; state follows grad.float()); transformers/trainer_optimizer.py: _get_adafactor (introspect/refined/optimizers.py: adafactor_state)",
            computed_by=("introspect/refined/optimizers.py: state_terms",),
            tests=(
                "tests/test_optimizers.py::test_adafactor_state_is_what_a_real_step_makes",
                "tests/test_optimizers.py::test_adafactor_real_and_dry_run_steps_are_byte_identical_and_match_the_closed_form",
            ),
        ),
        Term(
            name="optimizer/adafactor_second_moment",
            category="optimizer",
            equation="4 · Σ over 1-D trainable tensors of n: FP32 exp_avg_sq (no first moment: beta1=None)",
            source="transformers/optimization.py: Adafactor.step (introspect/refined/optimizers.py: adafactor_state)",
            computed_by=("introspect/refined/optimizers.py: state_terms",),
            tests=(
                "tests/test_optimizers.py::test_adafactor_state_is_what_a_real_step_makes",
                "tests/test_optimizers.py::test_adafactor_real_and_dry_run_steps_are_byte_identical_and_match_the_closed_form",
            ),
        ),
        Term(
            name="optimizer/adafactor_rms",
            category="optimizer",
            equation="4 · (trainable tensors): the 0-d FP32 state['RMS'] = _rms(p) of each",
            source="transformers/optimization.py: Adafactor.step, state['RMS'] = self._rms(p_data_fp32) (introspect/refined/optimizers.py: adafactor_state)",
            computed_by=("introspect/refined/optimizers.py: state_terms",),
            tests=("tests/test_optimizers.py::test_adafactor_state_is_what_a_real_step_makes",),
        ),
        Term(
            name="optimizer/paged_state",
            category="optimizer",
            equation="Σ over trainable tensors of ≥ 1e5 values of 2n (PagedAdamW8bit; 8n under 4096 values) or 8n (PagedAdamW32bit): m and v in CUDA unified memory, outside torch's allocator",
            source="bitsandbytes/optim/optimizer.py: get_state_buffer (paged from 1e5 values), Optimizer2State.init_state (min_8bit_size 4096); bitsandbytes/functional.py: get_paged (cudaMallocManaged) (introspect/refined/optimizers.py: paged_state)",
            computed_by=("introspect/refined/optimizers.py: state_terms",),
            tests=(
                "tests/test_optimizers.py::test_paged_state_split_follows_bitsandbytes_thresholds",
            ),
        ),
        Term(
            name="optimizer/bnb_embedding_state",
            category="optimizer",
            equation="8 · Σ over trainable nn.Embedding weights of n (a tied embedding once; GPT-2's wpe too): two FP32 moments under the HF Trainer's 8-bit bitsandbytes AdamW, where the loop's Adam8bit keeps 2 bytes a value",
            source="transformers/trainer.py:1328-1340 create_optimizer (GlobalOptimManager.register_module_override(module, 'weight', {'optim_bits': 32}) for every nn.Embedding when optim_bits == 8); transformers/trainer_optimizer.py:256-257; bitsandbytes/optim/optimizer.py: check_overrides, Optimizer2State.init_state (introspect/refined/trainers.py: bnb_state)",
            computed_by=("introspect/refined/trainers.py: bnb_state",),
            tests=(
                "tests/test_trainer_terms.py::test_bnb_state_after_real_trainer_steps_is_the_closed_form_to_the_byte",
                "tests/test_trainer_terms.py::test_trainer_peak_is_the_closed_form",
            ),
        ),
        Term(
            name="optimizer/bnb_block_scales",
            category="optimizer",
            equation="Σ over 8-bit tensors (n ≥ 4096) of 2 · 4 · ⌈n/256⌉ (FP32 absmax1, absmax2) + 2 · 256 · 4 once (the shared qmap1/qmap2)",
            source="bitsandbytes/optim/optimizer.py: Optimizer2State.init_state (blocksize 256, name2qmap['dynamic'|'udynamic']) (introspect/refined/trainers.py: bnb_state)",
            computed_by=("introspect/refined/trainers.py: bnb_state",),
            tests=(
                "tests/test_trainer_terms.py::test_bnb_state_after_real_trainer_steps_is_the_closed_form_to_the_byte",
            ),
        ),
        Term(
            name="activations/trainer/batch",
            category="activations",
            equation="8 · 3 · B·T · M: input_ids, attention_mask and labels (int64) of each of the M = gradient_accumulation_steps micro-batches, bound through the whole step",
            source="transformers/trainer.py:1881 _inner_training_loop (batch_samples, num_items_in_batch = self.get_batch_samples(...), kept through training_step and optimizer.step); get_batch_samples:2289 (introspect/refined/trainers.py: batch_bytes)",
            computed_by=(
                "introspect/refined/trainers.py: extra_terms",
                "introspect/refined/execution.py: framework_extra",
            ),
            tests=("tests/test_trainer_terms.py::test_trainer_peak_is_the_closed_form",),
        ),
        Term(
            name="weights/buffers",
            category="weights",
            equation="buffer_bytes + float_buffer_elements·w: the built class's nn.Buffers (each storage once), resident through the step: boolean/integer ones at their bytes, floating ones at the working weights' dtype w (from_config's local_torch_dtype); GPT-Neo's per-layer max_positions² bool causal mask, GPT-BigCode's one, OpenAI GPT's per-layer n_positions² mask",
            source="transformers/models/gpt_neo/modeling_gpt_neo.py: GPTNeoSelfAttention.__init__ (l. 59-70); transformers/models/gpt_bigcode/modeling_gpt_bigcode.py: GPTBigCodeModel.__init__ (l. 381); transformers/models/openai/modeling_openai.py: Attention.__init__ (l. 53), OpenAIGPTModel.__init__ (l. 306); transformers/modeling_utils.py: _from_config (introspect/refined/buffers.py)",
            computed_by=("introspect/refined/buffers.py: buffer_terms",),
            tests=("tests/test_every_type_gpt.py::test_causal_mask_buffers",),
        ),
        Term(
            name="weights",
            category="weights",
            equation="w·N: working weights (w = 4 in FP32, 2 in BF16; ÷D at ZeRO-3/FSDP)",
            source="the seed, 'Memory to Train a Transformer' (introspect/simplified.py: eq:weights; weights, working_weight_bytes)",
            computed_by=(
                "introspect/simplified.py: estimate",
                "introspect/refined/architecture.py: state_terms",
                "introspect/refined/architecture.py: estimate",
                "introspect/refined/mlx.py: state_terms",
                "introspect/refined/mlx.py: lora_state_terms",
                "introspect/refined/sharding.py: state_terms",
            ),
            tests=(
                "tests/test_measure_torch.py::test_census_covers_the_seed_terms_and_logits_are_exact",
                "tests/test_refined_mlx.py::test_closed_form_within_5_percent_of_the_replay",
                "tests/test_refined_mlx_dense.py::test_closed_form_within_5_percent_of_a_measured_step",
                "tests/test_sharding.py::test_real_two_process_steps_match_the_per_rank_estimate",
                "tests/test_sharding.py::test_transformers_classes_in_two_processes_match_the_estimate",
            ),
        ),
        Term(
            name="weights/base_linears",
            category="weights",
            equation="quantized_bytes(spec, quant, setup.double_quant, setup)  (state_terms)",
            source="peft/tuners/lora/layer.py: Linear.forward; bitsandbytes/functional.py: quantize_4bit (NF4, absmax per 64-weight block) (introspect/refined/lora.py)",
            computed_by=(
                "introspect/refined/lora.py: state_terms",
                "introspect/refined/lora_sharded.py: state",
            ),
            tests=(
                "tests/test_lora.py::test_lora_step_peak",
                "tests/test_lora.py::test_peft_all_linear_on_other_blocks",
                "tests/test_lora.py::test_qlora_saves_what_nf4_saves",
                "tests/test_lora_sharded.py::test_lora_weights_per_rank_are_fsdp2_shards_of_every_parameter",
            ),
        ),
        Term(
            name="weights/base_other",
            category="weights",
            equation="rest * wb  (state_terms)",
            source="peft/tuners/lora/layer.py: Linear.forward; bitsandbytes/functional.py: quantize_4bit (NF4, absmax per 64-weight block) (introspect/refined/lora.py)",
            computed_by=(
                "introspect/refined/lora.py: state_terms",
                "introspect/refined/lora_sharded.py: state",
            ),
            tests=(
                "tests/test_lora.py::test_lora_step_peak",
                "tests/test_lora.py::test_peft_all_linear_on_other_blocks",
                "tests/test_lora_sharded.py::test_lora_weights_per_rank_are_fsdp2_shards_of_every_parameter",
            ),
        ),
        Term(
            name="activations/layer/attention/packed_mask",
            category="activations",
            equation="B·T²·s a layer: packed sequences' block-diagonal mask, made additive at the query's dtype by torch's SDPA and saved by its kernel",
            source="transformers/masking_utils.py: find_packed_sequence_indices, sdpa_mask; aten/src/ATen/native/transformers/attention.cpp: convert_boolean_attn_mask (introspect/refined/hf_saved.py)",
            computed_by=("introspect/refined/hf_saved.py: packed_mask",),
            tests=("tests/test_trl_trainers.py::test_packed_sequences_under_sdpa_keep_their_mask",),
        ),
        Term(
            name="weights/dora_magnitude",
            category="weights",
            equation="4 · K · Σ d_out (m, FP32); Adam's m and v the same, in optimizer/adam_m and adam_v  (dora_state_terms)",
            source="mlx_lm/tuner/dora.py: DoRALinear (set_linear, __call__); mlx_lm/tuner/utils.py: linear_to_lora_layers(use_dora=True) (introspect/refined/mlx_dora.py)",
            computed_by=("introspect/refined/mlx_dora.py: dora_state_terms",),
            tests=("tests/test_mlx_dora.py::test_dora_state_is_the_modules_magnitudes",),
        ),
        Term(
            name="weights/reference",
            category="weights",
            equation="P·w: DPO's frozen reference copy at the policy's loaded dtype (full fine-tuning, reference not precomputed)",
            source="trl/trainer/dpo_trainer.py: __init__ (ref_model loaded with the policy's dtype, :916-927), _compute_loss (no_grad reference forward, :1327-1338) (introspect/refined/dpo.py)",
            computed_by=("introspect/refined/dpo.py: reference_state",),
            tests=("tests/test_trl_trainers.py::test_dpo_trainer_step_matches_the_closed_form",),
        ),
        Term(
            name="weights/gathered",
            category="weights",
            equation="FSDP2/ZeRO-3: the root unit kept gathered plus gathered blocks (one unit and one prefetched; every block when reshard_after_forward=False); offload=parameters: two units of working weights",
            source="torch FSDP2 / DeepSpeed ZeRO-3: one gathered unit plus one prefetched (introspect/refined/sharding.py); ZeRO-Infinity offload_param, FSDP CPUOffload (introspect/refined/offload.py)",
            computed_by=(
                "introspect/refined/offload.py: state",
                "introspect/refined/sharding.py: moment_terms",
                "introspect/refined/sharding.py: post_backward",
                "introspect/refined/sharding.py: backward_end",
                "introspect/refined/sharding.py: state_terms",
            ),
            tests=(
                "tests/test_sharding.py::test_real_two_process_steps_match_the_per_rank_estimate",
                "tests/test_sharding.py::test_transformers_classes_in_two_processes_match_the_estimate",
            ),
        ),
        Term(
            name="weights/lora_adapters",
            category="weights",
            equation="adapters * adapter_bytes(setup)  (state_terms); 4 * a  (lora_state_terms)",
            source="peft/tuners/lora/layer.py: lora_A (d_in × r), lora_B (r × d_out), FP32 over a 16-bit base (autocast_adapter_dtype=True), the base's 16-bit dtype with --adapter-dtype bf16 (autocast_adapter_dtype=False); mlx_lm/tuner/lora.py: LoRALinear (introspect/refined/lora.py, mlx.py)",
            computed_by=(
                "introspect/refined/lora.py: state_terms",
                "introspect/refined/lora_sharded.py: state",
                "introspect/refined/mlx.py: lora_state_terms",
            ),
            tests=(
                "tests/test_lora.py::test_lora_step_peak",
                "tests/test_lora.py::test_peft_all_linear_on_other_blocks",
                "tests/test_mlx_lora.py::test_lora_closed_form_within_5_percent_of_the_replay",
                "tests/test_num_layers.py::test_torch_step_within_3_percent",
                "tests/test_num_layers.py::test_mlx_step_within_5_percent",
                "tests/test_lora_sharded.py::test_lora_weights_per_rank_are_fsdp2_shards_of_every_parameter",
                "tests/test_adapter_dtype.py::test_bf16_adapter_step_peak",
            ),
        ),
        Term(
            name="weights/trainable_embedding_copies",
            category="weights",
            equation="the trained copies of the input embedding and the output head at the working dtype (wb·V·d each), beside the frozen originals",
            source="peft modules_to_save: ModulesToSaveWrapper keeps the frozen original and trains a copy (introspect/refined/lora.py: embedding_copy_bytes)",
            computed_by=("introspect/refined/lora.py: state_terms",),
            tests=("tests/test_lora.py::test_lora_step_peak",),
        ),
    )


@cache
def _registry() -> tuple[tuple[Term, ...], dict[str, Term]]:
    """The records, and the records by name."""
    records = _records()
    return records, {t.name: t for t in records}


def __getattr__(name: str):
    """``TERMS``, every record in declaration order (PEP 562: built on first access)."""
    if name == "TERMS":
        return _registry()[0]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
