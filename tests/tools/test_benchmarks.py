"""The benchmark compares like with like: given the same variables, its contenders
compute the same outputs and the same gradients. (Times are never asserted.)"""

import json
import os
import platform

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rnnlib
from benchmarks import backward, forward, linear_scan, lstm_programs, programs, run
from benchmarks.contenders import (
    BACKWARD,
    CONV_CELLS,
    DENSE_CELLS,
    FORWARD,
    OPTIMIZED,
    OPTIMIZED_AGAIN,
    build,
    inputs_for,
)
from benchmarks.run import markdown, noise_floor, targets
from tests.tolerance import assert_close, recurrent_terms

pytestmark = pytest.mark.pinned_env

SMALL = dict(B=2, T=5, I=3, H=4)
SMALL_CONV = dict(B=2, T=3, signal=(5, 5), I=2, H=3)


def _terms(config, x, *, gradient=False):
    """Rounded terms per element (tests/tolerance.py) of a contender's outputs or gradients;
    the benchmark's ConvLSTM has a 3 x 3 window."""
    window = 3 ** len(config.get("signal", ()))
    terms = (window * (config["I"] + config["H"]) + 1) * config["T"]
    return terms + (x[..., 0].size if gradient else 0)


def _assert_agrees(other, reference, config, x):
    """Two contenders give the same outputs and the same gradients, by the tolerance rule."""
    assert_close(
        other.forward(other.params, x),
        reference.forward(reference.params, x),
        terms=_terms(config, x),
    )
    assert_close(
        other.train(other.params, x),
        reference.train(reference.params, x),
        terms=_terms(config, x, gradient=True),
    )


@pytest.mark.parametrize(
    "cell, config", [(c, SMALL) for c in DENSE_CELLS] + [(c, SMALL_CONV) for c in CONV_CELLS]
)
def test_contenders_sharing_linen_variables_agree_on_outputs_and_gradients(cell, config):
    x = inputs_for(config, jax.random.key(1))
    reference = build("flax.linen", cell, config, x)
    for name in ("rnnlib", "lax.scan"):
        other = build(name, cell, config, x)
        _assert_agrees(other, reference, config, x)


@pytest.mark.parametrize("cell", DENSE_CELLS)
def test_the_nnx_contender_produces_outputs_of_the_same_shape(cell):
    x = inputs_for(SMALL, jax.random.key(1))
    nnx = build("flax.nnx", cell, SMALL, x)
    assert nnx.forward(nnx.params, x).shape == (2, 5, 4)


def test_nnx_has_no_conv_lstm_contender():
    x = inputs_for(SMALL_CONV, jax.random.key(1))
    assert build("flax.nnx", "ConvLSTMCell", SMALL_CONV, x) is None


def _report(results):
    return {
        "name": "t",
        "machine": "m",
        "versions": {"jax": "j", "flax": "f"},
        "runs": 5,
        "results": results,
        "seq_lengths_memory": [],
    }


def _entry(t):
    return {"median_s": t, "first_call_s": 2 * t}


def test_markdown_reports_ratios_against_flax_linen_and_the_targets():
    modes = {
        m: {"flax.linen": _entry(2.0), "rnnlib": _entry(1.0), "lax.scan": _entry(0.5)}
        for m in ("forward", "train")
    }
    text = markdown(_report({"cfg": {"LSTMCell": modes}}))
    # columns: linen ms | rnnlib | lax.scan | rnnlib / lax.scan | first call rnnlib / linen
    assert "| cfg | LSTMCell | 2000.0 | 0.50 | 0.25 | 2.00 | 0.50 |" in text
    assert "Geometric mean of rnnlib / flax.linen (forward): **0.50**" in text
    assert "| worst rnnlib / flax.linen, forward + backward | 0.50 | 1.00 | yes |" in text
    assert "| worst rnnlib / lax.scan, any mode | 2.00 | 1.10 | **no** |" in text


