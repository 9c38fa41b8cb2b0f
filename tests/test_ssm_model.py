"""Mamba-1, Mamba-2 and hybrid stacks: parameter counts against transformers, decoding with
the conv / scan state, sharded training against one device, and the pattern's errors."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import training_helpers
from flax import nnx

from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf_config import hf_config_from_spec
from jaxtrain.models import build_model
from jaxtrain.models.generation import generate
from jaxtrain.models.presets.registry import PRESETS, PUBLISHED_PARAMS, model_spec

# Zebra-Llama has no transformers model to count against: tests/test_compat_linear.py counts it.
SSM_PRESETS = sorted(
    name
    for name, p in PRESETS.items()
    if p.get("block_pattern") and p.get("family") != "zebra_llama"
)
# Two sublayers, one Gated DeltaNet and one Kimi delta attention, short chunks so the chunked
# delta rule runs more than one chunk at these lengths.
DELTA_DEBUG = dict(num_layers=2, block_pattern="GK", linear_chunk=4)


def _hf_count(**config) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = dict(config)
    for key in ("architectures", "dtype", "torch_dtype"):
        config.pop(key, None)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**config)
        )
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", SSM_PRESETS)
def test_every_ssm_preset_counts_like_transformers(name):
    spec = model_spec(name)
    assert _hf_count(**hf_config_from_spec(spec)) == spec.num_params()


def test_published_ssm_counts_from_independent_configs():
    # state-spaces/mamba2-370m's config.json, and Primus' mamba_370M.yaml as Mamba2Config.
    mamba2 = dict(
        model_type="mamba2",
        vocab_size=50288,
        hidden_size=1024,
        num_hidden_layers=48,
        state_size=128,
        n_groups=1,
        head_dim=64,
        num_heads=32,
        tie_word_embeddings=True,
    )
    assert _hf_count(**mamba2) == PUBLISHED_PARAMS["mamba2-370m"]
    primus = dict(mamba2, vocab_size=50304, state_size=16, n_groups=8)
    assert _hf_count(**primus) == PUBLISHED_PARAMS["mamba-370m"]
    assert round(PUBLISHED_PARAMS["mamba-370m"] / 1e6) == 368


@pytest.mark.parametrize(
    "name, extra",
    [
        ("mamba2-debug", {}),
        ("mamba-debug", {}),
        ("nemotron-h-debug", {}),
        ("nemotron-h-moe-debug", {}),
        ("zebra-llama-debug", DELTA_DEBUG),
    ],
)
def test_incremental_decoding_equals_the_full_forward(name, extra):
    spec = model_spec(name, ssm_chunk_size=4, init_std=0.1, **extra)
    model = build_model(spec, seed=1)
    toks = jnp.asarray(np.random.default_rng(0).integers(0, spec.vocab_size, (2, 11)), jnp.int32)
    full = model(toks)
    cache = model.init_cache(2, 16)
    h, cache = model.hidden_states(toks[:, :6], cache=cache, cache_index=0)
    steps = [model.logits(h)]
    for i in range(6, 11):
        h, cache = model.hidden_states(toks[:, i : i + 1], cache=cache, cache_index=i)
        steps.append(model.logits(h))
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, atol=1e-4, rtol=1e-4)
    assert float(jnp.abs(full).max()) > 0.1


# Three documents packed in one row (boundaries inside chunks of 4 and on a chunk edge), and a
# row holding one document.
PACKED_DOCS = (7, 9, 5)


@pytest.mark.parametrize(
    "name, extra",
    [
        ("mamba2-debug", {}),
        ("mamba-debug", {}),
        ("nemotron-h-debug", {}),
        ("zebra-llama-debug", DELTA_DEBUG),
    ],
)
def test_packed_documents_equal_each_document_alone(name, extra):
    spec = model_spec(name, ssm_chunk_size=4, init_std=0.1, **extra)
    model = build_model(spec, seed=2)
    length = sum(PACKED_DOCS)
    toks = jnp.asarray(
        np.random.default_rng(1).integers(0, spec.vocab_size, (2, length)), jnp.int32
    )
    segment = np.array([np.repeat(np.arange(len(PACKED_DOCS)), PACKED_DOCS), np.full(length, 5)])
    starts = np.cumsum((0,) + PACKED_DOCS)
    positions = np.concatenate([np.arange(n) for n in PACKED_DOCS])
    positions = np.stack([positions, np.arange(length)])
    packed = np.asarray(model(toks, jnp.asarray(positions), jnp.asarray(segment)))
    for start, end in zip(starts[:-1], starts[1:]):
        alone = np.asarray(model(toks[:1, start:end]))
        np.testing.assert_allclose(packed[0, start:end], alone[0], atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(packed[1], np.asarray(model(toks[1:]))[0], atol=1e-4, rtol=1e-4)
    # Without segment ids the state runs on into the second document: the test can tell.
    unmasked = np.asarray(model(toks[:1], jnp.asarray(positions[:1])))
    assert np.abs(unmasked[0, starts[1] :] - packed[0, starts[1] :]).max() > 1e-3


def test_greedy_generation_of_a_hybrid_equals_repeated_full_forward():
    model = build_model(model_spec("nemotron-h-debug", init_std=0.1), seed=3)
    prompt = [5, 17, 42]
    generated = generate(model, prompt, max_new_tokens=5)
    tokens = list(prompt)
    for _ in range(5):
        tokens.append(int(jnp.argmax(model(jnp.asarray([tokens]))[0, -1])))
    assert generated == tokens[3:]


def test_pattern_repeats_are_scanned_not_unrolled():
    spec = model_spec("nemotron-h-debug", num_layers=12, block_pattern="M*M-" * 3)
    model = nnx.eval_shape(lambda: build_model(spec))
    stacks = model.blocks.positions()
    assert [s.kind for s in stacks] == ["mamba", "attention", "mamba", "mlp"]
    assert stacks[0].mixer.in_proj.kernel.shape[0] == 3  # three repeats, one scan step each
    assert spec.num_params() == sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


@pytest.mark.parametrize(
    "pattern, message",
    [
        ("M*G-", "has G \\(gated delta net / Kimi delta attention\\) sublayers but "),
        ("M*K-", "model.linear_num_key_heads=0; set the model.linear_\\* sizes"),
        ("M*x-", "character 'x' is not one of"),
        ("M*M", "has 3 sublayers but model.num_layers=4"),
    ],
)
def test_pattern_errors_name_the_character(pattern, message):
    with pytest.raises(ConfigError, match=message):
        model_spec("nemotron-h-debug", block_pattern=pattern)


@pytest.mark.parametrize("name", ["mamba2-debug", "nemotron-h-debug", "nemotron-h-moe-debug"])
@pytest.mark.parametrize(
    "sizes, rules", [(dict(ici_fsdp=8), "fsdp"), (dict(ici_fsdp=4, ici_tensor=2), "fsdp_tensor")]
)
def test_sharded_training_matches_one_device(name, sizes, rules):
    spec = model_spec(name, ssm_chunk_size=8)
    one = training_helpers.train(spec, training_helpers.mesh(), 3, rules=rules)[0]
    sharded = training_helpers.train(spec, training_helpers.mesh(**sizes), 3, rules=rules)[0]
    np.testing.assert_allclose(sharded, one, rtol=1e-4)
    assert one[-1] < one[0]


def test_mamba1_trains_with_remat():
    spec = model_spec("mamba-debug", remat="full", ssm_chunk_size=8)
    losses = training_helpers.train(spec, training_helpers.mesh(), 3)[0]
    assert losses[-1] < losses[0]


def test_flops_count_the_scan():
    spec = model_spec("mamba2-370m")
    no_scan = dataclasses.replace(spec, ssm_state_size=1)
    assert spec.flops_per_token(2048) > no_scan.flops_per_token(2048)
    # 6 x matmul weights dominate at 370M; the scan adds a few percent.
    matmul = 6 * (spec.num_params() - spec.vocab_size * spec.hidden_size)
    assert 1.0 < spec.flops_per_token(2048) / (matmul + 6 * spec.vocab_size * 1024) < 1.3


def test_megatron_hybrid_allocation():
    from jaxtrain.compat.megatron.mamba import allocate_layers

    # 2 attention among 8 Mamba: sections of 8/3, an attention sublayer where the running
    # remainder drops below 1/2.
    assert allocate_layers(10, 0.2, 0.0) == "MMM*MM*MMM"
    assert allocate_layers(9, 0.0, 0.0) == "M" * 9
    # The 48-sublayer example in Megatron's mamba_hybrid_layer_allocation.py.
    assert allocate_layers(48, 0.25, 0.25) == "MM-*MM-*MM*-MM*-MM*-MM*-M*M-M*M-M*M-M*M-*MM-*MM-"


def test_delta_rule_sublayers_are_scanned_and_counted():
    spec = model_spec("zebra-llama-debug", num_layers=16, block_pattern="*-G-K-M-" * 2)
    model = nnx.eval_shape(lambda: build_model(spec))
    stacks = model.blocks.positions()
    assert [s.kind for s in stacks][2:6] == ["gdn", "mlp", "kda", "mlp"]
    assert stacks[2].mixer.q_proj.kernel.shape[0] == 2  # two repeats of the period
    assert spec.num_params() == sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    # Their delta rule is priced: more FLOPs than the projections alone.
    gk = model_spec("zebra-llama-debug", **DELTA_DEBUG)
    head = 6.0 * gk.vocab_size * gk.hidden_size
    weights = 6.0 * (gk.num_params() - gk.vocab_size * gk.hidden_size)
    assert gk.flops_per_token(2048) - head > weights


@pytest.mark.parametrize(
    "rules, sizes", [("fsdp", dict(ici_fsdp=8)), ("fsdp_tensor", dict(ici_fsdp=4, ici_tensor=2))]
)
def test_sharded_delta_rule_training_matches_one_device(rules, sizes):
    spec = model_spec("zebra-llama-debug", **DELTA_DEBUG)
    one = training_helpers.train(spec, training_helpers.mesh(), 3, rules=rules)[0]
    sharded = training_helpers.train(spec, training_helpers.mesh(**sizes), 3, rules=rules)[0]
    np.testing.assert_allclose(sharded, one, rtol=1e-4)
    assert one[-1] < one[0]


def test_megatron_linear_keys_of_a_mamba_spec_are_reported_unused(compat_samples):
    from jaxtrain import compat

    path = compat_samples / "Primus/examples/megatron/configs/MI300X/mamba_370M-pretrain.yaml"
    # linear_* sizes with a layer spec that builds Mamba-2 blocks: they size nothing.
    cfg, report = compat.load_foreign(
        path,
        env={},
        allow_unsupported=True,
        native_overrides=["linear_num_key_heads=8", "linear_key_head_dim=64"],
    )
    assert cfg.model.block_pattern == "M" * 48 and not cfg.model.linear_num_key_heads
    assert report.entries["linear_num_key_heads"].status == "ignored"


def test_each_expert_position_of_a_hybrid_takes_its_own_load_rows():
    # Two expert positions of the period (s2 and s10: numeric order, not string order), two
    # repeats each; the step's load rows come position by position.
    from jaxtrain.train.buffers import update_router_bias

    experts = 4
    buffers = {
        "blocks": {f"s{j}": {"mixer": {"score_bias": jnp.zeros((2, experts))}} for j in (10, 2)}
    }
    even = jnp.full((experts,), 1 / experts)
    heavy0 = jnp.asarray([0.7, 0.1, 0.1, 0.1])  # expert 0 overloaded
    load_LE = jnp.stack([heavy0, even, even, heavy0])  # s2: rows 0-1, s10: rows 2-3
    out = update_router_bias(buffers, load_LE, 0.5)
    s2, s10 = (np.asarray(out["blocks"][k]["mixer"]["score_bias"]) for k in ("s2", "s10"))
    np.testing.assert_allclose(s2[0], [-0.5, 0.5, 0.5, 0.5])
    np.testing.assert_allclose(s2[1], 0.0)
    np.testing.assert_allclose(s10[0], 0.0)
    np.testing.assert_allclose(s10[1], [-0.5, 0.5, 0.5, 0.5])


def test_a_hybrid_with_experts_moves_its_router_bias_toward_balance():
    spec = model_spec("nemotron-h-moe-debug", moe_bias_update_rate=0.01, ssm_chunk_size=8)
    losses, _, state, _, _ = training_helpers.train(spec, training_helpers.mesh(), 3)
    assert losses[-1] < losses[0]
    for j in (1, 3):  # the pattern ME*EM- has experts at positions 1 and 3
        bias = np.asarray(state["params"]["blocks"][f"s{j}"]["mixer"]["score_bias"])
        assert bias.shape == (1, 8) and np.abs(bias).max() > 0
