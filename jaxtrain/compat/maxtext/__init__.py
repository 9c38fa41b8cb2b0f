"""MaxText configs (native YAML or a Primus `framework: maxtext` module) -> jaxtrain settings."""

from jaxtrain._moved import forward_old_names

__getattr__ = forward_old_names(__name__)
