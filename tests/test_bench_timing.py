"""`bench`'s timing: steps timed with or without warm-up, again on the same trainer (to
interleave several), and step counts checked at the command line."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from conftest import REPO

from jaxtrain import cli
from jaxtrain.commands import bench
from jaxtrain.config import loader as config_lib


def test_steps_are_timed_without_warm_up_and_again_on_the_same_trainer():
    cfg = config_lib.load_config(str(REPO / "configs" / "llama_debug.py"), bench.TINY_SHAPE)
    with bench.synthetic_trainer(cfg, 8, jax.devices()[:1]) as trainer:
        first = bench.time_steps(trainer, steps=2, warmup=0)
        after_first = jax.tree.map(np.asarray, trainer.state)
        again = bench.time_steps(trainer, steps=1, warmup=0)
        # Each call trains on from where the last one left the state.
        assert int(trainer.state["step"]) == 3
        changed = jax.tree.map(
            lambda a, b: not np.array_equal(a, b),
            after_first,
            jax.tree.map(np.asarray, trainer.state),
        )
        assert any(jax.tree.leaves(changed))
    for figures in (first, again):
        assert figures["step_time_s"] > 0 and figures["tokens_per_s"] > 0


@pytest.mark.parametrize(
    ("option", "value", "bound"), [("--steps", "0", 1), ("--warmup", "-1", 0), ("--steps", "x", 1)]
)
def test_a_step_count_out_of_range_is_refused_naming_the_bound(capsys, option, value, bound):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "--config", "llama_debug.py", option, value])
    assert exit_info.value.code == 2
    assert f"argument {option}: {value!r} is not an integer >= {bound}." in capsys.readouterr().err
