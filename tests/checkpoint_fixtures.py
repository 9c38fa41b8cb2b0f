"""Shared by the checkpoint tests: one small llama-debug run config and readers of a run dir.

Every test trains with the same config (train.steps is part of the compiled step through the
learning-rate schedule) and stops early with `Trainer.run(n)`, so the whole suite compiles one
train step per mesh and the persistent compilation cache serves the rest.
"""

from __future__ import annotations

from pathlib import Path

from conftest import REPO

from jaxtrain.config import loader as config_lib
from jaxtrain.rundir.metrics import read_jsonl

STEPS = 16
# Synthetic tokens, no validation, a checkpoint every 2 steps; tests override what they test.
CLI_OVERRIDES = {
    "train.steps": STEPS,
    "train.seq_len": 32,
    "train.global_batch_size": 8,
    "train.log_every": 1,
    "train.eval_every": 0,
    "train.progress": False,
    "checkpoint.every": 2,
    "optim.warmup_steps": 2,
}


def small_config(run_dir: Path, config: str = "llama_debug.py", **overrides):
    """A debug-size config (`configs/<config>`) with CLI_OVERRIDES, for in-process Trainers."""
    return config_lib.load_config(
        str(REPO / "configs" / config), {"run.dir": str(run_dir), **CLI_OVERRIDES, **overrides}
    )


def losses(run_dir: Path) -> dict[int, float]:
    """Step -> loss from metrics.jsonl; a step logged twice (before a kill and after the
    resume) keeps its last record."""
    return {r["step"]: r["loss"] for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r}


def saved_steps(run_dir: Path) -> list[int]:
    """Complete checkpoint steps on disk."""
    folder = run_dir / "checkpoints"
    return (
        sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []
    )
