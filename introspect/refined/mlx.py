"""MLX's peak in closed form: what the step's one lazy graph holds when MLX evaluates it.

**Mechanism** (MLX v0.32's CPU evaluator, as :mod:`introspect.measure.mlx_replay_eval`
replays it; that replay is the oracle this closed form is derived from):

* MLX builds forward, backward and Adam's update as one graph and ``mx.eval`` runs it in
  one pass: a depth-first use count, then a breadth-first tape (``MLX_BFS_MAX_WIDTH``
  20) run inputs first (``mlx/transforms.cpp``). A buffer is freed when no unevaluated
  op reads it *and* no task the worker has not run yet holds it; an elementwise op
  reuses an input's buffer only when nothing else refers to it (donation,
  ``backend/common/utils.h``).
* The main thread runs ahead of the CPU worker by up to ``MAX_ACTIVE_TASKS`` (10) tasks
  of ``DISPATCHES_PER_TASK`` (10) dispatches (``scheduler.h``, ``cpu/encoder.h``): the
  inputs of the last ~110 dispatched ops stay pinned though dead (the *window*). Its
  reach is a number of ops, so what it pins is a fixed set of tensors of the graph's
  structure — ``mx.compile`` fuses elementwise chains into one kernel each, the same
  110 dispatches reach further back and pin more tensors (``compile.cpp``), and its
  multi-output kernels never donate (Adam's fused update makes new m, v and weights).
* Two kinds of moment hold the peak. **backward** — e.g. the loss's backward, at the
  top of the graph: the weights and Adam state, every forward tensor a VJP keeps (mlx-lm's classes
  on the CPU run ``mx.fast.rms_norm``, ``rope`` and ``scaled_dot_product_attention`` as
  their elementwise fallbacks, whose VJPs keep more than torch's: e.g. 14 B·T·d FP32
  tensors per Llama layer, the T×T probabilities and the boolean mask), the B·T·V
  logits, their soft-max and gradients (four B·T·V buffers with ``default_loss``), and
  the window's last-layer and loss transients. **optimizer_step** — Adam's update of
  the largest tensors (the tied V·d embedding is the first output ``mx.eval`` walks, so
  its update runs once the whole gradient chain exists): its gradient, the update's
  temporaries or fused outputs, the old and new weights and moments not yet released.

**Closed form.** Each moment is the parameter bytes and Adam's two moments
(``3·N·s``, MLX keeps the state in the weights' dtype) plus, for each *shape kind* —
B·T·d, B·T·f, B·T·kv, B·h·T², B·T·V, V·d, d·f, … (:data:`KINDS`) — ``c(L)·size`` bytes,
``c(L)`` the bytes per element of that kind the moment holds in an L-layer stack (4 for
one FP32 tensor, 2 for a BF16 one; what the window pins included): whole numbers counted
from the graph at L = 4, 10, 16 and 32 (:data:`DEPTHS`) and the straight lines between them
(:func:`counts_at`), per structure, dtype and compilation (one JSON file per structure,
``introspect/refined/data/mlx_counts/``, written by ``python benchmarks/mlx_derive.py``
and read by :mod:`introspect.refined.mlx_counts`). The peak is the largest candidate. No
constant is fitted to a measured step: the counts are read off replays of the real
classes at tiny shapes, and the sizes they multiply are the user's.

**Derived from** replays only (no measured row): B=3, d=128, 8 heads of 16 (2 K/V),
f=216, T ∈ {44, 176} × V ∈ {1000, 4000, 16000} (so that every kind has its own size),
at L = 4, 10, 16 and 32; a candidate is the largest moment overall and within the update at
each of those shapes. Between the depths the counts are interpolated, not exact: the
largest moment is the same op of the graph at every depth only up to the scheduler
(where the ~110 pending dispatches end, how the breadth-first order interleaves weight
gradients with the next layer's backward), so the bytes are not exactly linear in L.

**Checked on** (all held out; ``benchmarks/results/mlx_closed_form.md``,
``python benchmarks/mlx_closed_form.py``): the 84 measured MLX CPU peaks of
``mlx_replay_measured.json`` (mlx-lm's llama, qwen2, qwen3, gemma, phi, gpt2 and the
reference model; d=256 L=4 V=8192; FP32 and BF16; (B, T) = (1, 128), (4, 256),
(1, 1024); compiled or not) — every row within 0.3% of the replay, 80 within ±5% of the
measured peak, the four others the replay's own misses (+8–9%, B·T = 128: the worker
keeps up, fewer tasks pending than the scheduler allows); the 24 MLX rows of
``accuracy.json`` (the reference model at the seed's 10M/40M/100M shapes, T = 256–1024;
mlx-lm's Llama 10M, Qwen2 7M, GPT-2 8M checkpointed) — all 24 within ±5% of the measured
peak (−4.1% to +4.7%), the Llama-style reference rows the farthest from the replay (their
largest moment moves between ops as layers are added); and the replay alone at sizes no
step here can run — Llama-3.2-1B's shape at T = 2048 and 512, Qwen2.5-0.5B's at T = 2048
(L = 24, between two depths) and a 48-layer Llama (beyond the deepest): within −2.3% to
+0.1% of the replay.

**mlx-lm's Gemma 2, Gemma 3, Phi-3, OLMo 2 and StarCoder2** (:data:`DENSE_STRUCTURES`,
``mlx_lm/models/gemma2.py``, ``gemma3_text.py``, ``phi3.py``, ``olmo2.py``,
``starcoder2.py``) are derived the same way, at the same shapes: Gemma 2's four norms per
block, explicit ``scores`` with ``tanh`` soft-capping and the final logits' ``tanh``; Gemma
3's per-head q/k RMSNorm, four norms and ``clip_residual``; Phi-3's fused ``qkv_proj`` and
``gate_up_proj`` split into views (their B·T·(q+2kv) and B·T·2f outputs and weights are
kinds of their own: ``B·T·qkv``, ``B·T·2f``, ``d·qkv``, ``d·2f``); OLMo 2's q/k RMSNorm
over the whole projection and post-norms; StarCoder2's LayerNorms, biases and plain GELU
MLP. Their largest moment moves off the straight line between L = 4 and 10 by 4–10% at
L = 2–9 (which op the pending dispatches end on shifts with each layer), so for them the
counts are read at every L from 2 to 10 too (a candidate's ``shallow`` and ``between``)
and the lines run between those. Gemma 3's counts are read with no window shorter than T
(:func:`dense_structure` says what a shorter one changes). **Checked on** 120 real
mlx-lm steps, all held out (``benchmarks/results/mlx-dense-families.md``, ``python
benchmarks/mlx_dense_families.py``: d = 64–192, L = 3–20, B = 1–2, T = 96–512, GQA and
MQA, FP32/BF16, eager and compiled, Gemma 3 tied and untied with a window shorter than
T): 119 within ±5% (−5.1% to +1.5%), the nearest structure before 42. The depths 2–10
were added after a first run (61 of 72, misses at L = 3 and 6).

**Checkpointing** (mlx-lm's ``grad_checkpoint``: ``mx.checkpoint`` around every layer's
``__call__``, ``mlx_lm/tuner/trainer.py``): ``mx.checkpoint`` itself cannot be traced,
so :mod:`introspect.measure.mlx_replay_ckpt` builds its graph by hand (the same update,
bit for bit) and, for :data:`CKPT_STRUCTURES`, the counts are read off those replays as
above, at L = 5–9 too (``python benchmarks/mlx_derive_ckpt.py``,
:func:`checkpointed_counts`); the other structures keep a rule from the source. Checked
on 6 measured FP32 steps (``benchmarks/results/mlx-regimes.md``): 0.997–1.012 (the rows the
rule put at 1.039 and 1.129 among them) and a BF16 compiled one, 0.997; GPT-2 8M
compiled at T = 256 (the rule): +0.6%. Then on five held-out steps of the structures
derived next (Qwen2 BF16, Qwen3 and Llama untied, ``mlx_lm/models/qwen2.py``,
``qwen3.py``, ``llama.py``): Qwen3 FP32 compiled and BF16 eager 1.000 (the rule 1.094,
1.074), Llama untied FP32 eager 1.040 and BF16 compiled 1.038 (the rule 1.049, 1.386),
and a Qwen2 BF16 eager step at d = 192, L = 7, B·T = 320, 1.054 (the rule 1.053): there
the closed form is the replay's own figure and the replay misses the measured peak
(between the replay's bounds, 0.871 and 1.054; FP32 at that shape misses alike).

**LoRA** (mlx-lm's, as ``mlx_lm.lora`` runs it: ``model.freeze()`` then
``linear_to_lora_layers(model, num_layers, {"rank", "scale", "dropout"})`` over every
block with the default keys — every ``nn.Linear`` of a block — ``mlx_lm/lora.py`` and
``mlx_lm/tuner/utils.py``). ``LoRALinear`` (``mlx_lm/tuner/lora.py``) keeps the frozen
linear and FP32 ``lora_a`` (d_in × r) and ``lora_b`` (r × d_out), and computes
``y + (scale · (x @ lora_a) @ lora_b).astype(x.dtype)``; ``value_and_grad`` differentiates
the adapters only, so no base gradient, Adam state for the adapters alone
(:func:`lora_state_terms`). What the graph keeps beyond that state — the base's
activations the backward still needs (norms, attention, the activation's input, the
loss), each adapter's B·T·r ``x @ lora_a`` and B·T·d_out branch, the adapters'
gradients and update — is counted from replays exactly as above, with four more kinds
(B·T·r, d·r, kv·r, f·r): ``python benchmarks/mlx_derive.py --lora`` at the same shapes
and depths, r = 6, for :data:`LORA_STRUCTURES` (the keys ``<structure>/<dtype>/<mode>/lora``),
and at L = 2 too (a candidate's ``shallow``: below L = 4 the line runs from there, not
from the L = 4→10 line extended — small models are LoRA's everyday case).
**Checked on** (``benchmarks/results/mlx-lora.md``, ``python benchmarks/mlx_lora.py``;
all held out): 88 measured mlx-lm LoRA steps (llama and qwen2, d = 128–256, L = 2–8,
MHA, GQA and MQA, r = 4–16, B = 1–2, T = 64–256, FP32 and BF16, eager and compiled) —
88 within ±5% (−2.0% to +3.4%; torch's moments, the fallback before: 1 of 88). The 32
rows of the last two models were added after the last term and run once: all within
(−1.5% to +3.4%). The first 56 had informed two terms; 42 of them within ±5% at first:
the first derivation (L = 4–32 only) overshot the eager L = 2–3 rows by 5–15% (the
replay itself within 2.5%: hence the counts at L = 2), and the BF16 eager rows were
4.6–9.4% under — the replay's own miss, the FP32 input copies that the trace merges and
an eager step does not (:func:`lora_upcast_bytes`). 49 with the L = 2 counts alone;
with both, 56 of 56, −2.0% to +1.8%.
With ``num_layers`` K below L (``--num-layers``: ``linear_to_lora_layers`` on
``model.layers[-K:]``) the frozen blocks below depend on no trained array, so
``value_and_grad`` makes no VJP for them and their forward outputs are freed as they are
consumed: the candidates are read at depth K over the whole model's state (measured: a
K = 2 step on a 5-block model holds, beyond its state, a 2-block model's step within 2%,
``tests/test_num_layers.py``).
DoRA, the adapters' dropout and gradient accumulation add terms of their own to these
moments (:mod:`introspect.refined.mlx_dora`, from ``mlx_lm/tuner/dora.py``, ``lora.py``
and ``trainer.py``).
**Other structures' LoRA** (``python benchmarks/mlx_derive.py --lora STRUCTURE``, the
same shapes, r = 6, at L = 1, 2, 3, 4, 10, 16, 32): mlx-lm's default keys are every
``nn.Linear`` of a block whatever it is called — Qwen3's and Gemma 3's q/k norms stay
frozen, Phi-3's fused ``qkv_proj`` and ``gate_up_proj`` are one adapter each (their
``lora_b`` kinds ``qkv·r`` and ``2f·r``), Phi's ``dense``, ``fc1``, ``fc2``; derived for
qwen3, gemma3_text (tied), phi, phi3 and olmo2 (:data:`LORA_STRUCTURES`). **Checked on**
60 real mlx-lm LoRA steps at held-out shapes, run once after the counts were read
(``benchmarks/results/mlx-lora.md``, "Other structures"; ``python benchmarks/mlx_lora.py
--other``: d = 96 and 160, L = 3 and 6, GQA and MQA, r = 4 and 8, B·T = 64 and 512, FP32
and BF16, eager and compiled): 60 within ±5% (−3.8% to +2.3%; torch's moments: 2 of 60,
0.775 to 1.378); at the derivation shape (not held out) 10 of 10 (−3.6% to −1.5%).
A structure without LoRA counts (GPT-2, Gemma, Gemma 2, StarCoder2, the MoE ones,
Gemma 3 untied) has no closed-form LoRA figure: :func:`lora_not_derived` says so in one
line and the MLX dry run of the family's class answers
(:mod:`introspect.measure.mlx_lora_dry_run`), not torch's moments (0.775–1.378 of the
measured steps above; issue 23 reports 3.0–3.6× on Qwen3-0.6B).
**Named keys** (``lora_parameters.keys``: ``linear_to_lora_layers`` in
``mlx_lm/tuner/utils.py`` converts only the block's modules whose path is one of the
keys; mlx-tune's and peft's default q_proj, v_proj; :func:`lora_keys`). The graph
differs from the all-linear one only in which adapters exist: the other linears stay
frozen ``nn.Linear`` with no B·T·r branch, adapter, gradient or update, and the backward
keeps only the activations some VJP still reads (a frozen linear's VJP reads its weight,
not its input). So the same kinds are read off replays with those keys, at the same
shapes and depths (``python benchmarks/mlx_derive.py --lora-keys NAMES STRUCTURE``, keys
``…/lora/<names>``): q/v and q/k/v/o for llama (tied and untied), qwen2 and qwen3
(:data:`NAMED_KEYS`). **Checked on** (``benchmarks/results/mlx-lora.md``, "Named
keys"; ``python benchmarks/mlx_lora.py --keys``, run after the counts were read, nothing
changed after; all held out): 64 real mlx-lm LoRA steps (those four, both keys, d = 96
and 160, L = 3 and 6, GQA and MQA, r = 4–16, B·T = 64–512, FP32 and BF16, eager and
compiled) — 64 within ±5% (−1.6% to +1.3%; torch's moments, what they had before: 0 of
64, 0.800 to 1.477).
**Checkpointed LoRA** (``mlx_lm.lora --grad-checkpoint``: ``grad_checkpoint`` in
``mlx_lm/tuner/trainer.py`` wraps the block class's ``__call__`` in ``mx.checkpoint``,
so every block, the frozen ones below ``num_layers`` too; ``mx.checkpoint`` is
``mlx/transforms.cpp``'s ``custom_vjp`` that runs the layer again in its VJP). Its graph
is built by hand (:func:`introspect.measure.mlx_replay_ckpt.checkpointed_step`: each
layer's VJP over its adapters only, no VJP for a frozen block below ``num_layers``) and
the counts read off its replays exactly as the plain LoRA step's — every linear
(mlx-lm's default keys), r = 6, the same six shapes, L = 1–10, 16, 32, FP32 and BF16,
eager and compiled (``python benchmarks/mlx_derive_ckpt.py --lora``, keys
``<structure>/<dtype>/<mode>/lora/ckpt`` in ``data/mlx_ckpt_counts/``, :func:`checkpointed_lora`)
— for :data:`LORA_CKPT_STRUCTURES` (Llama tied and untied, Qwen2, Qwen3). ``num_layers``
K composes as without checkpointing (the candidates at depth K over the whole model's
state), an affine 4-/8-bit base too (:func:`affine_base_bytes` in the state, the same
counts), and the eager BF16 step's FP32 upcasts are one layer's, the recomputed one
(:func:`lora_upcast_bytes`). **Checked on** (``benchmarks/results/mlx-lora.md``,
"Checkpointed"; ``python benchmarks/mlx_lora.py --ckpt``, run once after the counts were
read; all held out): real mlx-lm checkpointed LoRA steps of the four structures at d = 96
and 160, L = 3 and 6, GQA and MQA, r = 8 and 16, B·T = 256 and 512, FP32 and BF16, eager
and compiled, ``num_layers`` 2 of 6, and over ``quantize_model``'d 4- and 8-bit bases —
38 of 38 within ±5% (−3.4% to +3.6%; the same steps without checkpointing, what the
plain counts say, 1.14–1.96 of them; before, every one of these setups was "not derived");
and the replay alone (:mod:`introspect.measure.mlx_lora_dry_run`) of a d = 96 Llama at
L = 12 (T = 256) and L = 24 (T = 128), between the counted depths, FP32 eager and compiled
and BF16 eager: −1.3% to +3.5% (the BF16 eager one's +3.5% the upcasts, which the
replay merges and a real step does not).
Named keys, a dropout (its masks are remade in
each recompute) and DoRA under checkpointing are not read: :func:`lora_not_derived`.
Every other mlx-lm LoRA setup the counts do not describe — named ``lora_targets``
(mlx-lm's ``keys``, e.g. q_proj, v_proj) on a structure whose keys are not derived
(:data:`NAMED_KEYS`), checkpointing where :data:`LORA_CKPT_STRUCTURES`'s counts do not
reach, an optimizer other than Adam/AdamW, the reference
model (:func:`introspect.mlx_setups.lora_unmodelled_flag`) — takes the same path: the
one line of :func:`lora_not_derived` and the MLX dry run; no setup of mlx-lm's LoRA
gets torch's moments (before: those setups of a derived structure kept them, 2.3× the
published mlx-tune Qwen3-0.6B q/v row's bound).

**Mixtures of experts** (:data:`MOE_STRUCTURES`: mlx-lm's ``qwen3_moe`` and ``mixtral``,
``mlx_lm/models/qwen3_moe.py``, ``mixtral.py``). The router (``gate``, a d·E linear)
scores every token: Qwen3-MoE a precise soft-max over the E logits, ``argpartition``'s
top k, their scores renormalized (``norm_topk_prob``); Mixtral ``argpartition`` of the
logits and a soft-max over the k chosen. ``SwitchGLU`` (``mlx_lm/models/switch_layers.py``)
repeats each token k times and, once ``indices.size >= 64`` (every training step here),
sorts the copies by expert (``_gather_sort``: two ``argsort``), runs up, gate and down as
``mx.gather_mm`` over the E stacked experts (``SwitchLinear``, weights E·fe·d) and
unsorts (``_scatter_unsort``); the block sums the k outputs weighted by the scores.
Backward: ``GatherMM::vjp`` (``mlx/primitives.cpp``) — the input's gradient a sorted
``gather_mm`` of the cotangent, each weight's a ``segmented_mm`` over the experts'
segments. So the graph holds kinds a dense block has not (:data:`MOE_KINDS`): B·T·E
(the router's logits, soft-max, partition), B·T·k (indices, scores, the sort's orders),
B·T·k·d (the sorted copies, the experts' outputs and their gradients), B·T·k·fe (up,
gate, the activation and their gradients), d·E and E·d·fe (the weights' gradients and
update). Their counts are read off replays exactly as the dense ones'
(``python benchmarks/mlx_derive.py --from qwen3_moe``; ``SegmentedMM`` cannot be exported,
:mod:`introspect.measure.mlx_replay_moe` rebuilds it in the trace from the source), at
the same shapes plus T = 704 and E = 12, k = 4, fe = 216, at every depth from 2 to 16
and at 24 and 32: a MoE layer's many small routing ops move the largest moment in a
cycle of a few layers, so lines between 4 and 10 miss by up to 5.5%. FP32 only: MLX's
CPU ``GatherMM`` refuses BF16 (``cpu/masked_mm.cpp``). **Checked on**
(``benchmarks/results/mlx-moe.md``, ``python benchmarks/mlx_moe.py``, all held out): 18
measured mlx-lm steps, 12 qwen3_moe and 6 mixtral (d = 96–256, L = 2–12, E = 4–32,
k = 1–8, MHA/GQA/MQA, B·T = 96–1024, eager and compiled) — 17 within ±5% (−0.7% to
+5.6%; the dense counts they had before: 2), the miss a compiled 2-layer Mixtral at
B·T = 1024 where the replay itself is +5.6% (the worker keeps up: the measured peak
lies between the replay's bounds); and the replay alone at Qwen3-30B-A3B's shape
(L = 48, T = 2048: −1.3% eager, −0.6% compiled; L = 20: −0.2%) and Mixtral-8x7B's
(T = 1024: 0.0%). Not derived (the dense structure's counts,
the label says so): MoE on some layers only (``decoder_sparse_step``,
``mlp_only_layers``), tied embeddings, BF16, shared experts (qwen2_moe), LoRA,
checkpointing (:func:`checkpointed_counts` on the MoE counts overshot four measured
qwen3_moe steps by 38–42%: not used).

**Regimes** (issue 23 item 2; ``benchmarks/results/mlx-regimes.md``, ``python
benchmarks/mlx_regimes.py``). *Few layers*: every structure's counts are also read at
L = 1, 2 and 3 (``python benchmarks/mlx_derive.py --shallow``; Gemma 3 from 2, the fewest
layers mlx-lm's class runs), so no depth is extrapolated: the L = 4→10 line run down to
a 1- or 2-layer Llama with V = 32000 overshot the measured step by 7–12% (the replay
within 0.6%: the logits' moment is there, the line's per-layer count is not); counted,
within 0.5%. *Short T, many layers*: where the weights' kinds outweigh the activations
30-fold (SmolLM2-135M at T = 128) the largest moment is a weight gradient's ``Reduce``
in the backward with many layers' gradients and Adam updates alive, which no T = 44 or
176 shape puts on top: the closed form was 0.946 of a measured SmolLM2-135M step and
0.905 of the replay at L = 24. ``--short`` adds candidates at T = 12 (V = 1000, 16000),
counted at L = 20, 24, 28 too (the moment changes op between 16 and 32), for Llama,
Llama untied, Qwen2 and Qwen3 (the other structures lack them: not derived).
**Checked on** 8 held-out real mlx-lm steps, run once after the counts were final: 6
within ±5% (0.997–1.001: L = 1–3 with V = 16000–24000, GPT-2 and Llama, BF16 compiled;
20 and 12 layers at T = 32 and 64; LoRA with ``num_layers`` 1 and 2), and two misses
not closed then: a 1-layer Qwen2 at B·T = 192, 1.117, where the closed form is the
replay's own figure and the replay misses (the worker keeps up in part: the measured peak
lies between the replay's two bounds, 0.873 and 1.117; how far behind it runs is timing,
not modelled); and compiled + checkpointed Qwen2 (L = 6, T = 512), 1.129 with the
source rule, 1.000 with the checkpointed counts (:func:`checkpointed_counts`).

Verified on the CPU only; on Metal the fast kernels are single primitives with their
own VJPs and a command buffer pins 20–50 ops, so these counts do not apply there.
"""

