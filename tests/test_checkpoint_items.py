"""How a step's arrays and checksums are written: `checkpoint.compression` (none by default,
zstd on request, either restored whatever the setting), and the checksums read back off the
training thread."""

from __future__ import annotations

import glob
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from checkpoint_fixtures import small_config
from conftest import REPO

from jaxtrain.checkpoint import checksums as checksums_lib
from jaxtrain.checkpoint.manager import Checkpointer
from jaxtrain.config.loader import load_config, validate
from jaxtrain.errors import ConfigError
from jaxtrain.trainer import Trainer

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # the first four bytes of every zstd frame
DEVICES = jax.devices()[:1]


def _state() -> dict[str, jax.Array]:
    """Compressible arrays (a ramp and zeros) and a random one."""
    rng = np.random.default_rng(0)
    return {
        "ramp": jnp.arange(64 * 256, dtype=jnp.float32).reshape(64, 256),
        "zeros": jnp.zeros((128, 256), jnp.float32),
        "noise": jnp.asarray(rng.standard_normal((64, 64)).astype(np.float32)),
        "step": jnp.asarray(3, jnp.int32),
    }


def _abstract(state):
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
    )


def _data_bytes(step_dir: Path) -> bytes:
    return b"".join(
        Path(f).read_bytes()
        for f in sorted(glob.glob(str(step_dir / "state" / "ocdbt.process_0" / "d" / "*")))
    )


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_arrays_are_written_raw_by_default_and_compressed_on_request(tmp_path, compression):
    state = _state()
    kwargs = {} if compression == "none" else {"compression": compression}
    checkpointer = Checkpointer(tmp_path / "ckpt", **kwargs)
    checkpointer.save(1, state, {"next_index": 5}, {})
    checkpointer.wait()
    data = _data_bytes(checkpointer.step_dir(1))
    ramp = np.asarray(state["ramp"]).tobytes()
    if compression == "none":
        assert ramp in data and len(data) >= sum(x.nbytes for x in state.values())
    else:
        assert ramp not in data and _ZSTD_MAGIC in data
        assert len(data) < np.asarray(state["ramp"]).nbytes  # the zeros all but vanish
    restored, data_state, _ = checkpointer.restore(1, _abstract(state))
    checkpointer.close()
    assert data_state == {"next_index": 5}
    for name, x in state.items():
        np.testing.assert_array_equal(restored[name], x)


def test_a_checkpoint_written_by_the_former_zstd_handlers_restores_under_the_default(tmp_path):
    # What every save wrote before checkpoint.compression existed: Orbax's StandardCheckpointHandler
    # (zstd chunks) and the checksums as a plain JSON item.
    state = _state()
    with ocp.CheckpointManager(
        tmp_path / "ckpt",
        item_handlers={
            "state": ocp.StandardCheckpointHandler(),
            **{name: ocp.JsonCheckpointHandler() for name in ("data", "config", "checksums")},
        },
    ) as manager:
        manager.save(
            7,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                data=ocp.args.JsonSave({"next_index": 9}),
                config=ocp.args.JsonSave({"run": {"name": "old"}}),
                checksums=ocp.args.JsonSave(checksums_lib.record(state, {"next_index": 9})),
            ),
        )
        manager.wait_until_finished()
    assert _ZSTD_MAGIC in _data_bytes(tmp_path / "ckpt" / "7")
    reader = Checkpointer(tmp_path / "ckpt", read_only=True, async_save=False)
    restored, data_state, config = reader.restore(7, _abstract(state))
    assert reader.saved_checksums(7)[checksums_lib.FORMAT_KEY] == checksums_lib.FORMAT
    reader.close()
    assert data_state == {"next_index": 9} and config == {"run": {"name": "old"}}
    for name, x in state.items():
        np.testing.assert_array_equal(restored[name], x)


def test_checksums_are_read_back_on_the_writer_thread(tmp_path, monkeypatch):
    readers = []
    result = checksums_lib.Pending.result

    def recorded(self):
        readers.append(threading.current_thread())
        return result(self)

    monkeypatch.setattr(checksums_lib.Pending, "result", recorded)
    checkpointer = Checkpointer(tmp_path / "ckpt")
    state = _state()
    checkpointer.save(1, state, {}, {})
    saved_by = list(readers)
    checkpointer.wait()
    assert saved_by == [] or saved_by[0] is not threading.main_thread()
    assert len(readers) == 1 and readers[0] is not threading.main_thread()
    assert checkpointer.saved_checksums(1) == checksums_lib.record(state, {})
    checkpointer.close()


def test_a_run_written_with_zstd_resumes_with_the_default(tmp_path):
    run_dir = tmp_path / "run"
    trainer = Trainer(
        small_config(run_dir, **{"checkpoint.compression": "zstd"}), devices=DEVICES, console=False
    )
    trainer.run(2)
    trainer.close()
    resumed = Trainer(small_config(run_dir), devices=DEVICES, console=False)
    assert resumed.step == 2  # restored, checksums verified
    biggest = max(jax.tree.leaves(resumed.state["params"]), key=lambda x: x.size)
    assert np.asarray(biggest).tobytes()[:256] not in _data_bytes(run_dir / "checkpoints" / "2")
    resumed.run(2)
    biggest = max(jax.tree.leaves(resumed.state["params"]), key=lambda x: x.size)
    resumed.close()
    assert np.asarray(biggest).tobytes()[:256] in _data_bytes(run_dir / "checkpoints" / "4")


def test_an_unknown_compression_is_a_config_error_naming_the_choices():
    cfg = load_config(str(REPO / "configs" / "base.py"), {"checkpoint.compression": "lz4"})
    with pytest.raises(
        ConfigError,
        match=r"checkpoint.compression='lz4' is not one of "
        r"\('none', 'zstd'\)",
    ):
        validate(cfg)
