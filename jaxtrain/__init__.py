"""jaxtrain: JAX-native pretraining for decoder-only language models."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from jaxtrain import _moved

__version__ = "0.1.0"


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