def test_a_contender_missing_for_some_cells_reads_n_a_there():
    full = {"flax.linen": _entry(2.0), "rnnlib": _entry(1.0), "flax.nnx": _entry(3.0)}
    partial = {"flax.linen": _entry(2.0), "rnnlib": _entry(4.0)}
    results = {
        "a": {"GRUCell": {"forward": full, "train": full}},
        "b": {"ConvLSTMCell": {"forward": partial, "train": partial}},
    }
    text = markdown(_report(results))
    assert "| a | GRUCell | 2000.0 | 0.50 | 1.50 | n/a | 0.50 |" in text
    assert "| b | ConvLSTMCell | 2000.0 | 2.00 | n/a | n/a | 2.00 |" in text
    worst, forward, geo, vs_scan, first = targets(results)
    assert worst[1:] == forward[1:] == (2.0, 1.0, False)
    assert geo[1] == pytest.approx(1.0) and geo[3] is False
    assert vs_scan[1:] == (None, 1.10, None)  # no lax.scan in this run
    assert first[3] is False


def test_flax_linen_again_is_the_same_program_compiled_separately():
    x = inputs_for(SMALL, jax.random.key(1))
    linen = build("flax.linen", "LSTMCell", SMALL, x)
    again = build("flax.linen:again", "LSTMCell", SMALL, x)
    expected = linen.forward(linen.params, x)
    # linen's call compiled linen's function only: again's cache is still empty, so its
    # timings are of a program of its own, as rnnlib's are.
    assert linen.forward._cache_size() == 1 and again.forward._cache_size() == 0
    # One program compiled twice: the same computation, the same bits.
    np.testing.assert_array_equal(again.forward(again.params, x), expected)
    assert again.forward._cache_size() == 1


def test_the_noise_floor_is_the_range_of_flax_linen_against_itself():
    def modes(t_again):
        entry = {
            "flax.linen": _entry(2.0),
            "rnnlib": _entry(1.0),
            "flax.linen:again": _entry(t_again),
        }
        return {"forward": entry, "train": entry}

    results = {"a": {"LSTMCell": modes(1.8)}, "b": {"GRUCell": modes(2.2)}}
    assert noise_floor(results, "train") == pytest.approx((0.9, 1.1))
    text = markdown(_report(results))
    assert "## Noise floor" in text
    assert "from 0.90 to 1.10 in training and from 0.90 to 1.10 forward" in text
    # The same-program column stands next to the others in the ratio table.
    assert "| a | LSTMCell | 2000.0 | 0.50 | 0.90 | n/a | 0.50 |" in text
    # rnnlib at 0.50 of linen everywhere: every target met, a limit's top at least 1.0
    assert all(met for *_, met in targets(results)[:2])
    without = {"a": {"LSTMCell": {m: {"flax.linen": _entry(2.0)} for m in ("forward", "train")}}}
    assert noise_floor(without, "train") is None
    assert "Noise floor" not in markdown(_report(without))


def test_a_run_without_first_calls_or_memory_times_only_the_rounds():
    # What --quick asks for (no first calls, no memory analysis), with no minimum time.
    settings = {**run.QUICK_SETTINGS, "min_timed_s": 0.0}
    result = run.measure(SMALL, "GRUCell", names=("flax.linen", "rnnlib"), **settings)
    for mode in run.MODES:
        for entry in result[mode].values():
            assert entry["first_call_s"] is None and entry["temp_bytes"] is None
            assert len(entry["runs"]) == 5 and entry["min_s"] <= entry["median_s"]
    text = markdown({**_report({"cfg": {"GRUCell": result}}), "first_calls": 0})
    assert "first calls not timed in this run." in text
    assert "| worst first call rnnlib / flax.linen, any mode | n/a | 1.00 | n/a |" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--runs", "4"], "--runs must be at least 5 for a meaningful median; got 4"),
        (["--first-calls", "-1"], "--first-calls must be 0 (not timed) or more; got -1"),
    ],
)
def test_the_run_command_rejects_too_few_runs_or_negative_first_calls(argv, message, capsys):
    with pytest.raises(SystemExit) as error:
        run.main(argv)
    assert error.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("name", ["rnnlib:hoisted", "rnnlib:in-loop"])
def test_the_rnnlib_hoisting_contenders_agree_with_flax(name):
    x = inputs_for(SMALL, jax.random.key(1))
    reference = build("flax.linen", "GRUCell", SMALL, x)
    other = build(name, "GRUCell", SMALL, x)
    assert_close(
        other.forward(other.params, x),
        reference.forward(reference.params, x),
        terms=_terms(SMALL, x),
    )