from __future__ import annotations

from introspect import _record
from introspect._record import record
from introspect.mlx_setups import lora_unmodelled_flag, step_derived
from introspect.refined.affine import affine_bits, affine_tensor_bytes
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)

if TYPE_CHECKING:
    from introspect.layers import FeedForward
    from introspect.refined.mlx_counts import Candidate

#: The structures the counts are derived for: name → (family, tied embeddings).
#: mlx-lm's classes (``mlx_lm/models/<family>.py``) and the reference model
#: (``introspect.measure.mlx_model``, eager attention), standard and Llama-style.
STRUCTURES: dict[str, tuple[str, bool]] = {
    "llama": ("llama", True),
    "llama-untied": ("llama", False),
    "qwen2": ("qwen2", True),
    "qwen3": ("qwen3", True),
    "gemma": ("gemma", True),
    "phi": ("phi", False),
    "gpt2": ("gpt2", True),
    "reference-standard": ("reference-standard", False),
    "reference-llama": ("reference-llama", False),
    # mlx-lm's Qwen3-MoE (mlx_lm/models/qwen3_moe.py): a MoE block on every layer,
    # untied; FP32 only (MLX's CPU GatherMM runs FP32 only, cpu/masked_mm.cpp).
    "qwen3_moe": ("qwen3_moe", False),
    # mlx-lm's Mixtral (mlx_lm/models/mixtral.py): Llama's attention, the soft-max over
    # the top-k logits, the same SwitchGLU; untied, FP32 only.
    "mixtral": ("mixtral", False),
    # mlx-lm's dense classes beyond those, as their checkpoints tie (DENSE_STRUCTURES).
    "gemma2": ("gemma2", True),
    "gemma3_text": ("gemma3_text", True),
    "gemma3_text-untied": ("gemma3_text", False),
    "phi3": ("phi3", False),
    "olmo2": ("olmo2", False),
    "starcoder2": ("starcoder2", True),
}
#: The mixture-of-experts structures (their counts: FP32, eager and compiled).
MOE_STRUCTURES = ("qwen3_moe", "mixtral")
#: The structures whose checkpointed step is counted from replays
#: (``python benchmarks/mlx_derive_ckpt.py``; :func:`checkpointed_counts`): FP32 and
#: BF16, eager and compiled, for each (mlx-lm's ``mlx_lm/models/llama.py`` tied and
#: untied, ``qwen2.py``, ``qwen3.py``: the classes with ``model.embed_tokens`` and
#: ``input_embeddings`` that ``mlx_replay_ckpt.checkpointed_step`` needs).
CKPT_STRUCTURES = ("llama", "llama-untied", "qwen2", "qwen3")
#: The structures whose checkpointed LoRA step (every linear, mlx-lm's default keys) is
#: counted from replays (``python benchmarks/mlx_derive_ckpt.py --lora``; keys
#: ``…/lora/ckpt``): FP32 and BF16, eager and compiled.
LORA_CKPT_STRUCTURES = ("llama", "llama-untied", "qwen2", "qwen3")


