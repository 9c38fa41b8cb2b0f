"""The command line as a newcomer meets it: help, the default command, config names from any
folder, and no notices that are not jaxtrain's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from jaxtrain import cli
from jaxtrain.config import loader as config_lib
from jaxtrain.errors import ConfigError


def jaxtrain(*args: str, cwd=REPO, prelude: str = "") -> subprocess.CompletedProcess:
    """`python -m jaxtrain ARGS` (after `prelude`, Python run first in the same process)."""
    code = f"{prelude}\nimport sys\nfrom jaxtrain.cli import main\nsys.exit(main({list(args)!r}))"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["help"], []])
def test_help_lists_every_command(argv, capsys):
    assert cli.main(argv) == (2 if not argv else 0)
    out = capsys.readouterr().out
    for name, summary in cli.COMMANDS.items():
        assert name in out and summary.split()[0] in out
    assert "train is the default command" in out


def test_every_command_module_gives_its_options_and_its_handler():
    parser = cli.build_parser()
    for name in cli.COMMANDS:
        module = cli.command_module(name)
        assert callable(module.add_arguments) and callable(module.handle), name
    args = parser.parse_args(["runs", "a", "b"])
    assert args.handler is cli.command_module("runs").handle and args.runs == ["a", "b"]


def test_help_imports_no_command_and_no_jax():
    code = (
        "import sys\nfrom jaxtrain.cli import main\nmain(['--help'])\n"
        "heavy = [m for m in sys.modules if m == 'jax' or m.startswith('jaxtrain.commands.')]\n"
        "print(sorted(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "['jaxtrain.commands.options']"


def test_a_command_and_the_default_command_explain_themselves(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--config", "llama_debug.py", "--help"])  # the train command's help
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "usage: jaxtrain train" in out and "--num-processes" in out
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    assert "--config FILE" in capsys.readouterr().out


def test_help_command_shows_a_commands_options(capsys):
    with pytest.raises(SystemExit):
        cli.main(["help", "export"])
    assert "usage: jaxtrain export" in capsys.readouterr().out


def test_overrides_and_foreign_overrides_are_split_from_the_options():
    args = cli.parse(
        [
            "--config",
            "x.yaml",
            "--config.train.steps",
            "3",
            "max_steps=20",
            "--config.run.dir=r",
            "--allow-unsupported",
        ]
    )
    assert args.command == "train" and args.config == "x.yaml" and args.allow_unsupported
    assert args.overrides == ["--config.train.steps=3", "--config.run.dir=r"]
    assert args.native == ["max_steps=20"]
    sample = cli.parse(["sample", "--run", "r", "--prompt", "a=b"])
    assert sample.prompt == "a=b"  # only config commands take key=value overrides


@pytest.mark.parametrize("name", ["llama2_7b.py", "llama2_7b", "llama2-7b", "configs/llama2_7b.py"])
def test_shipped_configs_resolve_by_name_from_any_folder(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert config_lib.find_config_file(name) == config_lib.packaged_configs() / "llama2_7b.py"
    assert config_lib.load_config(name).model.num_layers == 32


def test_an_unknown_config_name_suggests_the_close_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"'lama2-7b' does not exist .* similar names: "
        r"llama2_7b\.py",
    ):
        config_lib.find_config_file("lama2-7b")
    assert "llama3_1_405b.py" in config_lib.preset_names()


def test_a_config_importing_the_old_configs_folder_gets_the_new_import(tmp_path, monkeypatch):
    # As outside a clone: the repository root (where configs/ is a folder) is not on the path.
    monkeypatch.setattr(
        sys, "path", [p for p in sys.path if Path(p or ".").resolve() != REPO.resolve()]
    )
    monkeypatch.delitem(sys.modules, "configs", raising=False)
    own = tmp_path / "mine.py"
    own.write_text("from configs import base\n\ndef get_config():\n    return base.get_config()\n")
    with pytest.raises(ConfigError, match="write `from jaxtrain.configs import base`"):
        config_lib.load_config(str(own))
    own.write_text(
        "from jaxtrain.configs import base\n\ndef get_config():\n    return base.get_config()\n"
    )
    assert config_lib.load_config(str(own)).train.steps == 100


def test_config_lists_the_shipped_configs(capsys):
    assert cli.main(["config", "--list"]) == 0
    listed = capsys.readouterr().out.split()
    assert "llama_debug.py" in listed and "base.py" in listed and "presets_common.py" not in listed


def test_no_library_notice_about_a_missing_pytorch(tmp_path):
    """transformers' 'PyTorch was not found' advice is not printed on every run."""
    out = jaxtrain(
        "config", "llama_debug.py", cwd=tmp_path, prelude="import sys; sys.modules['torch'] = None"
    )
    assert out.returncode == 0, out.stderr
    assert "PyTorch was not found" not in out.stdout + out.stderr
    assert "# num_params: 139,584" in out.stdout
