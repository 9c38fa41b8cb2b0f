"""The Flax NNX model zoo: dense, mixture-of-experts, latent-attention, state-space and hybrid
decoders from one `ModelSpec`.

`spec/` holds the hyperparameters and everything known before model code runs, `layers/` the
primitives, `mixers/` the token mixers, `feedforward/` the MLPs and experts, `assembly/` the
decoder and hybrid stacks built from them, `presets/` the published sizes; `generation` samples
with a key/value cache. `build_model(spec)` is the one entry point.
"""

from jaxtrain.errors import ConfigError
from jaxtrain.models.assembly.decoder import Decoder, build_model
from jaxtrain.models.spec.hyperparameters import ModelSpec

__all__ = ["ConfigError", "Decoder", "ModelSpec", "build_model"]