@record
class Dims:
    """The sizes the shape kinds are made of."""

    B: int
    T: int
    d: int
    f: int
    h: int
    kv: int
    hd: int
    V: int
    positions: int
    #: Rotary dimensions per head (Phi's partial rotary; else the head).
    rot: int = 0
    #: LoRA's rank (0: full fine-tuning, no adapter kinds).
    r: int = 0
    #: Routed experts, experts per token and each expert's width (0: a dense block).
    E: int = 0
    k: int = 0
    fe: int = 0


#: Shape kind → its number of elements.
KINDS = {
    "1": lambda x: 1,
    "T": lambda x: x.T,
    "B·T": lambda x: x.B * x.T,
    "B·(T+1)": lambda x: x.B * (x.T + 1),
    "B·h·T": lambda x: x.B * x.h * x.T,
    "B·kvh·T": lambda x: x.B * x.kv * x.T,
    "T·hd/2": lambda x: x.T * x.hd // 2,
    "T·hd": lambda x: x.T * x.hd,
    "T²": lambda x: x.T * x.T,
    "B·T²": lambda x: x.B * x.T * x.T,
    "B·h·T²": lambda x: x.B * x.h * x.T * x.T,
    "B·T·hd": lambda x: x.B * x.T * x.hd,
    "B·T·d/2": lambda x: x.B * x.T * x.h * x.hd // 2,
    "T·rot/2": lambda x: x.T * x.rot // 2,
    "B·T·h·rot": lambda x: x.B * x.T * x.h * x.rot,
    "B·T·h·rot/2": lambda x: x.B * x.T * x.h * x.rot // 2,
    "B·T·h·pass": lambda x: x.B * x.T * x.h * (x.hd - x.rot),
    "T·d": lambda x: x.T * x.d,
    "B·T·d": lambda x: x.B * x.T * x.d,
    "B·T·kv": lambda x: x.B * x.T * x.kv * x.hd,
    "B·T·3d": lambda x: 3 * x.B * x.T * x.d,
    "B·T·f": lambda x: x.B * x.T * x.f,
    "B·T·V": lambda x: x.B * x.T * x.V,
    "d": lambda x: x.d,
    "kv": lambda x: x.kv * x.hd,
    "3d": lambda x: 3 * x.d,
    "f": lambda x: x.f,
    "V": lambda x: x.V,
    "d·d": lambda x: x.d * x.d,
    "d·kv": lambda x: x.d * x.kv * x.hd,
    "3d·d": lambda x: 3 * x.d * x.d,
    "d·f": lambda x: x.d * x.f,
    "V·d": lambda x: x.V * x.d,
    "positions·d": lambda x: x.positions * x.d,
    # mlx-lm's LoRALinear (mlx_lm/tuner/lora.py): x @ lora_a, and the adapters.
    "B·T·r": lambda x: x.B * x.T * x.r,
    "d·r": lambda x: x.d * x.r,
    "kv·r": lambda x: x.kv * x.hd * x.r,
    "f·r": lambda x: x.f * x.r,
    # ... and the lora_b of a fused linear: Phi-3's qkv_proj and gate_up_proj, GPT-2's
    # c_attn (mlx_lm/models/phi3.py, gpt2.py: each one nn.Linear, so one adapter).
    "qkv·r": lambda x: (x.h + 2 * x.kv) * x.hd * x.r,
    "2f·r": lambda x: 2 * x.f * x.r,
    "3d·r": lambda x: 3 * x.d * x.r,
    # mlx-lm's SwitchGLU (mlx_lm/models/switch_layers.py) and its router: the router's
    # logits and soft-max, the top-k indices and scores (and the sort's orders), the
    # token copies sorted by expert, the experts' up/gate/activation, their weights.
    "B·T·E": lambda x: x.B * x.T * x.E,
    "B·T·k": lambda x: x.B * x.T * x.k,
    "B·T·k·d": lambda x: x.B * x.T * x.k * x.d,
    "B·T·k·fe": lambda x: x.B * x.T * x.k * x.fe,
    "d·E": lambda x: x.d * x.E,
    "E·d·fe": lambda x: x.E * x.d * x.fe,
    # Phi-3's fused projections (mlx_lm/models/phi3.py): qkv_proj's B·T·(q+2kv) output
    # and weight, gate_up_proj's B·T·2f output and weight.
    "B·T·qkv": lambda x: x.B * x.T * (x.h + 2 * x.kv) * x.hd,
    "B·T·2f": lambda x: 2 * x.B * x.T * x.f,
    "d·qkv": lambda x: x.d * (x.h + 2 * x.kv) * x.hd,
    "d·2f": lambda x: 2 * x.d * x.f,
}
#: Kinds that are the same tensors as another when there is one K/V head per query head.
KV_KINDS = ("B·T·kv", "kv", "d·kv", "B·kvh·T", "kv·r")
KV_KINDS += ("B·T·qkv", "d·qkv", "qkv·r")  # Phi-3's fused q/k/v is B·T·3d, d·3d when MHA
#: Kinds of LoRA's adapters (absent under full fine-tuning).
LORA_KINDS = ("B·T·r", "d·r", "kv·r", "f·r", "qkv·r", "2f·r", "3d·r")
#: Kinds of a mixture-of-experts block (absent from a dense one).
MOE_KINDS = ("B·T·E", "B·T·k", "B·T·k·d", "B·T·k·fe", "d·E", "E·d·fe")


