"""Qwen3-Next and Qwen3.5 in jaxtrain's own paths: decoding with the Gated DeltaNet state and
the gated attention's key/value cache, remat, unrolled layers and the masked-softmax kernel give
the forward's logits, training sharded over fsdp x tensor equals one device, and the spec
refuses the new switches where they cannot work. Transformers parity is in
tests/test_qwen3_next_parity.py."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
import training_helpers

from jaxtrain.errors import ConfigError
from jaxtrain.models import build_model
from jaxtrain.models.presets.registry import model_spec

# Qwen3.5-MoE's blocks are Qwen3-Next's (only the conversion differs): the two cover all parts.
PRESETS = ["qwen3-next-debug", "qwen3.5-debug"]


def _tokens(length: int) -> jnp.ndarray:
    return jnp.asarray(np.random.default_rng(0).integers(0, 512, (2, length)), jnp.int32)


@pytest.mark.parametrize("preset", PRESETS)
def test_cached_decoding_matches_the_full_forward(preset):
    model = build_model(model_spec(preset))
    tokens_BL = _tokens(20)
    full_BLV = model(tokens_BL)
    cache = model.init_cache(2, 32)
    h_BLD, cache = model.hidden_states(tokens_BL[:, :13], cache=cache, cache_index=0)
    outs = [model.logits(h_BLD)]
    for i in range(13, 20):
        h_BLD, cache = model.hidden_states(tokens_BL[:, i : i + 1], cache=cache, cache_index=i)
        outs.append(model.logits(h_BLD))
    np.testing.assert_allclose(jnp.concatenate(outs, 1), full_BLV, atol=1e-4)


def test_remat_unrolled_layers_and_dot_attention_give_the_same_logits():
    spec = model_spec("qwen3-next-debug")
    tokens_BL = _tokens(20)
    reference = build_model(spec)(tokens_BL)
    for overrides in (dict(remat="full"), dict(scan_layers=False), dict(attention_impl="dot")):
        out = build_model(dataclasses.replace(spec, **overrides))(tokens_BL)
        np.testing.assert_allclose(out, reference, atol=1e-5)


def test_sharded_training_matches_one_device():
    spec = model_spec("qwen3-next-debug")
    one = training_helpers.train(spec, training_helpers.mesh(), 3)[0]
    sizes = dict(ici_fsdp=4, ici_tensor=2)
    sharded = training_helpers.train(spec, training_helpers.mesh(**sizes), 3)[0]
    np.testing.assert_allclose(sharded, one, rtol=1e-4)
    assert one[-1] < one[0]


@pytest.mark.parametrize(
    "change, named",
    [
        (dict(partial_rotary_factor=0.2), "model.partial_rotary_factor=0.2 rotates 3 of"),
        (dict(partial_rotary_factor=0.0), "model.partial_rotary_factor"),
        (dict(moe_shared_experts=0), "model.moe_shared_gate=True gates the shared experts"),
    ],
)
def test_settings_that_cannot_work_are_named(change, named):
    with pytest.raises(ConfigError, match=named):
        model_spec("qwen3-next-debug", **change)
