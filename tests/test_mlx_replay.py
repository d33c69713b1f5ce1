"""The MLX replay: real small MLX steps against the replayed graph, and the replay's
invariants (its order is a topological order, it ends where the next step begins, a
compiled graph fuses, a dry run allocates nothing).

Tolerance: a real step's peak depends on how far the worker thread is behind the main
thread, which the replay bounds from both sides — ``worker="caught_up"`` (every task run
at once) and ``"behind"`` (as far behind as MLX's scheduler allows). A measured peak must
fall between them, within 2% (MLX's buffer cache rounds sizes up by less than a page
per buffer).
"""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

import mlx.optimizers as optim  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402
from specs import VARIANTS  # noqa: E402

from introspect.measure import mlx_model, mlx_step  # noqa: E402
from introspect.measure import mlx_replay as mr  # noqa: E402
from introspect.measure.mlx_replay_eval import SYNC, eval_order, replay  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402
from introspect.spec import ModelSpec  # noqa: E402

pytestmark = pytest.mark.slow

SLACK = 0.02


def held_before() -> int:
    """Bytes of arrays earlier tests in this process still hold: MLX's active memory and
    peak count them too, the replay of this step's graph does not (a `measure` process
    starts from none). MLX's buffer cache is emptied too: a cached buffer an allocation
    reuses counts at its own, possibly larger, length (``common/buffer_cache.h``), so
    earlier tests' leftovers would inflate this step's peak."""
    import gc

    gc.collect()
    mx.clear_cache()
    return mx.get_active_memory()


def llama(compiled: bool, dtype=None, family: str = "llama"):
    cfg = mr.family_config(family, d=64, layers=2, ffn=128, heads=4, kv=2, vocab=512)
    model = mr.mlx_lm_model(cfg, dtype)
    optimizer = optim.Adam(learning_rate=1e-4)
    optimizer.init(model.trainable_parameters())
    step = mr.make_step(model, optimizer, mr.mlx_lm_loss, compiled)
    return model, optimizer, step, mr.mlx_lm_batch(512, 2, 64)


def bounds(model, optimizer, step, batch, compiled):
    graph = mr.graph_of(model, optimizer, step, batch, compiled)
    return graph, replay(graph, worker="caught_up"), replay(graph)


@pytest.mark.parametrize(
    "family,compiled,dtype",
    [
        ("llama", False, None),
        ("llama", True, None),
        ("qwen3", False, "bf16"),
        ("gpt2", True, None),
    ],
)
def test_measured_peak_lies_within_the_replays_bounds(family, compiled, dtype):
    held = held_before()
    model, optimizer, step, batch = llama(compiled, mx.bfloat16 if dtype else None, family)
    _, low, high = bounds(model, optimizer, step, batch, compiled)
    base, peaks = mr.measure(model, optimizer, step, batch, repeats=2)
    assert abs(base - held - high.baseline_bytes) < 1024  # the state and batch, to the scalar
    peak = max(peaks) - held
    assert low.peak_bytes * (1 - SLACK) <= peak <= high.peak_bytes * (1 + SLACK)


def test_reference_model_step_lies_within_the_bounds():
    held = held_before()
    spec = VARIANTS["standard"]
    model = mlx_model.build(spec)
    optimizer = optim.Adam(learning_rate=1e-4)
    optimizer.init(model.trainable_parameters())
    step = mr.make_step(model, optimizer, mlx_step.loss_fn, compiled=False)
    batch = tuple(mx.random.randint(0, 512, (2, 64), key=mx.random.key(i)) for i in (1, 2))
    mx.eval(*batch)
    _, low, high = bounds(model, optimizer, step, batch, False)
    _, peaks = mr.measure(model, optimizer, step, batch, repeats=2)
    peak = max(peaks) - held
    assert low.peak_bytes * (1 - SLACK) <= peak <= high.peak_bytes * (1 + SLACK)


