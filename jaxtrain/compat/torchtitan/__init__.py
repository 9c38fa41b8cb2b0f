"""TorchTitan job configs (native TOML or a Primus `framework: torchtitan` module) -> jaxtrain."""

from jaxtrain._moved import forward_old_names

__getattr__ = forward_old_names(__name__)