#: Kinds of a partial rotary embedding (absent when the rotary covers the head).
ROT_KINDS = ("T·rot/2", "B·T·h·rot", "B·T·h·rot/2", "B·T·h·pass")


def kinds(dims: Dims) -> list[str]:
    """The kinds that are distinct for these dimensions (MHA: K/V kinds are d kinds;
    full rotary: no partial-rotary kinds)."""
    return [
        k
        for k in KINDS
        if (dims.kv != dims.h or k not in KV_KINDS)
        and (dims.rot != dims.hd or k not in ROT_KINDS)
        and (dims.r or k not in LORA_KINDS)
        and (dims.E or k not in MOE_KINDS)
    ]


def numel(kind: str, dims: Dims) -> int:
    return KINDS[kind](dims)


def key(
    structure: str, dtype: str, compiled: bool, lora: bool = False, keys: tuple[str, ...] = ()
) -> str:
    """The counts' key: ``<structure>/<dtype>/<eager|compiled>``, then ``/lora`` for
    mlx-lm's LoRA on every linear (its default keys) or ``/lora/<names>`` for LoRA on the
    linears named (mlx-lm's ``lora_parameters.keys``; the names sorted, comma-joined)."""
    out = f"{structure}/{dtype}/{'compiled' if compiled else 'eager'}"
    if lora:
        out += "/lora" + ("/" + ",".join(sorted(keys)) if keys else "")
    return out


