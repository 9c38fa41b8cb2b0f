"""Shared pieces of the Hugging Face logit-parity tests (dense and mixture-of-experts)."""

from __future__ import annotations

import jax
import numpy as np
import torch
from flax import nnx

from jaxtrain.models import Decoder, ModelSpec
from jaxtrain.models.moe import RouterBias


def hf_logits(model, tokens_BL: np.ndarray) -> np.ndarray:
    """A transformers model's logits for int tokens, as numpy."""
    with torch.no_grad():
        return model(torch.from_numpy(tokens_BL.astype(np.int64))).logits.numpy()


def max_diff(a, b) -> float:
    """Largest absolute elementwise difference."""
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def random_params(spec: ModelSpec) -> dict:
    """Parameters of `spec` drawn so that norms and biases matter too (not left at 1 / 0),
    the expert score bias of aux-free balancing included."""
    abstract = nnx.eval_shape(lambda: Decoder(spec, rngs=nnx.Rngs(params=0)))
    params = nnx.to_pure_dict(nnx.state(abstract, (nnx.Param, RouterBias)))
    rng = np.random.default_rng(1)

    def draw(path, x):
        name = path[-1].key
        if name == "scale":
            return rng.uniform(0.5, 1.5, x.shape).astype(np.float32)
        if name == "score_bias":  # large enough to change which experts win
            return rng.normal(0.0, 0.3, x.shape).astype(np.float32)
        return rng.normal(0.0, 0.1 if name == "bias" else spec.init_std, x.shape).astype(
            np.float32)

    return jax.tree_util.tree_map_with_path(draw, params)
