"""The package root's API (`jaxtrain.Trainer`, `load_config`, `sample`, `export_hf`) and the old
module paths that still import, with a warning, for one release after the package was regrouped."""

import subprocess
import sys

import pytest

import jaxtrain
from jaxtrain import _moved
from jaxtrain.config import loader as config_lib


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_root_names_are_the_objects_the_command_line_uses():
    from jaxtrain import Trainer, export_hf, load_config, sample
    from jaxtrain.commands.export import export_hf as export_command
    from jaxtrain.notebook import load_config as notebook_load
    from jaxtrain.notebook import sample as notebook_sample
    from jaxtrain.trainer import Trainer as trainer_class

    assert Trainer is trainer_class and export_hf is export_command
    assert load_config is notebook_load and sample is notebook_sample
    assert set(jaxtrain.__all__) <= set(dir(jaxtrain))
    with pytest.raises(AttributeError, match="no attribute 'Trainr'"):
        jaxtrain.Trainr  # noqa: B018


def test_importing_the_package_imports_no_jax():
    done = _python(
        "import sys, jaxtrain; print(sorted(m for m in ('jax', 'flax') if m in sys.modules))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["llama2-7b", "llama2_7b", "llama2_7b.py"])
def test_a_preset_name_means_the_shipped_file_as_on_the_command_line(name):
    cfg = jaxtrain.load_config(name, train__steps=3)
    cli = config_lib.load_config(str(config_lib.find_config_file(name)), ["train.steps=3"])
    assert cfg.to_dict() == cli.to_dict()
    # The file's own settings, not base.py's with only the model swapped in.
    assert cfg.model.preset == "llama2-7b" and cfg.model.dtype == "bfloat16"
    assert cfg.data.kind != "synthetic"


def test_an_old_module_path_imports_the_moved_module_and_warns_at_the_import_line():
    done = _python(
        "from jaxtrain.checkpoint_read import __name__ as name\n"
        "import jaxtrain.sharding as old, jaxtrain.parallel.sharding as new\n"
        "print(name, old is new)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["jaxtrain.checkpoint.read", "True"]
    assert (
        "<string>:1: DeprecationWarning: jaxtrain.checkpoint_read moved to jaxtrain.checkpoint.read"
        in done.stderr
    )
    assert (
        "<string>:2: DeprecationWarning: jaxtrain.sharding moved to jaxtrain.parallel.sharding"
        in (done.stderr)
    )


def test_a_package_that_took_an_old_module_name_forwards_its_names():
    done = _python(
        "from jaxtrain.config import load_config\n"
        "from jaxtrain.config.loader import load_config as new\n"
        "print(load_config is new)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
    assert "jaxtrain.config.load_config moved to jaxtrain.config.loader.load_config" in done.stderr
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        from jaxtrain import config

        config.no_such_name  # noqa: B018


def test_every_old_path_reaches_its_new_module():
    # An old module path is now either nothing (it imports the module at its new path) or a
    # package of that concern, which forwards the old module's names.
    code = (
        "import importlib\n"
        f"for old, new in {dict(_moved.MOVED)!r}.items():\n"
        "    module, moved = importlib.import_module(old), importlib.import_module(new)\n"
        "    names = [n for n in vars(moved) if not n.startswith('_')]\n"
        "    if module is not moved and any(getattr(module, n) is not vars(moved)[n] for n in names):\n"
        "        print('wrong', old)\n"
        "print('checked')"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "checked"


def test_the_old_sampler_path_names_where_it_went():
    with pytest.raises(ImportError, match="jaxtrain.models.generation"):
        import jaxtrain.sample  # noqa: F401