#: Term of the breakdown each kind's bytes fall in.
GROUPS = {
    "B·T·V": "activations/mlx/logits",
    "B·h·T²": "activations/mlx/attention",
    "B·T²": "activations/mlx/attention",
    "T²": "activations/mlx/attention",
    "B·h·T": "activations/mlx/attention",
    "B·T·f": "activations/mlx/feed_forward",
    "B·T·k·fe": "activations/mlx/experts",
    "B·T·k·d": "activations/mlx/experts",
    "B·T·k": "activations/mlx/router",
    "B·T·E": "activations/mlx/router",
    "B·T·2f": "activations/mlx/feed_forward",
}
#: What a K/V kind is when K/V heads are query heads (the structure was derived MHA).
MHA_KIND = {"B·T·kv": "B·T·d", "kv": "d", "d·kv": "d·d", "B·kvh·T": "B·h·T", "kv·r": "d·r"}
WEIGHT_KINDS = (
    *("d", "kv", "3d", "f", "V", "d·d", "d·kv", "3d·d", "d·f", "V·d", "positions·d"),
    *("d·r", "kv·r", "f·r", "qkv·r", "2f·r", "3d·r"),
    *("d·E", "E·d·fe"),
    *("d·qkv", "d·2f"),
)

#: mlx-lm's model types whose class is another's (``mlx_lm/models``: mistral is Llama's).
SAME_CLASS = {"mistral": "llama"}


def group(kind: str) -> str:
    if kind in WEIGHT_KINDS:
        return "grads/mlx/weight_sized"
    return GROUPS.get(kind, "activations/mlx/hidden")


def structure_of(spec: ModelSpec, setup: TrainingSetup) -> str:
    """The derived structure nearest to ``spec`` as ``setup`` runs it: our reference
    model, Llama-style (RMSNorm, gated) or standard; mlx-lm's class by ``model_type``
    (:func:`dense_structure` for Gemma 2 and 3, Phi-3, OLMo 2 and StarCoder2), or
    else the class whose structure matches (q/k norms: Qwen3; a parallel LayerNorm block:
    Phi; learned positions: GPT-2; q/k/v biases: Qwen2; otherwise Llama)."""
    if setup.implementation == "reference":
        llama = spec.norm == "rmsnorm" and spec.ffn == "gated"
        return "reference-llama" if llama else "reference-standard"
    moe = moe_structure(spec, setup)
    if moe:
        return moe
    family = SAME_CLASS.get(spec.model_type, spec.model_type)
    if dense_structure(spec):
        return dense_structure(spec)
    if family not in ("llama", "qwen2", "qwen3", "gemma", "phi", "gpt2"):
        if spec.qk_norm != "none":
            family = "qwen3"
        elif spec.norm == "layernorm" and spec.position_embedding == "learned":
            family = "gpt2"
        elif spec.norm == "layernorm":
            family = "phi"
        elif spec.qkv_bias:
            family = "qwen2"
        else:
            family = "llama"
    if family == "llama" and not spec.tie_word_embeddings:
        return "llama-untied"
    return family


def experts(spec: ModelSpec) -> FeedForward | None:
    """The feed-forward of a stack whose every layer is one mixture of experts, else None."""
    ff = spec.kinds[0][0].feed_forward
    return ff if len(spec.kinds) == 1 and ff.is_moe else None


def moe_structure(spec: ModelSpec, setup: TrainingSetup) -> str | None:
    """The MoE structure of :data:`MOE_STRUCTURES` that ``spec`` is, as ``setup`` runs it:
    mlx-lm's ``qwen3_moe`` class with a MoE block on every layer (``decoder_sparse_step``
    1, no ``mlp_only_layers``) or its ``mixtral``, a soft-max router over k of E routed
    experts and no shared one, untied, FP32, not checkpointed (what the counts were
    derived for). Else None: a MoE spec keeps the dense structure's counts
    (:func:`moe_note` says so)."""
    ff = experts(spec)
    if (
        spec.model_type in MOE_STRUCTURES
        and ff is not None
        and not ff.shared_intermediate_size
        and not ff.all_experts
        and ff.router == "softmax"
        and not ff.bias
        and not spec.tie_word_embeddings
        and dtype_of(setup) == "fp32"
        # checkpointed_counts on the MoE counts overshoots measured steps by 38–42%
        # (benchmarks/results/mlx-moe.md): mx.checkpoint's recompute of a MoE layer is
        # not what the dense rule assumes; not derived.
        and not setup.activation_checkpointing
    ):
        return spec.model_type
    return None


def moe_note(spec: ModelSpec, setup: TrainingSetup) -> str:
    """The label of a MoE spec on a dense structure's counts (empty otherwise)."""
    if not any(kind.feed_forward.is_moe for kind, _ in spec.kinds) or not applies(setup, spec):
        return ""
    if structure_of(spec, setup) in MOE_STRUCTURES:
        return ""
    return (
        f"; MoE on the dense {structure_of(spec, setup)} counts: MLX's MoE counts are "
        "derived for mlx-lm's qwen3_moe and mixtral, every layer MoE, untied, FP32, "
        "no checkpointing"
    )


#: mlx-lm's dense classes derived beyond the first six (``mlx_lm/models/<family>.py``),
#: each as its checkpoints tie: Gemma 2's class has no ``lm_head`` at all (tied
#: whatever the config says); Gemma 3's builds one and drops it in ``sanitize`` when the
#: checkpoint has no ``lm_head.weight`` (its checkpoints' case: tied), and keeps it for a
#: random build (``gemma3_text-untied``, which ``introspect measure`` runs); Phi-3 and
#: OLMo 2 untied, StarCoder2 tied, as their ``tie_word_embeddings`` says.
DENSE_STRUCTURES = ("gemma2", "gemma3_text", "phi3", "olmo2", "starcoder2")
#: mlx-lm's classes with no ``lm_head`` whatever the config says (Gemma 2: its ``Model``
#: reads the embedding's ``as_linear``), so one structure covers tied and untied configs.
ALWAYS_TIED = ("gemma2",)


def dense_structure(spec: ModelSpec) -> str | None:
    """The derived structure of one of :data:`DENSE_STRUCTURES` whose embeddings are tied
    as ``spec``'s (None, the nearest structure instead, for a tie not derived: Phi-3 or
    OLMo 2 tied, StarCoder2 untied).

    Gemma 3's sliding window: the counts were read with every layer's mask ``"causal"``
    (``sliding_window`` longer than T: ``create_attention_mask`` in
    ``mlx_lm/models/base.py`` builds no array). A window shorter than T gives the sliding
    layers one shared T×T boolean mask instead of the fallback's per layer, and makes the
    peak smaller by those bytes only: −0.2% to −0.7% in the replays at the derivation
    shapes (T = 176, window 32, L = 4 and 32), so the counts apply, slightly above.
    mlx-lm's Gemma 2 and Phi-3 read no ``sliding_window`` (not ``ModelArgs`` fields):
    every layer attends causally whatever the config says, as the counts do."""
    family = spec.model_type
    if family not in DENSE_STRUCTURES:
        return None
    if family in ALWAYS_TIED:
        return family
    for name in (family, f"{family}-untied"):
        if name in STRUCTURES and STRUCTURES[name][1] == spec.tie_word_embeddings:
            return name
    return None


