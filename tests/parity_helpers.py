"""Shared pieces of the Hugging Face logit-parity tests (dense and mixture-of-experts)."""

from __future__ import annotations

import jax
import numpy as np
import torch
from flax import nnx

from jaxtrain.models import Decoder, ModelSpec
from jaxtrain.models.feedforward.moe import RouterBias


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
        return rng.normal(0.0, 0.1 if name == "bias" else spec.init_std, x.shape).astype(np.float32)

    return jax.tree_util.tree_map_with_path(draw, params)


def tokens(vocab: int, length: int) -> np.ndarray:
    """The fixed int32 token batch [2, length] every parity test feeds both models."""
    return np.random.default_rng(0).integers(0, vocab, (2, length), dtype=np.int32)


def random_hf_model(
    config,
    std: float = 0.2,
    param_std: dict[str, float] | None = None,
    buffer_std: dict[str, float] | None = None,
):
    """A transformers causal LM (eager attention) built from `config` with weights that all
    matter: norm weights U(0.5, 1.5), parameters whose name ends in a `param_std` key
    N(0, that std), the rest N(0, `std`); buffers ending in a `buffer_std` key N(0, that std)."""
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            special = [s for suffix, s in (param_std or {}).items() if name.endswith(suffix)]
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, special[0] if special else std)
        for name, buffer in model.named_buffers():
            for suffix, s in (buffer_std or {}).items():
                if name.endswith(suffix):
                    buffer.normal_(0.0, s)
    return model


def exported_hf_model(spec: ModelSpec, params: dict, path, architecture: str):
    """`params` written with save_hf_checkpoint and loaded back by transformers (eager), checked
    to be the `architecture` class."""
    import transformers

    from jaxtrain.interop.hf import save_hf_checkpoint

    save_hf_checkpoint(spec, params, path)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="eager"
    ).eval()
    assert type(model).__name__ == architecture
    return model


def assert_logits_match(
    ours_BLV, hf_model, tokens_BL: np.ndarray, label: str = "", tolerance: float = 1e-4
) -> None:
    """jaxtrain's logits equal the transformers model's within `tolerance`, and those are large
    enough for the tolerance to bite; `label` names the case in a failure."""
    ref = hf_logits(hf_model, tokens_BL)
    assert float(np.abs(ref).max()) > 1.0, label
    diff = max_diff(ours_BLV, ref)
    assert diff < tolerance, f"{label}: logits differ by {diff:.3g} (tolerance {tolerance:g})"