def test_eval_order_is_topological_and_complete():
    model, optimizer, step, batch = llama(False)
    graph = mr.graph_of(model, optimizer, step, batch, False)
    order = eval_order(graph)
    assert order[-1] == SYNC
    nodes = [graph.producer[a] for a in order[:-1]]
    assert sorted(nodes) == list(range(len(graph.nodes)))  # each op exactly once
    done = set(graph.held) | set(graph.released)
    for a in order[:-1]:
        node = graph.nodes[graph.producer[a]]
        assert all(i in done for i in node.inputs)
        done.update(node.outputs)


def test_step_ends_where_the_next_begins_and_peak_holds_the_state():
    model, optimizer, step, batch = llama(False)
    result = mr.predict(model, optimizer, step, batch, False)
    state = sum(v.nbytes for _, v in tree_flatten([model.parameters(), optimizer.state]))
    # Adam replaces every parameter, m and v by arrays of the same size.
    assert abs(result.final_bytes - result.baseline_bytes) < 1024
    assert result.baseline_bytes >= state
    assert result.peak_bytes > result.baseline_bytes


def test_compiling_fuses_elementwise_chains():
    model, optimizer, step, batch = llama(True)
    plain = mr.graph_of(model, optimizer, step, batch, False)
    fused = mr.graph_of(model, optimizer, step, batch, True)
    compiled = [n for n in fused.nodes if n.name == "Compiled"]
    assert compiled and len(fused.nodes) < len(plain.nodes)
    for node in compiled:  # one kernel, one output shape
        assert len({fused.shapes[o] for o in node.outputs}) == 1
    # Adam's m, v and new weight leave one kernel together.
    assert any(len(n.outputs) == 3 for n in compiled)


def test_dry_run_allocates_nothing():
    spec = ModelSpec(hidden_size=1024, num_hidden_layers=4, num_attention_heads=8, vocab_size=32000)
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    m = mr.dry_run(spec, TrainingSetup(seq_len=512, framework="mlx"))
    assert mx.get_peak_memory() - before < 1_000_000  # scalars, not 100M+ parameters
    assert m.peak_bytes > 16 * m.n_params  # weights, Adam's m and v, gradients at least
    assert m.device == "fake"


def chain(held: bool, n: int = 5, shape=(256, 256)):
    """A graph of ``n`` Exp ops on one existing array, held by Python or not."""
    from introspect.measure.mlx_replay_trace import Graph, Node

    g = Graph()
    x = g.add_array(shape, "float32")
    (g.held if held else g.released).append(x)
    a = x
    for _ in range(n):
        b = g.add_array(shape, "float32")
        g.producer[b] = len(g.nodes)
        g.nodes.append(Node("Exp", [], [a], [b]))
        a = b
    g.outputs = [a]
    return g


def test_a_chain_of_elementwise_ops_reuses_its_input_buffer():
    size = 256 * 256 * 4
    released = replay(chain(held=False))
    assert released.peak_bytes == released.baseline_bytes == size  # donated all along
    held = replay(chain(held=True))
    assert held.peak_bytes == 2 * size  # Python keeps x: one new buffer, then donated
    assert held.final_bytes == 2 * size


def test_a_second_reader_blocks_donation():
    from introspect.measure.mlx_replay_trace import Node

    g = chain(held=False, n=1)
    x, y = g.released[0], g.outputs[0]
    z = g.add_array(g.shapes[x], "float32")
    g.producer[z] = len(g.nodes)
    g.nodes.append(Node("Multiply", [], [x, y], [z]))  # x read again after Exp
    g.outputs = [z]
    size = 256 * 256 * 4
    # Exp cannot take x (Multiply still reads it); Multiply then takes x or y.
    assert replay(g).peak_bytes == 2 * size


def test_measure_cli_runs_the_mlx_dry_run(capsys):
    from introspect.cli import main

    argv = ["measure", "--layers", "2", "--d-emb", "128", "--heads", "4", "--vocab", "1024"]
    argv += ["--framework", "mlx-compiled", "--device", "fake", "--seq", "64", "--json"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert '"device": "fake"' in out and "mlx_replay" in out
