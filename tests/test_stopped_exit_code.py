"""JAXTRAIN_STOPPED_EXIT_CODE, the status that tells a job script a run stopped early.

A run stopped by a signal before train.steps exits with it (tools/launch_slurm.sbatch sets 75
and requeues on it; tests/test_slurm.py runs that for real); a finished run exits 0 whatever it
is. A value that is no exit status is refused before anything is built.
"""

from __future__ import annotations

import pytest
from conftest import REPO

from jaxtrain import cli


@pytest.mark.parametrize("value", ["seventy-five", "300", "-1"])
def test_a_value_that_is_no_exit_status_is_refused(value, monkeypatch, capsys):
    monkeypatch.setenv("JAXTRAIN_STOPPED_EXIT_CODE", value)
    code = cli.main(["--config", str(REPO / "configs" / "llama_debug.py")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"JAXTRAIN_STOPPED_EXIT_CODE='{value}' is not an exit status: set it to 0..255" in err


def test_a_finished_run_exits_0_with_the_variable_set(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXTRAIN_STOPPED_EXIT_CODE", "75")
    argv = [
        "--config",
        str(REPO / "configs" / "llama_debug.py"),
        f"--config.run.dir={tmp_path}",
        "--config.train.steps=2",
        "--config.train.seq_len=16",
        "--config.train.global_batch_size=8",
        "--config.train.progress=false",
        "--config.train.eval_batches=0",
    ]
    assert cli.main(argv) == 0
