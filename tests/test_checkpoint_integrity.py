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

from jaxtrain.checkpoint.manager import CheckpointError
from jaxtrain.commands import checkpoints as checkpoint_listing
from jaxtrain.errors import ConfigError
from jaxtrain.trainer import Trainer

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
    result = checkpoint_listing.verify(run_copy, devices=DEVICES)
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


@pytest.mark.parametrize(
    "saved_dtype, run_dtype", [("float32", "bfloat16"), ("bfloat16", "float32")]
)
def test_changing_param_dtype_resumes_by_casting(tmp_path, capsys, saved_dtype, run_dtype):
    run_dir = tmp_path / "run"
    saver = Trainer(
        small_config(run_dir, **{"model.param_dtype": saved_dtype}), devices=DEVICES, console=False
    )
    saver.save(wait=True)  # step 0: no train step to compile
    saved = _host(saver.state["params"])
    saver.close()
    capsys.readouterr()

    trainer = _resume(run_dir, **{"model.param_dtype": run_dtype})
    out = capsys.readouterr().out
    assert trainer.step == 0
    assert (
        f"checkpoint step 0 holds other dtypes than this run (model.param_dtype={run_dtype})" in out
    )
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
    with pytest.raises(
        CheckpointError,
        match="1 array.s. differ from the checksums saved with them: params.lm_head.kernel",
    ):
        _resume(run_copy, **{"model.param_dtype": "bfloat16"})


def test_changed_batch_order_settings_are_refused_with_the_differences(run_copy):
    with pytest.raises(ConfigError) as info:
        _resume(run_copy, **{"train.seq_len": 16, "train.global_batch_size": 16, "run.seed": 7})
    lines = str(info.value).splitlines()
    assert lines[0] == (
        f"checkpoint step 4 in {run_copy / 'checkpoints'} was saved with other "
        "data settings than this run; its saved data position would point "
        "into other batches:"
    )
    assert lines[1:4] == [
        "  train.seq_len: checkpoint 32, now 16",
        "  train.global_batch_size: checkpoint 8, now 16",
        "  run.seed: checkpoint 0, now 7",
    ]
    assert "--config.data.reset=true" in lines[4]


def test_data_reset_keeps_the_state_and_reads_the_new_data_from_the_start(run_copy, capsys):
    trainer = _resume(run_copy, **{"run.seed": 7, "data.reset": True})
    out = capsys.readouterr().out
    assert trainer.step == 4  # model and optimizer state of step 4
    assert trainer.train_iter.get_state() == {"next_index": 0}
    assert (
        "data.reset=true: the data settings changed since checkpoint step 4 (run.seed: "
        "checkpoint 0, now 7); reading the new data from its first batch"
    ) in out
    trainer.run(1)  # saves step 5 on its way out
    trainer.close()
    # The next resume (same command, reset still set) continues the new stream.
    trainer = _resume(run_copy, **{"run.seed": 7, "data.reset": True})
    assert trainer.step == 5
    assert "data.reset=true ignored" in capsys.readouterr().out
    assert trainer.train_iter.get_state() == {"next_index": 1}
    trainer.close()


def test_unchanged_settings_resume_the_data_position(run_copy):
    trainer = _resume(run_copy, **{"train.micro_batch_size": 4, "data.prefetch": 1})
    assert trainer.train_iter.get_state() == {"next_index": 4}
    trainer.close()


def test_other_data_paths_are_refused(tmp_path, datatrove_corpus):
    other = tmp_path / "other"
    shutil.copytree(datatrove_corpus.folder, other)
    data = {"data.kind": "datatrove", "data.tokenizer": str(datatrove_corpus.tokenizer)}
    run_dir = tmp_path / "run"
    saver = Trainer(
        small_config(run_dir, **data, **{"data.paths": str(datatrove_corpus.folder)}),
        devices=DEVICES,
        console=False,
    )
    saver.save(wait=True)
    saver.close()
    with pytest.raises(
        ConfigError, match=f"data.paths: checkpoint '{datatrove_corpus.folder}', now '{other}'"
    ):
        _resume(run_dir, **data, **{"data.paths": str(other)})
    # The same folder written differently is the same data.
    trainer = _resume(run_dir, **data, **{"data.paths": f" {datatrove_corpus.folder}/"})
    trainer.close()