def test_operations_count_opcodes_and_shapes_and_ignore_names_and_tuple_order():
    hlo = """
ENTRY %main (p: f32[2,3]) -> (f32[2,3], s32[]) {
  %p = f32[2,3]{1,0} parameter(0)
  %a = f32[2,3]{1,0} add(%p, %p), metadata={op_name="x"}
  %b.1 = f32[2,3]{1,0} add(%a, %p)
  %w = (s32[], f32[2,3]{1,0}) while(%t), condition=%c, body=%d
  %v = (f32[2,3]{1,0}, /*index=1*/s32[]) while(%t2), condition=%c, body=%d
  ROOT %r = f32[3,2]{1,0} transpose(%b.1), dimensions={1,0}
}
"""
    assert programs.operations(hlo) == {
        ("add", "f32[2,3]{1,0}"): 2,
        ("while", "(f32[2,3]{1,0}, s32[])"): 2,
        ("transpose", "f32[3,2]{1,0}"): 1,
    }


def test_compiled_operations_tell_the_same_program_from_a_different_one():
    x = jnp.ones((4, 8))
    one = jax.jit(lambda x: jnp.sin(x) @ x.T)
    same = jax.jit(lambda y: jnp.sin(y) @ y.T)
    other = jax.jit(lambda x: jnp.cos(x) @ x.T)
    ops = programs.compiled_operations(one, x)
    assert ops and ops == programs.compiled_operations(same, x)
    assert ops != programs.compiled_operations(other, x)


def test_compare_sees_rnnlibs_fused_gates_against_linens_eight_matmuls():
    # At this size rnnlib's LSTMCell fuses its gates: one (B, 4H) matmul per side and step,
    # where flax.linen's LSTMCell runs eight (B, H) ones.
    counts = programs.compare("LSTMCell", SMALL, mode="forward")
    assert set(counts) == {"rnnlib", "flax.linen"}
    b, h = SMALL["B"], SMALL["H"]
    dots = {name: {s: n for (op, s), n in c.items() if op == "dot"} for name, c in counts.items()}
    assert dots["rnnlib"] == {f"f32[{b},{4 * h}]{{1,0}}": 2}
    assert dots["flax.linen"] == {f"f32[{b},{h}]{{1,0}}": 8}


def test_compare_command_rejects_a_cell_the_configuration_does_not_run(capsys):
    with pytest.raises(SystemExit) as error:
        programs.main(["LSTMCell", "convlstm B8 T16 32x32x8"])
    assert error.value.code == 2
    message = capsys.readouterr().err
    assert "runs the cells ('ConvLSTMCell',)" in message and "got 'LSTMCell'" in message


@pytest.mark.parametrize("rnnlib_s, met", [(2.1, True), (2.3, False)])
def test_a_ratio_inside_the_noise_floor_counts_as_level(rnnlib_s, met):
    """flax.linen against itself reads 0.95-1.10 in this run: rnnlib at 1.05 of linen is
    level, at 1.15 it is slower."""

    def modes(t_again, t_rnnlib):
        entry = {
            "flax.linen": _entry(2.0),
            "rnnlib": _entry(t_rnnlib),
            "flax.linen:again": _entry(t_again),
        }
        return {"forward": entry, "train": entry}

    results = {"a": {"LSTMCell": modes(1.9, 1.0)}, "b": {"GRUCell": modes(2.2, rnnlib_s)}}
    worst, forward, _, _, first = targets(results)
    assert worst[2] == forward[2] == first[2] == pytest.approx(1.1)
    assert worst[3] is forward[3] is first[3] is met
    text = markdown(_report(results))
    verdict = "yes" if met else "**no**"
    assert (
        f"| worst rnnlib / flax.linen, forward + backward | {rnnlib_s / 2:.2f} | 1.10 | {verdict} |"
        in text
    )


def test_linens_optimized_lstm_contender_takes_lstmcells_variables_and_agrees():
    # The sweep compares rnnlib's LSTMCell with the faster of linen's two LSTMs; both
    # linen programs run on the one set of LSTMCell variables.
    x = inputs_for(SMALL, jax.random.key(1))
    reference = build("flax.linen", "LSTMCell", SMALL, x)
    for name in (OPTIMIZED, OPTIMIZED_AGAIN):
        other = build(name, "LSTMCell", SMALL, x, {"params": reference.params})
        _assert_agrees(other, reference, SMALL, x)
    # It stands for linen's LSTMCell only: for any other cell there is no such contender.
    assert build(OPTIMIZED, "GRUCell", SMALL, x) is None


