"""Corpus cases for ``--config FILE`` (issue 21): trainers' configs that are refused with
one line naming the file and the key, and good ones that answer (and differ from the
same call without ``--config``)."""

from __future__ import annotations

import json

from .cases import BUNDLED, Case

F = "train.yaml"
J = "train.json"
DS = "ds.json"
#: A TRL SFT config as a user writes it (TRL's own CLI example's shape).
SFT = b"model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: stanfordnlp/imdb\n"
TA = {"output_dir": "out", "per_device_train_batch_size": 2, "bf16": True}
#: measure of a tiny Llama-style shape (no SOURCE: the file names no model either).
MEASURE = ("measure", "--layers", "2", "--d-emb", "64", "--heads", "4", "--vocab", "128")
MEASURE += ("--llama", "--seq", "8")


def _c(case_id, argv, files=None, names=(), expect="refused", **kw) -> Case:
    return Case(case_id, tuple(argv), dict(files or {}), tuple(names), expect=expect, **kw)


def _ta(**changes) -> bytes:
    return json.dumps({**TA, **changes}).encode()


def trainer_config_cases() -> list[Case]:
    p = ("profile", "--config")
    fit = ("fit", "--gpu", "h200", "--config")
    out = [
        _c(
            "tcfg/profile-trl-sft",
            (*p, f"{{dir}}/{F}"),
            {F: SFT},
            expect="ok",
            baseline=("profile", BUNDLED),
        ),
        _c(
            "tcfg/fit-trl-sft",
            (*fit, f"{{dir}}/{F}"),
            {F: SFT},
            expect="ok",
            baseline=("fit", BUNDLED, "--gpu", "h200"),
        ),
        _c(
            "tcfg/profile-trainer-json-with-source",
            ("profile", BUNDLED, "--config", f"{{dir}}/{J}"),
            {J: _ta()},
            expect="ok",
            baseline=("profile", BUNDLED),
        ),
        _c("tcfg/missing-file", (*p, "{dir}/nope.yaml"), names=("nope.yaml",)),
        _c("tcfg/folder", (*p, "{dir}"), {F: SFT}, names=("{dir}",)),
        _c("tcfg/yaml-syntax", (*p, f"{{dir}}/{F}"), {F: b"a: [1, 2\n"}, names=(F,)),
        _c("tcfg/json-syntax", (*p, f"{{dir}}/{J}"), {J: b'{"a": 1,'}, names=(J,)),
        _c("tcfg/not-a-mapping", (*p, f"{{dir}}/{F}"), {F: b"- 1\n- 2\n"}, names=(F,)),
        _c("tcfg/empty", (*p, f"{{dir}}/{F}"), {F: b""}, names=(F,)),
        _c("tcfg/binary", (*p, f"{{dir}}/{F}"), {F: b"\xff\xfe\x00\x01"}, names=(F,)),
        _c("tcfg/unknown-format", (*p, f"{{dir}}/{F}"), {F: b"foo: 1\nbar: 2\n"}, names=(F,)),
        _c("tcfg/fifo", (*p, f"{{dir}}/{F}"), names=(F,), fifos=(F,)),
        _c(
            "tcfg/wrong-type",
            (*p, f"{{dir}}/{J}"),
            {J: _ta(per_device_train_batch_size="eight")},
            names=("per_device_train_batch_size",),
        ),
        _c(
            "tcfg/zero-batch",
            (*p, f"{{dir}}/{J}"),
            {J: _ta(per_device_train_batch_size=0)},
            names=("per_device_train_batch_size",),
        ),
        _c(
            "tcfg/unknown-option",
            (*p, f"{{dir}}/{J}"),
            {J: _ta(per_device_train_batchsize=4)},
            names=("per_device_train_batchsize",),
        ),
        _c(
            "tcfg/unknown-optim",
            ("profile", BUNDLED, "--config", f"{{dir}}/{J}"),
            {J: _ta(optim="adamw_nonesuch")},
            names=("optim",),
        ),
        _c(
            "tcfg/unmodelled-optim",
            ("profile", BUNDLED, "--config", f"{{dir}}/{J}"),
            {J: _ta(optim="lion_32bit")},
            names=("optim",),
        ),
        _c(
            "tcfg/bf16-and-fp16",
            ("profile", BUNDLED, "--config", f"{{dir}}/{J}"),
            {J: _ta(fp16=True)},
            names=("bf16",),
        ),
        _c("tcfg/no-model", (*p, f"{{dir}}/{J}"), {J: _ta()}, names=(J,)),
        _c("tcfg/fit-no-model", (*fit, f"{{dir}}/{J}"), {J: _ta()}, names=(J,)),
        _c(
            "tcfg/auto-without-trainer",
            (*p, f"{{dir}}/{DS}"),
            {DS: b'{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}'},
            names=("train_micro_batch_size_per_gpu",),
        ),
        _c(
            "tcfg/deepspeed-mismatch",
            ("profile", BUNDLED, "--devices", "2", "--config", f"{{dir}}/{J}", f"{{dir}}/{DS}"),
            {
                J: _ta(),
                DS: b'{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}',
            },
            names=("train_micro_batch_size_per_gpu",),
        ),
        _c(  # ZeRO-2/3 may be priced on one device; FSDP needs the count
            "tcfg/fsdp-without-devices",
            ("profile", BUNDLED, "--config", f"{{dir}}/{J}"),
            {J: _ta(fsdp="full_shard auto_wrap")},
            names=("--devices",),
        ),
        _c(
            "tcfg/two-trainer-configs",
            ("profile", BUNDLED, "--config", f"{{dir}}/{J}", f"{{dir}}/{F}"),
            {J: _ta(), F: SFT},
            names=(F, J),
        ),
        _c(
            "tcfg/list-with-config",
            ("profile", "--list", "--config", f"{{dir}}/{F}"),
            {F: SFT},
            names=("--config",),
        ),
        _c("tcfg/config-without-files", ("profile", BUNDLED, "--config"), names=("--config",)),
        # measure --config: the real Trainer with the file's TrainingArguments
        _c(
            "tcfg/measure-trainer-json",
            (*MEASURE, "--device", "cpu", "--config", f"{{dir}}/{J}"),
            {J: _ta(bf16=False, optim="sgd")},
            expect="ok",
        ),
        _c(
            "tcfg/measure-trainer-json-fake",
            (*MEASURE, "--device", "fake", "--config", f"{{dir}}/{J}"),
            {J: _ta(optim="sgd")},
            names=("--trainer", "--device"),
        ),
        _c(
            "tcfg/measure-unknown-format",
            (*MEASURE, "--device", "cpu", "--config", f"{{dir}}/{F}"),
            {F: b"foo: 1\nbar: 2\n"},
            names=(F,),
        ),
    ]
    return out
