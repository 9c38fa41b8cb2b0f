"""Two real processes read their rows of each global batch; together they make the batch one
process reads alone (jax.distributed over 127.0.0.1, 2 CPU devices per process)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
from data_fixtures import write_raw_shard

from jaxtrain.config.loader import load_config
from jaxtrain.data.pipeline import make_train_iterator

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
STEPS = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(
        JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO), XLA_FLAGS="--xla_backend_optimization_level=0"
    )
    return env


def test_two_processes_read_the_rows_of_one_global_batch(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        docs = [list(rng.integers(1, 90_000, int(rng.integers(3, 20)))) + [0] for _ in range(60)]
        write_raw_shard(tmp_path / name, "00000_unshuffled.ds", docs, width=4)
    overrides = {
        "data.kind": "datatrove",
        "train.seq_len": 8,
        "train.global_batch_size": 8,
        "data.paths": f"0.6:{tmp_path / 'a'},0.4:{tmp_path / 'b'}",
        "data.reset_attention_mask": True,
        "data.reset_position_ids": True,
        "data.prefetch": 0,
    }
    port = _free_port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "data_multiprocess_worker.py"),
                str(port),
                str(pid),
                str(STEPS),
                json.dumps(overrides),
                str(tmp_path / f"out{pid}.npz"),
            ],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
        )
        for pid in range(2)
    ]
    try:
        logs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], [log[-3000:] for log in logs]

    cfg = load_config(str(REPO / "configs" / "base.py"), overrides)
    it = make_train_iterator(cfg, 100_000)
    outs = [np.load(tmp_path / f"out{pid}.npz") for pid in range(2)]
    for step in range(STEPS):
        reference = next(it)
        assert sorted(reference) == ["inputs", "loss_mask", "positions", "segment_ids", "targets"]
        for key, value in reference.items():
            halves = [out[f"local/{step}/{key}"] for out in outs]
            assert all(h.shape == (4, 8) for h in halves)
            np.testing.assert_array_equal(np.concatenate(halves), value)
            for out in outs:
                np.testing.assert_array_equal(out[f"global/{step}/{key}"], value)
