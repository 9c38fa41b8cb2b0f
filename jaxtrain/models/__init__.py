"""The Flax NNX model zoo: one decoder that covers the dense families by configuration."""

from jaxtrain.errors import ConfigError
from jaxtrain.models.assembly.decoder import Decoder, build_model
from jaxtrain.models.spec.hyperparameters import ModelSpec

__all__ = ["ConfigError", "Decoder", "ModelSpec", "build_model"]
