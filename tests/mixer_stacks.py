"""What the state-space and hybrid stack tests share (tests/test_ssm.py, test_mamba1.py,
test_hybrids.py): the exact count against transformers' meta build, the three setups each
stack is checked in, and one row of the dry run of the real class beside the closed form
(``introspect measure --device fake --impl transformers --json``)."""

from __future__ import annotations

import json

import torch
import transformers
from introspect.adapters.hf_config import spec_from_config

from introspect.cli import main

#: The setups every stack's closed form is held to ±3% of its dry run in.
SETUPS = {
    "fp32 eager": ["--precision", "fp32", "--attention", "eager"],
    "autocast + checkpointing": ["--precision", "amp", "--checkpointing"],
    "bf16 sdpa": ["--precision", "bf16", "--attention", "memory-efficient"],
}


def count_is_the_meta_build(config: dict):
    """The spec read from ``config``: modelled, and its count that of the meta build."""
    spec = spec_from_config(dict(config))
    keys = {k: v for k, v in config.items() if k != "model_type"}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(config["model_type"], **keys)
        )
    assert not spec.unmodelled
    assert spec.n_params == sum(p.numel() for p in model.parameters())
    return spec


def measured(tmp_path, capsys, config: dict, flags: list[str], B: int, T: int) -> dict:
    """``introspect measure``'s row for ``config`` (written under ``tmp_path``): the dry
    run of transformers' class beside the closed form."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    args = ["measure", str(path), "--device", "fake", "--impl", "transformers"]
    args += ["--seq", str(T), "--batch", str(B), "--json", *flags]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)["rows"][0]


def one_line_error(capsys) -> str:
    """The command's stderr, which must be one line."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]
