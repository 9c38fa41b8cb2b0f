"""jaxtrain as a user installs it: a wheel (not an editable clone), used from another folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest
from conftest import REPO

PRIMUS_YAML = (
    REPO
    / "tests"
    / "fixtures"
    / "compat"
    / "Primus"
    / "examples"
    / "megatron"
    / "configs"
    / "MI300X"
    / "llama2_7B-BF16-pretrain.yaml"
)


def test_the_wheel_lists_every_package_folder():
    listed = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    folders = {
        ".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "jaxtrain").rglob("__init__.py")
    }
    assert listed == folders | {"jaxtrain.configs"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv (reusing this interpreter's dependencies) with jaxtrain installed from a
    wheel built from this checkout; returns its python."""
    root = tmp_path_factory.mktemp("install")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(root / "wheel"),
            str(REPO),
        ],
        check=True,
        timeout=300,
    )
    venv.create(root / "venv", system_site_packages=True, with_pip=True)
    python = root / "venv" / "bin" / "python"
    wheel = next((root / "wheel").glob("jaxtrain-*.whl"))
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        # A checkout on PYTHONPATH would count as jaxtrain already installed.
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        check=True,
        timeout=300,
    )
    return python


def _clean_env(cwd: Path) -> dict[str, str]:
    """An environment without this checkout on PYTHONPATH, as on a machine that only has the
    wheel."""
    return {"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu", "HOME": str(cwd)}


def run(python: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(python), "-m", "jaxtrain", *args],
        cwd=cwd,
        env=_clean_env(cwd),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow  # builds a wheel and a venv, then trains three steps from it
def test_an_installed_wheel_works_from_any_folder(installed, tmp_path):
    where = subprocess.run(
        [str(installed), "-c", "import jaxtrain.configs as c; print(c.__file__)"],
        cwd=tmp_path,
        env=_clean_env(tmp_path),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "site-packages/jaxtrain/configs/__init__.py" in where, where

    helped = run(installed, tmp_path, "--help")
    assert helped.returncode == 0 and "checkpoints" in helped.stdout and "export" in helped.stdout

    resolved = run(installed, tmp_path, "config", "llama2_7b.py", "--json")
    assert resolved.returncode == 0, resolved.stderr
    assert json.loads(resolved.stdout)["derived"]["num_params"] == 6_738_415_616

    primus = run(installed, tmp_path, "config", str(PRIMUS_YAML), "--json")
    assert primus.returncode == 0, primus.stderr
    assert json.loads(primus.stdout)["config"]["model"]["num_layers"] == 32

    trained = run(
        installed,
        tmp_path,
        "--config",
        "llama_debug.py",
        "--config.data.kind=synthetic",
        "--config.train.steps=3",
    )
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert (tmp_path / "runs" / "llama-debug" / "checkpoints" / "3").is_dir()
    saved = json.loads((tmp_path / "runs" / "llama-debug" / "config.json").read_text())
    assert saved["run"]["dir"] == "runs/llama-debug"  # the directory used, not ""
