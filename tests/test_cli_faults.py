"""Broken input as a user meets it on the command line: a config that does not load, a folder
that cannot be written, a truncated weights file, a tokenizer that is not there. Each ends in one
line, `jaxtrain COMMAND: error: MESSAGE`, exit status 2 and no traceback; those a run can see
before compiling its step are refused before it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import REPO
from flax import nnx

from jaxtrain import cli
from jaxtrain.config.loader import load_config
from jaxtrain.data.sources import validate_data_config
from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf import INDEX_NAME, save_hf_checkpoint
from jaxtrain.models.assembly.decoder import Decoder
from jaxtrain.models.spec.hyperparameters import ModelSpec

# A config of the debug model that would train two steps, were nothing broken.
TRAIN = ("--config", "llama_debug.py", "--config.train.steps=2", "--config.train.eval_every=0")


def jaxtrain(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`python -m jaxtrain ARGS` in a fresh process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "jaxtrain", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )


def one_line_error(out: subprocess.CompletedProcess, command: str = "train") -> str:
    """The error line of a run that must fail with exit status 2 and no traceback."""
    printed = out.stdout + out.stderr
    assert out.returncode == 2, printed
    assert "Traceback" not in printed, printed
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"jaxtrain {command}: error: "), printed
    return last


# ------------------------------------------------------------------------------------ configs
def test_a_config_with_a_syntax_error_names_the_file_line_and_column(tmp_path):
    (tmp_path / "my.py").write_text(
        "from jaxtrain.configs import base\n\n\ndef get_config()\n    return base.get_config()\n"
    )
    line = one_line_error(jaxtrain("--config", "my.py", cwd=tmp_path))
    assert line.endswith(
        "config file 'my.py' is not valid Python: line 4, column 17: expected ':'."
    )


@pytest.mark.parametrize(
    "source, message",
    [
        (
            "import helper\n",
            "config file 'my.py' imports {tmp}/helper.py, which is not valid Python: line 1, "
            "column 5: invalid syntax.",
        ),
        (
            "from jaxtrain.configs import base\nsteps = undefined\n",
            "config file 'my.py' failed at line 2 while loading: NameError: name 'undefined' "
            "is not defined",
        ),
        (
            "import no_such_module_here\n",
            "config file 'my.py' failed at line 1 while loading: ModuleNotFoundError: No module "
            "named 'no_such_module_here'",
        ),
        (
            "from jaxtrain.configs import base\n\ndef get_config():\n    c = base.get_config()\n"
            "    return c.train.no_such_key\n",
            "config file 'my.py' failed at line 5 in get_config(): AttributeError: ",
        ),
    ],
    ids=["imported-syntax", "import-time", "missing-module", "get_config"],
)
def test_a_config_that_raises_is_one_line_naming_the_file(
    tmp_path, monkeypatch, capsys, source, message
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "helper.py").write_text("x = = 1\n")
    (tmp_path / "my.py").write_text(source)
    assert cli.main(["--config", "my.py"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"jaxtrain train: error: {message.format(tmp=tmp_path)}" in err


# ---------------------------------------------------------------------------- read-only folders
def test_a_read_only_run_directory_is_refused_naming_it(read_only_folder):
    out = jaxtrain(*TRAIN, f"--config.run.dir={read_only_folder}")
    line = one_line_error(out)
    assert f"run directory {read_only_folder} is not writable (" in line
    assert "Point run.dir at a folder this process can write" in line
    assert "compiling train step" not in out.stdout + out.stderr


def test_a_read_only_checkpoint_folder_is_refused_before_compiling(tmp_path, read_only_folder):
    folder = read_only_folder / "checkpoints"
    out = jaxtrain(
        *TRAIN, f"--config.run.dir={tmp_path / 'run'}", f"--config.checkpoint.dir={folder}"
    )
    line = one_line_error(out)
    assert f"checkpoint folder {folder} is not writable (" in line and "nothing was trained" in line
    assert "compiling train step" not in out.stdout + out.stderr


# ------------------------------------------------------------------- truncated Hugging Face files
@pytest.fixture(scope="module")
def hf_weights(tmp_path_factory) -> Path:
    """A Hugging Face folder of the debug model (zeros), in several safetensors shards."""
    spec = ModelSpec.from_config(load_config("llama_debug.py").model)
    abstract = nnx.eval_shape(lambda: Decoder(spec, rngs=nnx.Rngs(params=0)))
    params = jax.tree.map(
        lambda a: np.zeros(a.shape, a.dtype), nnx.to_pure_dict(nnx.state(abstract, nnx.Param))
    )
    folder = tmp_path_factory.mktemp("hf") / "debug"
    save_hf_checkpoint(spec, params, folder, max_shard_bytes=200_000)
    assert (folder / INDEX_NAME).is_file()
    return folder


def _truncated_copy(folder: Path, dest: Path) -> Path:
    """A copy of `folder` whose second shard lost its second half, as an interrupted copy."""
    import shutil

    shutil.copytree(folder, dest)
    shard = sorted(dest.glob("model-*.safetensors"))[1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    return shard


def test_convert_names_a_truncated_shard(hf_weights, tmp_path):
    shard = _truncated_copy(hf_weights, tmp_path / "hf")
    line = one_line_error(jaxtrain("convert", "--from-hf", str(tmp_path / "hf")), "convert")
    assert f"{shard}: not a complete safetensors file (" in line
    assert "truncated or damaged (an interrupted download or copy): download or copy it again." in (
        line
    )


def test_init_from_a_truncated_shard_is_refused_before_compiling(hf_weights, tmp_path):
    shard = _truncated_copy(hf_weights, tmp_path / "hf")
    out = jaxtrain(
        *TRAIN,
        f"--config.run.dir={tmp_path / 'run'}",
        f"--config.checkpoint.init_from={tmp_path / 'hf'}",
    )
    line = one_line_error(out)
    assert f"checkpoint.init_from: {shard}: not a complete safetensors file (" in line
    assert "compiling train step" not in out.stdout + out.stderr


# --------------------------------------------------------------------------------- tokenizers
def test_a_missing_tokenizer_folder_is_refused_before_compiling(tmp_path):
    out = jaxtrain(
        *TRAIN,
        f"--config.run.dir={tmp_path / 'run'}",
        "--config.data.tokenizer=/no/such/dir",
        "--config.sample.prompt=Once",
    )
    line = one_line_error(out)
    assert "data.tokenizer='/no/such/dir' does not exist. Point data.tokenizer at the" in line
    assert "compiling train step" not in out.stdout + out.stderr


def test_the_tokenizer_is_checked_when_the_run_reads_it(tmp_path, monkeypatch, tiny_tokenizer):
    def check(**values):
        validate_data_config(load_config("llama_debug.py", values))

    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"^data.tokenizer='.*empty': .*empty holds no tokenizer"):
        check(**{"data.tokenizer": str(tmp_path / "empty"), "sample.prompt": "Once"})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^data.tokenizer='empty/tok' does not exist \(relative"):
        check(**{"data.tokenizer": "empty/tok", "sample.prompt": "Once"})
    check(**{"data.tokenizer": str(tiny_tokenizer), "sample.prompt": "Once"})
    check(**{"data.tokenizer": "meta-llama/Llama-3.1-8B", "sample.prompt": "Once"})  # a hub id
    check(**{"data.tokenizer": "/no/such/dir"})  # synthetic tokens, no sample: never read


# ----------------------------------------------------------------------------- other commands
@pytest.mark.parametrize(
    "argv",
    [
        ["export", "--run", "{run}", "--to", "hf", "{out}"],
        ["convert", "--from-hf", "{run}", "--to-hf", "{out}"],
        ["plot", "{run}", "--out", "{out}"],
    ],
    ids=["export", "convert", "plot"],
)
def test_an_output_folder_that_cannot_be_written_is_refused_first(
    tmp_path, read_only_folder, capsys, argv
):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n')
    out = read_only_folder / "out"
    assert cli.main([a.format(run=run, out=out) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"{out}: cannot write there (" in err and "nothing was written" in err
    assert not out.exists()


def test_sample_names_a_missing_tokenizer_before_reading_the_checkpoint(tmp_path, capsys):
    argv = ["sample", "--run", str(tmp_path), "--prompt", "Once", "--tokenizer", "/no/such/tok"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxtrain sample: error: --tokenizer='/no/such/tok' does not exist.")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
