"""`introspect fit`: budgets, devices, the largest T and B, the ranked changes and the
combinations, checked against the refined estimate they are searched over."""

from __future__ import annotations

import json

import pytest
from specs import QWEN25_05B

from introspect import fit, refined
from introspect.cli import main
from introspect.devices import DEVICES, lookup
from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup
from introspect.units import GB, GiB, parse_memory

SPEC = QWEN25_05B.replace(num_parameters=494_032_768)


def run_json(capsys, *argv):
    assert main(["fit", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_memory_units():
    assert parse_memory("80GB") == 80 * GB
    assert parse_memory("80GiB") == 80 * GiB
    assert parse_memory("1.5 tb") == 1_500_000_000_000
    for bad in ("80", "-5GB", "0GB", "80 parsecs", "lots"):
        with pytest.raises(ValueError):
            parse_memory(bad)


def test_devices_in_their_makers_units():
    assert lookup("H100-80GB").memory_bytes == 80 * GiB
    assert lookup("m2-8gb").name == "mac-8gb"
    assert lookup("m3-max-128gb").memory_bytes == 128 * GiB
    assert all(d.source and d.maker_figure for d in DEVICES)
    with pytest.raises(IntrospectError, match="known: a100-40gb"):
        lookup("v100")


@pytest.mark.parametrize("field", ["seq_len", "batch_size"])
def test_largest_is_the_edge_of_the_budget(field):
    setup = TrainingSetup(seq_len=1024, precision="bf16", activation_dtype="bf16")
    budget = 30 * GB
    n = fit.largest(SPEC, setup, budget, field)
    assert n is not None and n > 1
    assert fit.peak(SPEC, setup.replace(**{field: n})) <= budget
    assert fit.peak(SPEC, setup.replace(**{field: n + 1})) > budget


def _bisected(need, budget: int) -> int | None:
    """The answer by plain doubling and bisection (the search before it guessed)."""
    if need(1) > budget:
        return None
    lo, hi = 1, 2
    while hi <= fit.SEARCH_LIMIT and need(hi) <= budget:
        lo, hi = hi, hi * 2
    if hi > fit.SEARCH_LIMIT:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if need(mid) <= budget else (lo, mid)
    return lo


#: Non-decreasing needs of x = T or B, the shapes a step's peak takes and some it
#: does not: flat then rising (the state's moment, then the activations'), a line, a
#: parabola, a kink, steps, a jump, a plateau at the budget, and a staircase.
NEEDS = {
    "flat-then-line": lambda x: max(10_000, 37 * x + 1_000),
    "line": lambda x: 1_000 + 12_345 * x,
    "parabola": lambda x: 5_000 + 40 * x + 3 * x * x,
    "kink": lambda x: 2_000 + (5 * x if x < 3_000 else 15_000 + 900 * (x - 3_000)),
    "steps": lambda x: 64 * -(-x // 512) + 100,
    "jump": lambda x: 10 if x < 77_777 else 10**12,
    "cube": lambda x: x**3 // 1_000 + 7,
    "staircase": lambda x: (x // 1_000) * 1_000,
}


@pytest.mark.parametrize("shape", NEEDS)
@pytest.mark.parametrize("start", [1, 3, 1024, 100_000, 1 << 24])
def test_largest_guesses_but_answers_as_bisection_does(shape, start):
    need_of = NEEDS[shape]
    for budget in (5, 12_000, 10**6, 123_456_789, 10**15):
        asked: list[int] = []

        def need(spec, setup, need_of=need_of, asked=asked):
            asked.append(setup.seq_len)
            return need_of(setup.seq_len)

        got = fit.largest(SPEC, TrainingSetup(seq_len=start), budget, "seq_len", need)
        assert got == _bisected(need_of, budget), (shape, start, budget)
        # bounded by the bracket's size, not the values: about twice bisection's steps
        assert len(asked) <= 2 * 2 * 25 + 4, (shape, start, budget, len(asked))


def test_largest_asks_few_needs_of_a_real_step():
    setup = TrainingSetup(seq_len=4096, precision="bf16", activation_dtype="bf16")
    asked = []

    def need(spec, s):
        asked.append(s.seq_len)
        return fit.peak(spec, s)

    n = fit.largest(SPEC, setup, 30 * GB, "seq_len", need)
    assert n == _bisected(lambda T: fit.peak(SPEC, setup.replace(seq_len=T)), 30 * GB)
    assert len(asked) <= 8, asked  # bisection asks 2·log₂(n) ≈ 30


def test_largest_is_none_when_nothing_fits():
    assert fit.largest(SPEC, TrainingSetup(), 1 * GB, "seq_len") is None


def test_ranked_changes_are_the_estimates_of_their_setups():
    setup = TrainingSetup(seq_len=4096, attention="eager")  # memory-efficient is a change
    budget = 20 * GB
    base = fit.peak(SPEC, setup)
    rows = fit.rank_changes(SPEC, setup, budget, fit.changes(8))
    assert {r.label for r in rows} >= {
        "memory-efficient attention",
        "activation checkpointing",
        "8-bit Adam",
        "LoRA r=16 (all linear)",
        "QLoRA r=16 (NF4 base, double quant)",
    }
    assert [r.need for r in rows] == sorted(r.need for r in rows)
    for r in rows:
        assert r.need == refined.estimate(SPEC, r.setup).total
        assert r.saving == base - r.need > 0
        assert r.fits == (r.need <= budget)


def test_combinations_fit_and_are_minimal():
    setup = TrainingSetup(seq_len=4096)
    budget = 12 * GB
    candidates = fit.changes(8)
    free, rows = fit.combinations(SPEC, setup, budget, candidates)
    assert rows and all(r.fits and r.need <= budget for r in rows)
    by_label = {c.label: c for c in candidates}
    start = setup
    for c in free:
        start = c.apply(start)
    for r in rows:
        chosen = [by_label[x] for x in r.label.split(" + ")]
        for drop in chosen:
            s = start
            for c in chosen:
                if c is not drop:
                    s = c.apply(s)
            assert fit.peak(SPEC, s) > budget, f"{r.label} without {drop.label} still fits"


def test_fit_command_json(capsys):
    out = run_json(capsys, "Qwen/Qwen2.5-0.5B", "--budget", "24GB", "--seq", "4096")
    assert out["budget_bytes"] == 24 * GB
    assert out["fits"] == (out["need_bytes"] <= out["budget_bytes"])
    assert out["changes"] and out["combinations"]
    assert all(c["fits"] for c in out["combinations"])


def test_fit_on_a_gpu_counts_the_device_overhead(capsys):
    out = run_json(capsys, "Qwen/Qwen2.5-0.5B", "--gpu", "a100-40gb")
    assert out["device"]["memory_bytes"] == 40 * GiB
    assert out["need_bytes"] > out["peak_bytes"]


def test_fit_text(capsys):
    assert main(["fit", "Qwen/Qwen2.5-0.5B", "--budget", "16GiB"]) == 0
    text = capsys.readouterr().out
    assert "largest T at B=1" in text and "changes, one at a time" in text


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--budget", "80"], "--budget"),
        (["--budget=-80GB"], "positive"),
        (["--gpu", "v100"], "known: a100-40gb"),
        (["--budget", "80GB", "--lora-rank", "5000"], "--lora-rank"),
        (["--budget", "80GB", "--lora-targets", "c_attn"], "--lora-targets"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, words):
    assert main(["fit", "Qwen/Qwen2.5-0.5B", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err


def test_search_cap_comes_from_the_model_and_bounds_the_search():
    """T is searched up to the model's context window where the config gives one (else
    the --seq sanity bound), B up to the --batch bound: the answer at a budget nothing
    reaches is the cap, in a number of needs set by the cap's size, not the budget's."""
    from introspect.adapters import resolve

    from introspect.bounds import SETUP_LIMITS

    oss = resolve("openai/gpt-oss-20b").spec
    cap, source = fit.search_cap(oss, "seq_len")
    assert cap == oss.max_position_embeddings == 131072 and "max_position_embeddings" in source
    unstated = SPEC.replace(max_position_embeddings=None)
    assert fit.search_cap(unstated, "seq_len")[0] == SETUP_LIMITS["seq_len"][0]
    assert fit.search_cap(SPEC, "batch_size")[0] == SETUP_LIMITS["batch_size"][0]
    for budget in (10**15, 10**30):
        asked = []

        def need(spec, setup, asked=asked):
            asked.append(setup.seq_len)
            return fit.peak(spec, setup)

        cap = 5000
        assert fit.largest(SPEC, TrainingSetup(), budget, "seq_len", need, limit=cap) == cap
        assert max(asked) == cap and len(asked) <= 2 * cap.bit_length()


def test_fit_says_when_the_answer_is_the_search_cap(capsys):
    assert main(["fit", "openai/gpt-oss-20b", "--budget", "1e9GB"]) == 0
    text = capsys.readouterr().out
    assert "fits at every T up to the search cap 131,072" in text
    assert "largest T at B=1: 131,072" not in text
    out = run_json(capsys, "openai/gpt-oss-20b", "--budget", "1e9GB")
    assert out["search_caps"]["seq"] == {
        "cap": 131072,
        "source": "the model's max_position_embeddings",
        "reached": True,
    }
    out = run_json(capsys, "Qwen/Qwen2.5-0.5B", "--budget", "24GB")
    assert not out["search_caps"]["seq"]["reached"]
    assert out["largest_seq"] < out["search_caps"]["seq"]["cap"]


def test_fit_checks_the_setup_before_the_budget(capsys):
    """A flag that does not apply is the line shown, even with no budget given; with a
    valid setup the missing budget is one line."""
    assert main(["fit", "Qwen/Qwen2.5-0.5B", "--framework", "mlx", "--offload", "optimizer"]) == 2
    assert "--offload optimizer is torch-only" in capsys.readouterr().err
    assert main(["fit", "Qwen/Qwen2.5-0.5B"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--budget" in err and "--gpu" in err
    assert main(["fit", "40M", "--gpu", "m2-8gb", "--framework", "mlx", "--max-devices", "4"]) == 2
    assert "--max-devices" in capsys.readouterr().err