def dims(spec: ModelSpec, setup: TrainingSetup) -> Dims:
    ff = experts(spec) if structure_of(spec, setup) in MOE_STRUCTURES else None
    return Dims(
        B=setup.batch_size,
        T=setup.seq_len,
        d=spec.hidden_size,
        f=spec.ffn_dim,
        h=spec.num_attention_heads,
        kv=spec.kv_heads,
        hd=spec.head_size,
        V=spec.vocab_size,
        positions=spec.max_position_embeddings or 0,
        rot=int(spec.head_size * spec.partial_rotary_factor),
        r=setup.lora_rank if setup.finetune in ("lora", "dora") else 0,
        E=ff.num_experts if ff else 0,
        k=ff.top_k if ff else 0,
        fe=ff.intermediate_size if ff else 0,
    )


def dtype_of(setup: TrainingSetup) -> str:
    """MLX runs the step in the weights' dtype: BF16 (or FP16, the same item sizes)
    under ``bf16``/``mixed`` precision, else FP32."""
    return "bf16" if setup.precision in ("mixed", "bf16") or setup.weight_bytes == 2 else "fp32"


def state_terms(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """The weights and Adam's m and v, all in the weights' dtype (``mlx.optimizers.Adam``
    makes its state with ``mx.zeros_like(parameter)``)."""
    from introspect.params import parameter_count

    s = 2 if dtype_of(setup) == "bf16" else 4
    n = parameter_count(spec)
    if setup.finetune in ("lora", "dora"):
        base = affine_base_bytes(spec, setup, s) if affine_bits(setup) else n * s
        terms = lora_state_terms(spec, setup, base)
        if setup.finetune == "dora":  # the magnitudes and their moments (mlx_dora)
            from introspect.refined.mlx_dora import dora_state_terms

            for name, size in dora_state_terms(spec, setup).items():
                terms[name] = terms.get(name, 0) + size
        return terms
    return {"weights": n * s, "optimizer/adam_m": n * s, "optimizer/adam_v": n * s}


def lora_state_terms(spec: ModelSpec, setup: TrainingSetup, base: int) -> dict[str, int]:
    """mlx-lm's LoRA (``mlx_lm/tuner/lora.py``, ``LoRALinear``): the frozen base in its
    dtype, and per targeted linear ``lora_a`` (d_in × r) and ``lora_b`` (r × d_out) made by
    ``mx.random.uniform`` and ``mx.zeros`` — FP32 whatever the base — with Adam's m and
    v (``mx.zeros_like``) for them alone (``value_and_grad`` and ``optimizer.init`` see
    only the trainable parameters)."""
    from introspect.refined.lora import adapter_parameters

    a = adapter_parameters(spec, setup)
    return {
        "weights": base,
        "weights/lora_adapters": 4 * a,
        "optimizer/adam_m": 4 * a,
        "optimizer/adam_v": 4 * a,
    }


def affine_base_bytes(spec: ModelSpec, setup: TrainingSetup, s: int) -> int:
    """The frozen base of ``mlx_lm.lora`` over an ``mlx_lm.convert -q`` checkpoint:
    ``quantize_model`` (``mlx_lm/utils.py``) swaps every module with ``to_quantized`` —
    ``nn.Linear``, ``nn.Embedding``, ``SwitchLinear`` — whose last weight dimension (d_in;
    the embedding's d) divides by the group size for its quantized form
    (:func:`affine_tensor_bytes`); biases, norms and the rest stay at ``s`` bytes. Here
    the quantized tensors are the block linears (each expert's, in the per-expert view),
    the input embedding and an untied head. Not modelled: a model class's own
    ``quant_predicate`` (mlx-lm keeps some MoE routers at 8 bits) — routers stay float."""
    from introspect.params import parameter_count
    from introspect.refined.lora import _base_linears

    bits, g = affine_bits(setup), setup.group_size
    shapes = list(_base_linears(spec, None))
    V, d = spec.vocab_size, spec.hidden_size
    shapes.append((d, V, 1 if spec.tie_word_embeddings else 2))  # embedding (and head)
    quantized = [(i, o, k) for i, o, k in shapes if i % g == 0]
    packed = sum(k * affine_tensor_bytes(i, o, bits, g, s) for i, o, k in quantized)
    rest = parameter_count(spec) - sum(k * i * o for i, o, k in quantized)
    return packed + rest * s


#: The depths the counts are taken at (``benchmarks/mlx_derive.py``).
DEPTHS = (4, 10, 16, 32)


def segment(candidate: Candidate, layers: int) -> tuple[dict[str, float], dict[str, float]]:
    """Per-layer and fixed bytes per element of each kind on the stretch between the two
    counted depths nearest ``layers``: the straight line through the candidate's counts
    at its two ends. A candidate's depths are :data:`DEPTHS` (a MoE structure's every
    depth from 2 to 16 and 24, 32: ``benchmarks/mlx_derive.py``'s ``MOE_LAYERS``), its
    ``shallow`` ones (every structure's L = 1, 2, 3: ``mlx_derive.py --shallow``) and its
    ``between`` ones (the dense classes' L = 5–9). At a counted depth the line ends
    there (the first one: starts there), so the counts are the derived ones themselves.
    Above the deepest: the slope over all the depths from 4 (the scheduler's shifts
    between two nearby depths would be multiplied), through the last count."""
    at = {**candidate.shallow, **candidate.between, **candidate.at}
    depths = sorted(at)
    if layers > depths[-1]:
        lo, hi = (DEPTHS[0] if DEPTHS[0] in at else depths[0]), depths[-1]
    elif layers <= depths[0]:  # L = 1 (or below the shallowest a file has): the first line
        lo, hi = depths[0], depths[1]
    else:
        lo = max(k for k in depths if k < layers)
        hi = min(k for k in depths if k >= layers)
    per, fixed = {}, {}
    for kind in dict.fromkeys([*at[lo], *at[hi]]):
        a, b = at[lo].get(kind, 0), at[hi].get(kind, 0)
        per[kind] = (b - a) / (hi - lo)
        fixed[kind] = b - hi * per[kind]
    return per, fixed


def counts_at(candidate: Candidate | Checkpointed, layers: int) -> dict[str, float]:
    """Bytes per element of each kind at ``layers``: the derived counts themselves at
    :data:`DEPTHS`, on the straight lines between them elsewhere."""
    if isinstance(candidate, Checkpointed):
        per, fixed = candidate.layer, candidate.fixed
    else:
        per, fixed = segment(candidate, layers)
    return {k: layers * per.get(k, 0) + fixed.get(k, 0) for k in dict.fromkeys([*per, *fixed])}


def candidate_terms(
    candidate: Candidate | Checkpointed, layers: int, x: Dims, structure: str
) -> dict[str, int]:
    """One candidate moment's bytes beyond the state, by breakdown term."""
    mha = x.kv == x.h or structure in ("phi", "gpt2", "reference-standard")
    out: dict[str, int] = {}
    for kind, per_element in counts_at(candidate, layers).items():
        size = numel(MHA_KIND.get(kind, kind) if mha else kind, x)
        name = group(kind)
        out[name] = out.get(name, 0) + round(per_element * size)
    return out


def moments(spec: ModelSpec, setup: TrainingSetup) -> list[tuple[str, dict[str, int]]]:
    """Every derived candidate moment of the step, as (phase, terms)."""
    from introspect.refined import mlx_dora
    from introspect.refined.lora import adapted_layers
    from introspect.refined.mlx_counts import candidates as counts

    structure = structure_of(spec, setup)
    lora = mlx_dora.is_adapter(setup)
    mlx_dora.check(spec, setup, structure, DORA_STRUCTURES)
    if lora and setup.activation_checkpointing:  # lora_not_derived vouched for the key
        candidates = checkpointed_lora(spec, setup)
    elif lora:
        candidates = counts(counts_key(spec, setup))
    elif setup.activation_checkpointing:
        candidates = checkpointed_counts(
            structure, dtype_of(setup), compiled(setup), spec.num_hidden_layers
        )
    else:
        candidates = counts(key(structure, dtype_of(setup), compiled(setup)))
    state = state_terms(spec, setup)
    x = dims(spec, setup)
    upcasts = lora_upcast_bytes(spec, setup) if lora else 0
    extra = extra_terms(spec, setup)
    # --num-layers K: the graph beyond the state is a K-layer LoRA step's (the frozen
    # blocks below depend on no trained array, so value_and_grad makes no VJP for them:
    # lora.first_recorded); their weights are in the state.
    depth = adapted_layers(spec, setup) if lora else spec.num_hidden_layers
    out = []
    for c in candidates:
        terms = dict(state)
        terms.update(candidate_terms(c, depth, x, structure))
        if upcasts:
            terms["activations/mlx/hidden/lora_upcasts"] = upcasts
        for name, size in extra.items():
            terms[name] = terms.get(name, 0) + size
        out.append((c.phase, terms))
    return out


def extra_terms(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """DoRA's, the adapters' dropout's and gradient accumulation's bytes beyond the
    counts, at every candidate moment (:mod:`introspect.refined.mlx_dora`)."""
    from introspect.refined import mlx_dora

    s = 2 if dtype_of(setup) == "bf16" else 4
    out: dict[str, int] = {}
    if setup.finetune == "dora":
        out.update(mlx_dora.dora_graph_terms(spec, setup, s))
    if mlx_dora.is_adapter(setup):
        out.update(mlx_dora.dropout_terms(spec, setup, s, compiled(setup)))
    out.update(mlx_dora.accumulation_terms(spec, setup, s))
    return {k: v for k, v in out.items() if v}


#: Block linears that read the same tensor: q/k/v the attention norm's output, gate/up
#: the feed-forward norm's (``mlx_lm/models/llama.py``, ``qwen2.py``).
SHARED_INPUTS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def lora_upcast_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """The FP32 copies of the adapters' inputs that an eager BF16 step keeps and the
    replayed graph (so the counts) does not.

    ``LoRALinear.__call__`` (``mlx_lm/tuner/lora.py``) computes ``x @ lora_a`` with ``x``
    in the base's BF16 and ``lora_a`` FP32; MLX's ``matmul`` promotes both operands to the
    result type with an ``astype`` each, and the FP32 copy of ``x`` is what ``lora_a``'s
    gradient needs, so it is kept until the backward reaches it. Eager ``mx.eval`` runs
    every op as built: three adapters on q/k/v's shared input make three copies, two on
    gate/up's two. ``mx.export_function``'s ``compile_simplify`` — the trace the counts
    are read from (:mod:`introspect.measure.mlx_replay_trace`) — merges identical ops on
    identical inputs, as ``mx.compile`` does, leaving one copy per input. So an eager
    BF16 step keeps, per layer, one B·T·d FP32 tensor more than the counts for each
    adapter beyond the first on a shared input (3 for all-linear on a gated block).
    Compiled steps merge them too; FP32 steps make no copy. Seen on the steps: with the
    adapters cast to BF16 (no promotion) the replay is within 0.2% of the measured peak,
    with mlx-lm's FP32 adapters 8.4% under (qwen2 d=128 L=8, B=2, T=256).

    Checkpointed (``grad_checkpoint``, ``mlx_lm/tuner/trainer.py``): the forward's copies
    die with the rest of the layer's forward (``mx.checkpoint`` keeps only its input) and
    the recompute makes them again for the one layer being differentiated, so one layer's
    copies, not every adapted layer's."""
    if dtype_of(setup) != "bf16" or compiled(setup):
        return 0
    from introspect.refined.lora import adapted_layers, targets

    chosen = set(targets(spec, setup))
    extra = sum(max(0, len(chosen.intersection(group)) - 1) for group in SHARED_INPUTS)
    tokens = setup.batch_size * setup.seq_len
    layers = min(1, adapted_layers(spec, setup)) if setup.activation_checkpointing else None
    layers = adapted_layers(spec, setup) if layers is None else layers
    return layers * extra * tokens * spec.hidden_size * 4


def torch_moments(spec: ModelSpec, setup: TrainingSetup) -> list[tuple[str, dict[str, int]]]:
    """:func:`introspect.refined.execution.moments` with MLX's affine base (the
    embedding quantized too), for an MLX affine-base setup :func:`applies` does not
    cover and :func:`lora_not_derived` does not refuse. mlx-lm's LoRA never gets here:
    a LoRA setup the counts do not describe is refused in that one line (the MLX dry
    run answers it)."""
    from introspect.refined import execution

    out = execution.moments(spec, setup)
    if affine_bits(setup):
        # the MLX base as mlx_lm.convert -q stores it (the embedding quantized too)
        s = 2 if dtype_of(setup) == "bf16" else 4
        base = affine_base_bytes(spec, setup, s)
        for _, terms in out:
            terms.pop("weights/base_linears", None)
            terms.pop("weights/base_other", None)
            terms["weights"] = base
    return out


def compiled(setup: TrainingSetup) -> bool:
    return setup.framework == "mlx_compiled"


@record
class Checkpointed:
    """A checkpointed step's candidate (:func:`checkpointed_counts`): bytes per element of
    each kind per layer and fixed, the line :func:`counts_at` reads at any depth."""

    phase: str
    op: str
    layer: dict[str, float]
    fixed: dict[str, float]


def checkpointed_counts(
    structure: str, dtype: str, is_compiled: bool, layers: int
) -> list[Candidate | Checkpointed]:
    """The candidates of a checkpointed step.

    mlx-lm's ``grad_checkpoint`` (``mlx_lm/tuner/trainer.py`` lines 27–40) wraps every
    layer's ``__call__`` in ``mx.checkpoint(inner_fn)(layer.trainable_parameters(), x,
    mask, cache=None)``. ``checkpoint`` (``mlx/transforms.cpp``, v0.32.1 lines 1102–1113)
    is a ``custom_vjp`` whose VJP is ``vjp(fun, depends(primals, outputs), cotangents)``:
    the layer's forward runs again on ``Depends`` copies of its parameters and input
    (buffer-sharing views, ``backend/common/common.cpp``) and is differentiated there.
    ``depends`` orders that recompute after the layer's *forward output*, not after the
    gradient of it: where it runs is left to MLX's breadth-first tape (``eval_impl``, the
    same file). In the replays the top layer's recompute starts while the head's
    backward still holds its B·T·V buffers (a checkpointed Qwen2, L = 6, T = 512: the
    peak is the recomputed q/k/v ``AddMM`` beside the logits' soft-max and gradient), and
    deep in the backward the largest moment has only the layers not yet reached keeping
    their input. A rule of one layer's working set on top of the plain step's moment
    (below) adds a whole layer's saved set to the head's moment, where only part of the
    recompute is: it overshot measured compiled steps by 4–13%.

    So for :data:`CKPT_STRUCTURES` the counts are read off replays of the checkpointed
    step (:mod:`introspect.measure.mlx_replay_ckpt` builds ``mx.checkpoint``'s graph
    traceably; ``python benchmarks/mlx_derive_ckpt.py``, keys ``…/ckpt``) exactly as the
    plain step's are. For the other structures (and a key not derived), the rule from
    the source alone, not replayed: each layer keeps its input (one B·T·d tensor in the
    activations' dtype) and one layer's forward-and-backward working set exists at a
    time — a plain candidate's per-layer activation counts become fixed (that one
    layer), its weight-sized counts stay per layer."""
    from introspect.refined.mlx_counts import CKPT_DATA, candidates, structure_counts

    derived = structure_counts(structure, CKPT_DATA).get(
        key(structure, dtype, is_compiled) + "/ckpt"
    )
    if derived:
        return list(derived)
    s = 2 if dtype == "bf16" else 4
    out: list[Candidate | Checkpointed] = []
    for c in candidates(key(structure, dtype, is_compiled)):
        # One layer's working set is the per-layer slope of the main depths (L = 4–32,
        # each stretch 6 or more layers wide): a stretch one layer wide (L = 3→4) carries
        # the scheduler's shift of a few ops at one depth as if it were a layer's.
        deep = _record.replace(c, shallow={}, between={})
        per, fixed = segment(deep, max(layers, DEPTHS[0]))
        layer = {k: v for k, v in per.items() if k in WEIGHT_KINDS}
        for k, v in per.items():
            if k not in WEIGHT_KINDS:
                fixed[k] = fixed.get(k, 0) + v  # the one layer recomputed
        layer["B·T·d"] = layer.get("B·T·d", 0) + s  # each layer's input, kept
        out.append(Checkpointed(c.phase, c.op, layer, fixed))
    return out


def applies(setup: TrainingSetup, spec: ModelSpec | None = None) -> bool:
    """Whether the derived counts describe this step (:func:`introspect.mlx_setups.
    step_derived`: MLX, full fine-tuning with Adam or AdamW, a standard cross-entropy,
    one device, nothing offloaded — or mlx-lm's LoRA/DoRA, :func:`lora_applies`). Other
    MLX full fine-tuning setups (SGD, sharding) keep torch's moments, which MLX's graph
    does not follow — unmodelled here. With ``spec``, a LoRA step is derived where
    :func:`lora_not_derived` has nothing to say (the structure's counts, for its keys);
    where it has, :func:`introspect.refined.execution_estimate` refuses it in that one
    line and ``introspect profile`` answers with the MLX dry run — never torch's moments."""
    if spec is not None and setup.finetune == "lora" and setup.framework in ("mlx", "mlx_compiled"):
        return not lora_not_derived(spec, setup)
    if not step_derived(setup):
        return False
    # DoRA outside the derived structures is refused in moments (mlx_dora.check), never
    # given torch's moments.
    return (
        setup.finetune not in ("lora", "dora")
        or spec is None
        or setup.finetune == "dora"
        or structure_of(spec, setup) in LORA_STRUCTURES
    )


#: The structures whose LoRA step is derived (``python benchmarks/mlx_derive.py --lora``
#: for the first three, ``--lora STRUCTURE`` for the others): every nn.Linear of each
#: block adapted, mlx-lm's default keys. Others: :func:`lora_not_derived`.
LORA_STRUCTURES = (
    *("llama", "llama-untied", "qwen2"),
    *("qwen3", "gemma3_text", "phi", "phi3", "olmo2"),
    *("gpt2", "gemma", "gemma2", "starcoder2"),
)

#: mlx-lm's LoRA on named linears only (``lora_parameters.keys``; the names sorted) →
#: the structures whose step with those keys is derived (``python
#: benchmarks/mlx_derive.py --lora-keys NAMES STRUCTURE ...``, counts keys
#: ``…/lora/<names>``). Other keys, or these keys on another structure:
#: :func:`lora_not_derived`.
NAMED_KEYS: dict[tuple[str, ...], tuple[str, ...]] = {
    # mlx-tune's and peft's default (q_proj, v_proj), and the attention's four
    ("q_proj", "v_proj"): ("llama", "llama-untied", "qwen2", "qwen3"),
    ("k_proj", "o_proj", "q_proj", "v_proj"): ("llama", "llama-untied", "qwen2", "qwen3"),
}


#: The structures MLX's DoRA step was checked on (``benchmarks/mlx_dora.py``): DoRA's
#: terms sit over these structures' LoRA counts; elsewhere it is refused, not guessed.
DORA_STRUCTURES = ("llama", "llama-untied", "qwen2")


def lora_keys(spec: ModelSpec, setup: TrainingSetup) -> tuple[str, ...]:
    """mlx-lm's ``keys`` for ``setup.lora_targets``, sorted: ``()`` for mlx-lm's default
    (``all-linear``, or every linear of the block named: ``linear_to_lora_layers`` in
    ``mlx_lm/tuner/utils.py`` converts the same modules either way), else the block's
    linears named (:func:`introspect.refined.lora.targets`; mlx-lm matches each against
    the last name of a block's module paths, ``self_attn.q_proj`` for ``q_proj``:
    :func:`introspect.measure.mlx_lm_models.lora_keys`)."""
    if "all-linear" in setup.lora_targets:
        return ()
    from introspect.refined.lora import linear_shapes, targets

    chosen = tuple(sorted(targets(spec, setup)))
    return () if set(chosen) == set(linear_shapes(spec)) else chosen


def counts_key(spec: ModelSpec, setup: TrainingSetup) -> str:
    """The counts' key of the step (:func:`key`): the structure, dtype and compilation,
    and for LoRA/DoRA its keys (:func:`lora_keys`)."""
    from introspect.refined.mlx_dora import is_adapter

    lora = is_adapter(setup)
    keys = lora_keys(spec, setup) if lora else ()
    return key(structure_of(spec, setup), dtype_of(setup), compiled(setup), lora, keys)


def checkpointed_lora(spec: ModelSpec, setup: TrainingSetup) -> tuple[Candidate, ...]:
    """The checkpointed LoRA candidates of the step (``…/lora/ckpt``, ``python
    benchmarks/mlx_derive_ckpt.py --lora``; empty where the file has no such key)."""
    from introspect.refined.mlx_counts import CKPT_DATA, structure_counts

    structure = structure_of(spec, setup)
    return structure_counts(structure, CKPT_DATA).get(counts_key(spec, setup) + "/ckpt", ())


#: What answers a LoRA step the counts do not describe (:func:`lora_not_derived`).
DRY_RUN = (
    "answered by the MLX dry run (`introspect profile` runs it, or `introspect measure "
    "SOURCE --framework mlx --impl mlx-lm --device fake --finetune lora`)"
)


def lora_not_derived(spec: ModelSpec, setup: TrainingSetup) -> str:
    """The one line for mlx-lm's LoRA where no counts describe the step (empty where they
    do): a structure outside :data:`LORA_STRUCTURES`, named keys not derived for the
    structure (:data:`NAMED_KEYS`), checkpointing (``grad_checkpoint``) on a structure or
    keys its checkpointed counts are not read for (:data:`LORA_CKPT_STRUCTURES`, every
    linear), or a flag no LoRA counts cover
    (:func:`introspect.mlx_setups.lora_unmodelled_flag`: SGD, a dropout under
    checkpointing, ...). No
    other structure's or keys' counts and no torch accounting stand in for it (torch's
    moments, which did: 0.775–1.378 of measured steps of the structures derived since,
    ``benchmarks/results/mlx-lora.md``; 2.3× the published mlx-tune Qwen3-0.6B q/v
    row's bound, ``benchmarks/results/metal-published.md``); the MLX dry run of the
    family's class answers (:mod:`introspect.measure.mlx_lora_dry_run`)."""
    if setup.framework not in ("mlx", "mlx_compiled") or setup.finetune != "lora":
        return ""
    flag = lora_unmodelled_flag(setup)
    if flag and flag.startswith("--impl"):
        return (
            f"LoRA counts not derived with {flag}: MLX's LoRA is mlx-lm's LoRALinear "
            "(mlx_lm/tuner/lora.py), read off mlx-lm's classes only; " + DRY_RUN
        )
    structure = structure_of(spec, setup)
    untied = " (untied)" if structure.endswith("-untied") else ""
    name = f"mlx-lm's {STRUCTURES[structure][0]}{untied}"
    if structure not in LORA_STRUCTURES:
        return f"LoRA counts not derived for {name}: " + DRY_RUN
    if flag:
        return f"LoRA counts not derived for {name} with {flag}: " + DRY_RUN
    keys = lora_keys(spec, setup)
    if setup.activation_checkpointing and (
        structure not in LORA_CKPT_STRUCTURES or keys or not checkpointed_lora(spec, setup)
    ):
        # checkpointed LoRA's counts: every linear of LORA_CKPT_STRUCTURES' blocks only
        derived = ", ".join(
            STRUCTURES[s][0] + (" (untied)" if s.endswith("-untied") else "")
            for s in LORA_CKPT_STRUCTURES
        )
        what = f" with keys {', '.join(keys)}" if keys else ""
        return (
            f"LoRA counts not derived for {name}{what} (checkpointed: every linear of "
            f"{derived} only) with --checkpointing: " + DRY_RUN
        )
    if keys and structure not in NAMED_KEYS.get(keys, ()):
        derived = [", ".join(k) for k, names in NAMED_KEYS.items() if structure in names]
        return (
            f"LoRA counts not derived for {name} with keys {', '.join(keys)} (derived: "
            f"every linear of the block{''.join('; ' + d for d in derived)}): " + DRY_RUN
        )
    return ""
