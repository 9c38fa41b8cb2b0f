"""checkpoint.init_from: parameters from another run or a Hugging Face folder, nothing else."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from checkpoint_fixtures import small_config

from jaxtrain.checkpoint.manager import CheckpointError
from jaxtrain.commands.export import export_hf
from jaxtrain.data import pipeline
from jaxtrain.trainer import Trainer


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


@pytest.fixture(scope="module")
def source_run(tmp_path_factory):
    """A llama-debug run trained 2 steps (checkpoint at step 2) and its parameters."""
    run_dir = tmp_path_factory.mktemp("source") / "run"
    trainer = Trainer(small_config(run_dir), devices=jax.devices()[:1], console=False)
    trainer.run(2)
    params = _leaves(trainer.state["params"])
    trainer.close()
    return run_dir, params


def _start(tmp_path, **overrides) -> Trainer:
    return Trainer(
        small_config(tmp_path / "run", **overrides), devices=jax.devices()[:1], console=False
    )


def test_init_from_a_run_loads_parameters_only_then_resumes_its_own(tmp_path, source_run, capsys):
    source_dir, source_params = source_run
    capsys.readouterr()
    trainer = _start(tmp_path, **{"checkpoint.init_from": str(source_dir)})
    out = capsys.readouterr().out
    assert re.search(
        r"init_from: loaded 12 arrays \(139,584 params\) from \S+checkpoints "
        r"\(jaxtrain checkpoint, step 2\); optimizer state initialised, step 0",
        out,
    )
    assert trainer.step == 0
    for got, want in zip(_leaves(trainer.state["params"]), source_params, strict=True):
        np.testing.assert_array_equal(got, want)
    assert not any(np.any(x) for x in _leaves(trainer.state["opt_state"]))  # fresh Adam
    fresh = pipeline.make_train_iterator(trainer.cfg, trainer.spec.vocab_size)
    assert trainer.train_iter.get_state() == fresh.get_state()  # data order from the start
    trainer.run(2)
    trainer.close()

    # Now the run has a checkpoint of its own: init_from no longer applies.
    again = _start(tmp_path, **{"checkpoint.init_from": str(source_dir)})
    assert again.step == 2
    assert "init_from ignored: the run resumes from its own step 2" in capsys.readouterr().out
    again.close()


def test_init_from_a_hugging_face_folder(tmp_path, source_run, capsys):
    source_dir, source_params = source_run
    hf_dir = export_hf(source_dir, tmp_path / "hf")
    capsys.readouterr()
    trainer = _start(tmp_path, **{"checkpoint.init_from": str(hf_dir)})
    assert "(Hugging Face checkpoint); optimizer state initialised" in capsys.readouterr().out
    for got, want in zip(_leaves(trainer.state["params"]), source_params, strict=True):
        np.testing.assert_array_equal(got, want)
    trainer.close()


def test_init_from_another_architecture_names_the_differing_fields(tmp_path, source_run):
    source_dir, _ = source_run
    hf_dir = export_hf(source_dir, tmp_path / "hf")
    for source in (source_dir, hf_dir):
        with pytest.raises(
            CheckpointError,
            match=r"model.intermediate_size: source 128 vs "
            r"run 96",
        ):
            _start(
                tmp_path / "x",
                **{"checkpoint.init_from": str(source), "model.intermediate_size": 96},
            )
    with pytest.raises(CheckpointError, match=r"has no step 7; saved steps: \[2\]"):
        _start(
            tmp_path / "y", **{"checkpoint.init_from": str(source_dir), "checkpoint.init_step": 7}
        )
    with pytest.raises(CheckpointError, match="neither a Hugging Face folder"):
        _start(tmp_path / "z", **{"checkpoint.init_from": str(tmp_path)})


def test_init_from_reports_numerical_differences_and_keeps_the_run_values(
    tmp_path, source_run, capsys
):
    source_dir, _ = source_run
    capsys.readouterr()
    trainer = _start(
        tmp_path,
        **{
            "checkpoint.init_from": str(source_dir / "checkpoints" / "2"),
            "model.rope_theta": 20000.0,
        },
    )
    out = capsys.readouterr().out
    assert "step 2" in out
    assert "model.rope_theta: source 10000.0, run uses 20000.0" in out
    assert trainer.spec.rope_theta == 20000.0
    trainer.close()