@pytest.mark.parametrize("name", BACKWARD + FORWARD)
def test_the_lstm_studies_contenders_agree_with_linen(name):
    # backward.py's take their kernel gradients after the loop from every step's gate
    # gradients, forward.py's schedule the same LSTM other ways; the numbers must be
    # linen's. T = 9 steps, so a step taken in the wrong order shows and the four-step
    # unrolled loop ends on a partial iteration.
    config = dict(B=3, T=9, I=3, H=4)
    x = inputs_for(config, jax.random.key(1))
    reference = build("flax.linen", "LSTMCell", config, x)
    other = build(name, "LSTMCell", config, x, {"params": reference.params})
    _assert_agrees(other, reference, config, x)
    assert build(name, "GRUCell", config, x) is None


@pytest.mark.parametrize("study, mode", [(backward, "train"), (forward, "forward")])
def test_the_lstm_studies_time_their_grid_in_their_mode_and_write_both_reports(
    study, mode, tmp_path, monkeypatch
):
    calls = []

    def fake_measure(config, cell, runs, names, *, modes, **settings):
        calls.append((config, cell, runs, modes))
        # Each contender's median grows with its place in the list: the ratios differ.
        return {modes[0]: {n: {"median_s": 1.0 + i / 10} for i, n in enumerate(names)}}

    monkeypatch.setattr(run, "measure", fake_measure)
    assert study.main(["--quick", "--runs", "5", "--out", str(tmp_path)]) == 0
    quick = [(c["B"], c["H"], c["I"]) for c, *_ in calls]
    assert quick == [(8, 64, 32), (8, 256, 128), (64, 64, 32), (64, 256, 128)]
    assert all(cell == "LSTMCell" and runs == 5 and m == (mode,) for _, cell, runs, m in calls)
    stem = f"{study.__name__.rsplit('.', 1)[1]}-quick"
    points = json.loads((tmp_path / f"{stem}.json").read_text())["points"]
    assert [p["config"]["H"] for p in points] == [64, 256, 64, 256]
    assert "| 64 | 64 | 128 | 256 |" in (tmp_path / f"{stem}.md").read_text()
    with pytest.raises(SystemExit):
        study.main(["--runs", "4", "--out", str(tmp_path)])


def test_an_unknown_lstm_program_is_named_in_the_error():
    with pytest.raises(
        ValueError, match="'lax.scan:sideways'.*lax.scan:custom_vjp.*lax.scan:per-gate"
    ):
        lstm_programs.apply_for("lax.scan:sideways")


def test_the_forward_report_takes_the_best_program_and_the_linen_a_a_range():
    def entry(seconds):
        return {"median_s": seconds}

    medians = {name: 3.0 for name in forward.TIMED}
    # The faster linen cell sets the scale (2.0 s); each cell's copy over itself is A/A.
    medians.update({"flax.linen": 4.0, OPTIMIZED: 2.0, "flax.linen:again": 4.4})
    medians.update({OPTIMIZED_AGAIN: 1.9, "rnnlib": 1.0, "lax.scan:stacked": 1.5})
    ratios = forward.ratios({"forward": {n: entry(s) for n, s in medians.items()}})
    # rnnlib is not one of the programs a rule could pick, so best is the stacked loop.
    assert ratios["rnnlib"] == 0.5 and ratios["best"] == 0.75
    assert ratios["lax.scan"] == 1.5 and ratios["aa"] == pytest.approx([0.95, 1.1])
    point = dict(config=dict(B=8, T=64, I=16, H=32), ratios=ratios)
    text = forward.markdown([point, point], "header")
    assert "| 8 | 64 | 16 | 32 | 0.50 | 1.50 | 1.50 | 1.50 | 0.75 |" in text
    assert "| 0.75 | 0.95-1.10 |" in text and "Geometric mean, `best`: 0.75" in text


def test_only_the_custom_jvp_contender_runs_in_forward_mode():
    config = dict(B=3, T=9, I=3, H=4)
    x = inputs_for(config, jax.random.key(1))
    linen = build("flax.linen", "LSTMCell", config, x)
    tangent = jax.tree_util.tree_map(jnp.ones_like, linen.params)
    expected = jax.jvp(lambda p: linen.forward(p, x), (linen.params,), (tangent,))[1]
    jvp = build(backward.JVP, "LSTMCell", config, x, {"params": linen.params})
    got = jax.jvp(lambda p: jvp.forward(p, x), (jvp.params,), (tangent,))[1]
    assert_close(got, expected, terms=_terms(config, x, gradient=True))
    vjp = build(backward.VJP, "LSTMCell", config, x, {"params": linen.params})
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jvp(lambda p: vjp.forward(p, x), (vjp.params,), (tangent,))


