"""How a step's checksums are written: read back off the training thread."""

from __future__ import annotations

import glob
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrain import checksums as checksums_lib
from jaxtrain.checkpoint import Checkpointer

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # the first four bytes of every zstd frame
DEVICES = jax.devices()[:1]


def _state() -> dict[str, jax.Array]:
    """Compressible arrays (a ramp and zeros) and a random one."""
    rng = np.random.default_rng(0)
    return {"ramp": jnp.arange(64 * 256, dtype=jnp.float32).reshape(64, 256),
            "zeros": jnp.zeros((128, 256), jnp.float32),
            "noise": jnp.asarray(rng.standard_normal((64, 64)).astype(np.float32)),
            "step": jnp.asarray(3, jnp.int32)}


def _abstract(state):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                        state)


def _data_bytes(step_dir: Path) -> bytes:
    return b"".join(Path(f).read_bytes() for f in
                    sorted(glob.glob(str(step_dir / "state" / "ocdbt.process_0" / "d" / "*"))))


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
