"""A checkpoint resumes only as it was saved: missing items, an edited data-iterator state and
changed values are damage; what may change between the save and the resume is said aloud."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest
from checkpoint_fixtures import small_config

from jaxtrain import inspect_run
from jaxtrain.checkpoint import CheckpointError
from jaxtrain.train.trainer import Trainer

DEVICES = jax.devices()[:1]


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> Path:
    """A llama-debug run with checkpoints at steps 2 and 4, on one device."""
    path = tmp_path_factory.mktemp("integrity") / "run"
    trainer = Trainer(small_config(path), devices=DEVICES, console=False)
    trainer.run(4)
    trainer.close()
    return path


@pytest.fixture
def run_copy(saved_run, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(saved_run, copy)
    return copy


def _resume(run_dir: Path, **overrides) -> Trainer:
    return Trainer(small_config(run_dir, **overrides), devices=DEVICES, console=False)


def _damage_message(run_dir: Path) -> str:
    with pytest.raises(CheckpointError) as info:
        _resume(run_dir)
    message = str(info.value)
    assert "checkpoint step 4" in message and "is damaged: " in message
    assert "previous checkpoint (step 2)" in message
    return message


def test_a_deleted_checksums_item_is_damage_not_an_old_checkpoint(run_copy):
    shutil.rmtree(run_copy / "checkpoints" / "4" / "checksums")
    message = _damage_message(run_copy)
    assert "missing item(s) checksums/:" in message
    result = inspect_run.verify(run_copy, devices=DEVICES)
    assert not result.ok and "missing item(s) checksums/:" in "\n".join(result.problems)


def test_any_item_the_metadata_lists_must_be_there(run_copy):
    shutil.rmtree(run_copy / "checkpoints" / "4" / "data")
    assert "missing item(s) data/:" in _damage_message(run_copy)


def test_a_checkpoint_from_before_checksums_is_still_resumed(run_copy):
    # Written when checkpoints had no checksums item: its metadata does not list one.
    step = run_copy / "checkpoints" / "4"
    shutil.rmtree(step / "checksums")
    metadata = json.loads((step / "_CHECKPOINT_METADATA").read_text())
    del metadata["item_handlers"]["checksums"]
    (step / "_CHECKPOINT_METADATA").write_text(json.dumps(metadata))
    trainer = _resume(run_copy)
    assert trainer.step == 4
    trainer.close()


@pytest.mark.parametrize("edited", [{"next_index": 21}, {}])
def test_an_edited_data_state_is_damage(run_copy, edited):
    (run_copy / "checkpoints" / "4" / "data" / "metadata").write_text(json.dumps(edited))
    message = _damage_message(run_copy)
    assert "its data/ item (the data-iterator position) differs from the checksum" in message


def _host(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


@pytest.mark.parametrize("saved_dtype, run_dtype", [("float32", "bfloat16"),
                                                    ("bfloat16", "float32")])
def test_changing_param_dtype_resumes_by_casting(tmp_path, capsys, saved_dtype, run_dtype):
    run_dir = tmp_path / "run"
    saver = Trainer(small_config(run_dir, **{"model.param_dtype": saved_dtype}),
                    devices=DEVICES, console=False)
    saver.save(wait=True)  # step 0: no train step to compile
    saved = _host(saver.state["params"])
    saver.close()
    capsys.readouterr()

    trainer = _resume(run_dir, **{"model.param_dtype": run_dtype})
    out = capsys.readouterr().out
    assert trainer.step == 0
    assert f"checkpoint step 0 holds other dtypes than this run (model.param_dtype={run_dtype})" \
        in out
    assert f"array(s) {saved_dtype} -> {run_dtype} (params." in out
    assert "resumed from step 0" in out
    params = _host(trainer.state["params"])
    moments = jax.tree.leaves(trainer.state["opt_state"])
    assert {x.dtype.name for x in params} == {run_dtype}
    assert run_dtype in {x.dtype.name for x in moments}
    for got, want in zip(params, saved, strict=True):
        np.testing.assert_array_equal(got, want.astype(got.dtype))
    trainer.close()


def test_values_are_checked_in_their_saved_dtype_before_the_cast(run_copy):
    checksums_file = run_copy / "checkpoints" / "4" / "checksums" / "metadata"
    saved = json.loads(checksums_file.read_text())
    saved["params.lm_head.kernel"] ^= 1
    checksums_file.write_text(json.dumps(saved))
    with pytest.raises(CheckpointError, match="1 array.s. differ from the checksums saved with "
                                              "them: params.lm_head.kernel"):
        _resume(run_copy, **{"model.param_dtype": "bfloat16"})