# -- linear cells: the loop against the associative scan (benchmarks/linear_scan.py) ----------


def test_the_linear_scan_harness_times_every_contender_in_both_modes_and_writes_its_reports(
    tmp_path,
):
    argv = ["--quick", "--lengths", "3", "5", "--widths", "2", "--runs", "5"]
    argv += ["--out", str(tmp_path)]
    assert linear_scan.main(argv) == 0
    report = json.loads((tmp_path / "linear_scan-quick.json").read_text())
    assert [(p["B"], p["H"], p["T"]) for p in report["points"]] == [(8, 2, 3), (8, 2, 5)]
    for point in report["points"]:
        for mode in linear_scan.MODES:
            timed = point["result"][mode]
            assert set(timed) == set(linear_scan.CONTENDERS)
            assert all(len(t["runs"]) >= 5 and t["median_s"] > 0 for t in timed.values())
            shown = point["ratios"][mode]
            reference = timed[linear_scan.REFERENCE]
            assert shown["aa"] == timed[linear_scan.AGAIN]["median_s"] / reference["median_s"]
            scan = timed["minGRU:associative"]["first_s"]
            assert shown["first"]["minGRU:associative"] == scan / reference["first_s"]
    text = (tmp_path / "linear_scan-quick.md").read_text()
    assert "| B | H | T | `minGRU:sequential` (ms) | A/A | `minGRU:hoisted` |" in text
    assert "### forward + backward (jax.grad): first call" in text
    assert text.count("| 8 | 2 | 5 |") == 4  # per mode, a row of medians and one of first calls
    assert (tmp_path / "linear_scan-quick.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        linear_scan.main(["--runs", "4", "--out", str(tmp_path)])
    argv = ["--quick", "--batches", "2", "--lengths", "3", "--widths", "2", "--runs", "5"]
    assert linear_scan.main(argv + ["--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "linear_scan-batches-quick.json").read_text())
    assert [(p["B"], p["H"], p["T"]) for p in report["points"]] == [(2, 2, 3)]


def test_the_linear_scan_contenders_compute_the_same_minGRU_and_the_a_a_copy_compiles_apart():
    x = jax.random.normal(jax.random.key(1), (2, 6, 3))
    built = {name: linear_scan.build(name, 3, x) for name in linear_scan.CONTENDERS}
    reference = built[linear_scan.REFERENCE]
    terms = recurrent_terms(rnnlib.MinGRUCell(3), x.shape, steps=6, gradient=True)
    want = reference.forward(reference.params, x), reference.train(reference.params, x)
    for name in ("minGRU:hoisted", "minGRU:associative", linear_scan.AGAIN):
        other = built[name]
        got = other.forward(other.params, x), other.train(other.params, x)
        assert_close(got, want, terms=terms)
    assert built[linear_scan.AGAIN].forward._cache_size() == 1
    assert reference.forward._cache_size() == 1


def test_a_report_names_the_processor_from_its_first_entry_in_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    first = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
    first += "model name\t: AMD EPYC 7B13\ncache size\t: 512 KB\n"
    cpuinfo.write_text(first + "\nprocessor\t: 1\nmodel name\t: Other CPU\n")
    described = run.describe_machine(str(cpuinfo))
    assert described.startswith("AMD EPYC 7B13 (family 25, model 1, cache 512 KB), ")
    assert f"{os.cpu_count()} CPU cores" in described and "Other CPU" not in described


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this OS")
def test_a_report_says_when_the_process_may_use_fewer_cores_than_the_machine_has(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert "4 CPU cores (1 usable by this process), " in run.describe_machine()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert "4 CPU cores, " in run.describe_machine() and "usable" not in run.describe_machine()


def test_without_cpuinfo_a_report_falls_back_to_what_python_knows(tmp_path):
    described = run.describe_machine(str(tmp_path / "absent"))
    assert described.startswith(f"{platform.processor() or platform.machine()}, ")
    assert "family" not in described and described.count(platform.machine()) == 1
