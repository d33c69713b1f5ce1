"""The mirrored losses (introspect/measure/losses.py) against the libraries' own source
files: the same measured step with torchtune's and TRL's code swapped in, peak bytes
compared, real CPU and dry run.

Run:  pip download --no-deps -d WHEELS torchtune==0.6.1 trl==1.16.0
      (cd WHEELS && for w in *.whl; do unzip -qo $w -d src; done)
      .venv/bin/python benchmarks/losses_sources.py WHEELS/src

torchtune's ``modules/loss/ce_chunked_output_loss.py`` imports only torch (its package
imports torchao, so the file is loaded by path); TRL's ``kernels/chunked_logprob.py``
imports torch and transformers, and its backward one helper of ``trl.trainer.utils``
(datasets, pandas, accelerate), stubbed as ``nullcontext``, which it is without DeepSpeed
ZeRO-3. Liger's ops import triton and have no torch path; not compared. Measured
(2026-12-02, torch 2.13, Llama d=64 V=40000 B=1 T=100, bf16/amp/fp32, cpu and fake):
every peak equal, byte for byte.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types


def load(name: str, path: str):
    """A module from one source file, registered under ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def package(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []
    sys.modules[name] = module
    return module


def main(src: str) -> None:
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import hf_models, losses
    from introspect.setup import TrainingSetup

    tt = load("tt_ce", f"{src}/torchtune/modules/loss/ce_chunked_output_loss.py")
    for name in ("trl", "trl.kernels", "trl.trainer"):
        package(name)
    utils = types.ModuleType("trl.trainer.utils")
    utils.maybe_gather_lm_head_ctx = lambda weight, bias: contextlib.nullcontext()
    sys.modules["trl.trainer.utils"] = utils
    clp = load("trl.kernels.chunked_logprob", f"{src}/trl/kernels/chunked_logprob.py")

    class RealTRL:
        @staticmethod
        def apply(hidden, weight, bias, targets, temperature, chunk_size, outputs):
            lp, entropy, _, _, top1 = clp.ChunkedLogProbFunction.apply(
                hidden, weight, bias, targets, temperature, chunk_size, None, 1.0, outputs
            )
            return lp, entropy, top1

    raw = dict(
        model_type="llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=160, vocab_size=40000,
    )  # fmt: skip
    spec = spec_from_config(raw, source="llama-small")

    def peak(ce: str, precision: str, device: str) -> int:
        s = TrainingSetup(
            batch_size=1, seq_len=100, implementation="transformers", loop="labels",
            precision=precision, cross_entropy=ce, device="cpu",
        )  # fmt: skip
        return hf_models.measure(raw, "t", spec, s, device=device, census=False)[0].peak_bytes

    mirror_tt, mirror_trl = losses.ce_with_chunked_output, losses.ChunkedLogProb
    for precision in ("bf16", "amp", "fp32"):
        for device in ("cpu", "fake"):
            a = peak("torchtune", precision, device)
            losses.ce_with_chunked_output = lambda lg, lb: tt.CEWithChunkedOutputLoss()(lg, lb)
            b = peak("torchtune", precision, device)
            losses.ce_with_chunked_output = mirror_tt
            c = peak("trl", precision, device)
            losses.ChunkedLogProb = RealTRL
            d = peak("trl", precision, device)
            losses.ChunkedLogProb = mirror_trl
            print(
                f"{precision} {device}: torchtune mirror {a} source {b} equal {a == b} | "
                f"trl mirror {c} source {d} equal {c == d}"
            )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
