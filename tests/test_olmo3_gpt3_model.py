"""OLMo 3 and GPT-3 in jaxtrain's own paths: decoding with the key/value cache (GPT-3's learned
positions follow the cache index), remat, unrolled layers and the masked-softmax kernel give
the forward's logits, training sharded over fsdp x tensor equals one device (OLMo's qk-norm
spans the heads the tensor axis splits), and the spec refuses what the blocks cannot do.
Transformers parity is in tests/test_olmo3_parity.py and tests/test_gpt3_parity.py."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
import training_helpers

from jaxtrain.errors import ConfigError
from jaxtrain.models import build_model
from jaxtrain.models.presets.registry import model_spec

PRESETS = ["olmo3-debug", "gpt3-debug"]


def _tokens(length: int) -> jnp.ndarray:
    return jnp.asarray(np.random.default_rng(0).integers(0, 512, (2, length)), jnp.int32)


@pytest.mark.parametrize("preset", PRESETS)
def test_cached_decoding_matches_the_full_forward(preset):
    # 24 tokens: OLMo's sliding block (window 8) drops keys while decoding.
    model = build_model(model_spec(preset))
    tokens_BL = _tokens(24)
    full_BLV = model(tokens_BL)
    cache = model.init_cache(2, 32)
    h_BLD, cache = model.hidden_states(tokens_BL[:, :13], cache=cache, cache_index=0)
    outs = [model.logits(h_BLD)]
    for i in range(13, 24):
        h_BLD, cache = model.hidden_states(tokens_BL[:, i : i + 1], cache=cache, cache_index=i)
        outs.append(model.logits(h_BLD))
    np.testing.assert_allclose(jnp.concatenate(outs, 1), full_BLV, atol=1e-4)


@pytest.mark.parametrize("preset", PRESETS)
def test_remat_unrolled_layers_and_dot_attention_give_the_same_logits(preset):
    spec = model_spec(preset)
    tokens_BL = _tokens(20)
    reference = build_model(spec)(tokens_BL)
    for overrides in (dict(remat="full"), dict(scan_layers=False), dict(attention_impl="dot")):
        out = build_model(dataclasses.replace(spec, **overrides))(tokens_BL)
        np.testing.assert_allclose(out, reference, atol=1e-5)


@pytest.mark.parametrize("preset", PRESETS)
def test_sharded_training_matches_one_device(preset):
    spec = model_spec(preset)
    one = training_helpers.train(spec, training_helpers.mesh(), 3)[0]
    sizes = dict(ici_fsdp=4, ici_tensor=2)
    sharded, _, _, shardings, _ = training_helpers.train(spec, training_helpers.mesh(**sizes), 3)
    np.testing.assert_allclose(sharded, one, rtol=1e-4)
    assert one[-1] < one[0]
    if preset == "gpt3-debug":  # the position table: rows whole, columns over fsdp
        assert tuple(shardings["position_embed"]["embedding"].spec) == (None, "fsdp")


@pytest.mark.parametrize(
    "change, named",
    [
        (dict(pre_norms=False), "model.pre_norms=False leaves the blocks without norms"),
        (dict(max_seq_len=1024), "model.learned_positions=512 has no row for positions up to"),
        (dict(rope_scaling="linear", rope_factor=2.0), "model.rope_scaling='linear' shapes rotary"),
        (dict(norm_type="layer_norm"), "model.norm_type='layer_norm' is not one of"),
        (
            dict(num_experts=4, moe_intermediate_size=32),
            "model.norm_type='layer' applies to dense transformer blocks only",
        ),
    ],
)
def test_gpt3_parts_the_blocks_cannot_take_are_refused(change, named):
    with pytest.raises(ConfigError, match=named):
        model_spec("gpt3-debug", **change)


def test_olmo3_qk_norm_across_heads_needs_qk_norm():
    with pytest.raises(ConfigError, match="model.qk_norm_across_heads=True says how"):
        model_spec("olmo3-debug", qk_norm=False)
