"""tools/bench_ab.py: two variants of a train step built in one process, timed in alternating
rounds, and bad sides refused before any timing."""

from __future__ import annotations

import contextlib

import pytest
from conftest import load_tool

from jaxtrain.commands import bench
from jaxtrain.hardware import host_malloc

TINY = list(bench.TINY_SHAPE)


@pytest.fixture(autouse=True)
def _no_restart(monkeypatch):
    """main() would restart the process with the malloc settings; not the test runner's."""
    monkeypatch.setenv(host_malloc.OPT_OUT, "off")


@pytest.fixture(scope="module")
def tool():
    return load_tool("bench_ab")


def test_each_side_trains_its_own_variant_and_the_rounds_alternate(tool, capsys):
    argv = ["--config", "llama_debug.py", *TINY, "--b", "model.remat=full",
            "--config.backend.xla_options=xla_cpu_enable_fast_math=false", "--b-xla",
            "xla_cpu_prefer_vector_width=512", "--rounds", "3", "--steps", "1", "--warmup", "0"]  # fmt: skip
    args, common = tool.parse(argv)
    assert args.b == ["--config.model.remat=full"] and args.a == []
    assert args.b_xla == [("xla_cpu_prefer_vector_width", 512)]
    with contextlib.ExitStack() as stack:
        a = tool.build(stack, "A", args, common, args.a, args.a_xla)
        b = tool.build(stack, "B", args, common, args.b, args.b_xla)
        assert (a.trainer.cfg.model.remat, b.trainer.cfg.model.remat) == ("none", "full")
        # B's options join the config's in its run's `backend.xla_options`: its step is
        # compiled once, with all of them.
        shared = {"xla_cpu_enable_fast_math": False}
        assert a.trainer.setup.backend.compiler_options == shared
        assert b.trainer.setup.backend.compiler_options == {
            **shared,
            "xla_cpu_prefer_vector_width": 512,
        }
        a.run(1)
        b.run(2)
        assert (int(a.trainer.state["step"]), int(b.trainer.state["step"])) == (1, 2)

    assert tool.main(argv) == 0
    out = capsys.readouterr().out
    assert "A: as configured: median " in out
    assert "B: model.remat=full, xla xla_cpu_prefer_vector_width=512: median " in out
    assert "B / A time per token, per round: median " in out and "over 3 rounds" in out


def test_the_ratio_is_of_time_per_token_round_by_round(tool):
    def side(name, tokens, seconds):
        return tool.Side(name, [], {}, None, None, tokens, seconds)

    text = tool.report(side("A", 100, [1.0, 2.0, 4.0]), side("B", 200, [1.0, 3.0, 4.0]))
    # Per token: B's rounds take 0.5x, 0.75x and 0.5x A's.
    assert "median 0.500 (0.500-0.750) over 3 rounds" in text
    assert "A: as configured: median 2000.0 ms/step, 50 tokens/s" in text


@pytest.mark.parametrize(
    ("side", "message"),
    [
        (["--b", "model.nonexistent=1"], "config key 'model.nonexistent' does not exist"),
        (["--b-xla", "xla_cpu_no_such_option=1"], "No such compile option"),
    ],
)
def test_a_side_that_cannot_be_built_is_named_before_any_timing(tool, capsys, side, message):
    assert tool.main(["--config", "llama_debug.py", *TINY, *side, "--rounds", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench_ab: ") and message in err


@pytest.mark.parametrize("bad", [["--b", "remat"], ["--a-xla", "=1"], ["--rounds", "0"]])
def test_malformed_options_are_refused(tool, bad):
    with pytest.raises(SystemExit) as exit_info:
        tool.parse(["--config", "llama_debug.py", *bad])
    assert exit_info.value.code == 2
