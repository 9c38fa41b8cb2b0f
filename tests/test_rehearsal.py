"""docs/parallelism.md's local rehearsal of a multi-host run, run as written.

The block between the `rehearsal` markers is executed by bash from the repository root; only
its `RUN=... PORT=...` line is replaced, to use a temporary folder and a free port.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import REPO
from multiprocess_helpers import child_env, free_port

from jaxtrain.rundir.metrics import read_jsonl


def rehearsal_block() -> str:
    doc = (REPO / "docs" / "parallelism.md").read_text()
    block = re.search(r"<!-- rehearsal -->\n```bash\n(.*?)```\n<!-- /rehearsal -->", doc, re.S)
    assert block, "docs/parallelism.md lost its rehearsal block"
    return block.group(1)


@pytest.mark.slow  # two jax processes compile and train 40 steps
def test_the_documented_rehearsal_trains_two_processes(tmp_path):
    script = rehearsal_block()
    assert "RUN=runs/rehearsal PORT=12355\n" in script
    run = tmp_path / "rehearsal"
    script = script.replace("RUN=runs/rehearsal PORT=12355\n", f"RUN={run} PORT={free_port()}\n")
    env = child_env(1)
    env.pop("XLA_FLAGS")  # the block sets its own
    out = subprocess.run(
        ["bash", "-e", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    logs = "\n".join(p.read_text() for p in tmp_path.glob("rehearsal.*.log"))
    assert out.returncode == 0, out.stdout + out.stderr + logs
    assert "mesh {'data': 2, 'pipeline': 1, 'fsdp': 4" in logs
    steps = [r["step"] for r in read_jsonl(run / "metrics.jsonl") if "loss" in r]
    assert steps[-1] == 40
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit()) == [
        20,
        30,
        40,
    ]
    assert "step 40/40" in out.stdout  # the block's closing `tail` shows the end of the run
