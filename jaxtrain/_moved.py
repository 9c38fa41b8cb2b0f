"""Old import paths of the modules that moved when the package was grouped by concern (0.2).

Each old path still imports, and gives the module at its new path with a DeprecationWarning naming
that path; a package that took an old module's name (`jaxtrain.config`, `jaxtrain.checkpoint`,
...) forwards the old module's names the same way. Both go in the release after 0.2.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable
from typing import Any

MOVED = {
    "jaxtrain.config": "jaxtrain.config.loader",
    "jaxtrain.config_ranges": "jaxtrain.config.ranges",
    "jaxtrain.mesh_check": "jaxtrain.config.mesh_check",
    "jaxtrain.checkpoint": "jaxtrain.checkpoint.manager",
    "jaxtrain.checkpoint_items": "jaxtrain.checkpoint.items",
    "jaxtrain.checkpoint_read": "jaxtrain.checkpoint.read",
    "jaxtrain.checksums": "jaxtrain.checkpoint.checksums",
    "jaxtrain.saved_run": "jaxtrain.checkpoint.saved_run",
    "jaxtrain.init_from": "jaxtrain.checkpoint.init_from",
    "jaxtrain.train.resume": "jaxtrain.checkpoint.resume",
    "jaxtrain.sharding": "jaxtrain.parallel.sharding",
    "jaxtrain.distributed": "jaxtrain.parallel.distributed",
    "jaxtrain.peer_watch": "jaxtrain.parallel.peer_watch",
    "jaxtrain.backend": "jaxtrain.hardware.backend",
    "jaxtrain.perf": "jaxtrain.hardware.peaks",
    "jaxtrain.host_info": "jaxtrain.hardware.host_info",
    "jaxtrain.host_malloc": "jaxtrain.hardware.host_malloc",
    "jaxtrain.run_lock": "jaxtrain.rundir.lock",
    "jaxtrain.metrics": "jaxtrain.rundir.metrics",
    "jaxtrain.disk_full": "jaxtrain.rundir.disk_full",
    "jaxtrain.memory_plan": "jaxtrain.planning.memory",
    "jaxtrain.compile_plan": "jaxtrain.planning.compile",
    "jaxtrain.device_plan": "jaxtrain.planning.devices",
    "jaxtrain.config_report": "jaxtrain.commands.config",
    "jaxtrain.run_summary": "jaxtrain.commands.runs",
    "jaxtrain.checkpoint_listing": "jaxtrain.commands.checkpoints",
    "jaxtrain.export": "jaxtrain.commands.export",
    "jaxtrain.plot": "jaxtrain.commands.plot",
    "jaxtrain.bench": "jaxtrain.commands.bench",
    "jaxtrain.interop.convert": "jaxtrain.commands.convert",
    "jaxtrain.models.spec": "jaxtrain.models.spec.hyperparameters",
    "jaxtrain.models.spec_checks": "jaxtrain.models.spec.checks",
    "jaxtrain.models.block_sizes": "jaxtrain.models.spec.block_sizes",
    "jaxtrain.models.delta_sizes": "jaxtrain.models.spec.delta_sizes",
    "jaxtrain.models.layer_pattern": "jaxtrain.models.spec.layer_pattern",
    "jaxtrain.models.block_pattern": "jaxtrain.models.spec.block_pattern",
    "jaxtrain.models.attention": "jaxtrain.models.mixers.attention",
    "jaxtrain.models.blockwise_attention": "jaxtrain.models.mixers.blockwise_attention",
    "jaxtrain.models.mla": "jaxtrain.models.mixers.mla",
    "jaxtrain.models.mamba": "jaxtrain.models.mixers.mamba",
    "jaxtrain.models.mamba2": "jaxtrain.models.mixers.mamba2",
    "jaxtrain.models.ssm_scan": "jaxtrain.models.mixers.ssm_scan",
    "jaxtrain.models.delta_rule": "jaxtrain.models.mixers.delta_rule",
    "jaxtrain.models.gated_delta": "jaxtrain.models.mixers.gated_delta",
    "jaxtrain.models.kda": "jaxtrain.models.mixers.kda",
    "jaxtrain.models.linear_mixer": "jaxtrain.models.mixers.linear_mixer",
    "jaxtrain.models.mlp": "jaxtrain.models.feedforward.mlp",
    "jaxtrain.models.moe": "jaxtrain.models.feedforward.moe",
    "jaxtrain.models.layers": "jaxtrain.models.layers.basic",
    "jaxtrain.models.products": "jaxtrain.models.layers.products",
    "jaxtrain.models.fp8": "jaxtrain.models.layers.fp8",
    "jaxtrain.models.rope": "jaxtrain.models.layers.rope",
    "jaxtrain.models.decoder": "jaxtrain.models.assembly.decoder",
    "jaxtrain.models.hybrid": "jaxtrain.models.assembly.hybrid",
    "jaxtrain.models.pipeline": "jaxtrain.models.assembly.pipeline",
    "jaxtrain.models.presets": "jaxtrain.models.presets.registry",
    "jaxtrain.models.preset_families": "jaxtrain.models.presets.families",
    "jaxtrain.models.presets_debug": "jaxtrain.models.presets.debug",
    "jaxtrain.models.presets_ssm": "jaxtrain.models.presets.ssm",
    "jaxtrain.compat.report": "jaxtrain.compat.common.report",
    "jaxtrain.compat.target": "jaxtrain.compat.common.target",
    "jaxtrain.compat.known": "jaxtrain.compat.common.known",
    "jaxtrain.compat.architectures": "jaxtrain.compat.common.architectures",
    "jaxtrain.compat.yaml_tree": "jaxtrain.compat.common.yaml_tree",
    "jaxtrain.compat.fp8": "jaxtrain.compat.torchtitan.fp8",
    "jaxtrain.compat.pipeline_keys": "jaxtrain.compat.common.pipeline_layout",
    "jaxtrain.compat.megatron": "jaxtrain.compat.megatron.adapter",
    "jaxtrain.compat.megatron_keys": "jaxtrain.compat.megatron.ignored_keys",
    "jaxtrain.compat.megatron_layers": "jaxtrain.compat.megatron.expert_layers",
    "jaxtrain.compat.megatron_linear": "jaxtrain.compat.megatron.linear_attention",
    "jaxtrain.compat.megatron_mamba": "jaxtrain.compat.megatron.mamba",
    "jaxtrain.compat.megatron_mla": "jaxtrain.compat.megatron.mla",
    "jaxtrain.compat.megatron_moe": "jaxtrain.compat.megatron.moe",
    "jaxtrain.compat.megatron_train": "jaxtrain.compat.megatron.training",
    "jaxtrain.compat.maxtext": "jaxtrain.compat.maxtext.adapter",
    "jaxtrain.compat.maxtext_files": "jaxtrain.compat.maxtext.files",
    "jaxtrain.compat.maxtext_model": "jaxtrain.compat.maxtext.model",
    "jaxtrain.compat.torchtitan": "jaxtrain.compat.torchtitan.adapter",
    "jaxtrain.compat.torchtitan_models": "jaxtrain.compat.torchtitan.model",
    "jaxtrain.compat.primus_yaml": "jaxtrain.compat.primus.experiment",
    "jaxtrain.compat.prime_rl": "jaxtrain.compat.prime_rl.adapter",
    "jaxtrain.compat.hf_json": "jaxtrain.compat.huggingface.adapter",
}

# Old module paths that are now names of the public API, so they cannot import a module.
RENAMED_TO_API = {
    "jaxtrain.sample": "jaxtrain.sample is now the function jaxtrain.sample(trainer_or_run_dir, "
    "prompt, ...); the generation module it named moved to jaxtrain.models.generation",
}


def _warn(old: str, new: str) -> None:
    # stacklevel 3 is the frame past this module's caller; warnings.warn itself skips the import
    # machinery's frames, so the warning names the user's import line.
    warnings.warn(
        f"{old} moved to {new}; import it from there (the old path goes in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )


class _MovedModuleLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a placeholder, replaced in sys.modules by the module at its new path

    def exec_module(self, module: Any) -> None:
        old = module.__name__
        _warn(old, MOVED[old])
        # The import system returns whatever sys.modules holds under the old name once this ends.
        sys.modules[old] = importlib.import_module(MOVED[old])


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds an old module path (asked only after the real finders found nothing there)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None):
        if fullname in RENAMED_TO_API:
            raise ImportError(RENAMED_TO_API[fullname], name=fullname)
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedModuleLoader())


def install() -> None:
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())


def forward_old_names(package: str) -> Callable[[str], Any]:
    """A module `__getattr__` for a package that took an old module's name: the old module's
    names are found at its new path, with a DeprecationWarning."""
    new = MOVED[package]

    def __getattr__(name: str) -> Any:
        if not name.startswith("__"):
            target = importlib.import_module(new)
            if hasattr(target, name):
                _warn(f"{package}.{name}", f"{new}.{name}")
                return getattr(target, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
