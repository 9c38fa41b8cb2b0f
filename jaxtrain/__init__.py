"""jaxtrain: JAX-native pretraining for decoder-only language models.

The public API, the same objects the command line uses:

    import jaxtrain

    cfg = jaxtrain.load_config("llama3-debug", train__steps=20)  # a file, a shipped name or preset
    trainer = jaxtrain.Trainer(cfg)                               # compiles, restores or initialises
    trainer.run(10)
    print(jaxtrain.sample(trainer, "The module", max_new_tokens=20))
    trainer.close()
    jaxtrain.export_hf(cfg.run.dir or f"runs/{cfg.run.name}", "out/")  # a transformers folder

Nothing heavy is imported until one of these is used, so `import jaxtrain` is cheap.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from jaxtrain import _moved

__version__ = "0.2.0"

# name -> (module, attribute): imported on first use.
_PUBLIC = {
    "Trainer": ("jaxtrain.trainer", "Trainer"),
    "load_config": ("jaxtrain.notebook", "load_config"),
    "sample": ("jaxtrain.notebook", "sample"),
    "export_hf": ("jaxtrain.commands.export", "export_hf"),
}
__all__ = ["Trainer", "export_hf", "load_config", "sample"]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        module, attribute = _PUBLIC[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value  # found directly from now on
        return value
    raise AttributeError(f"module 'jaxtrain' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


def _configs_from_source_checkout() -> None:
    """Makes `jaxtrain.configs` the repository's top-level configs/ when run from a checkout.

    An installed wheel holds the folder as jaxtrain/configs (setuptools package-dir); a source
    checkout used without installing it (PYTHONPATH=the clone) keeps it beside the package.
    """
    here = Path(__file__).resolve().parent
    sibling = here.parent / "configs" / "__init__.py"
    if (here / "configs").is_dir() or "jaxtrain.configs" in sys.modules or not sibling.is_file():
        return
    spec = importlib.util.spec_from_file_location(
        "jaxtrain.configs", sibling, submodule_search_locations=[str(sibling.parent)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["jaxtrain.configs"] = module
    spec.loader.exec_module(module)
    globals()["configs"] = module  # what an import of a subpackage sets on its parent


_configs_from_source_checkout()
_moved.install()
