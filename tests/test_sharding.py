"""Mesh construction, the logical-axis rule table, and sharded training equal to one device."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import training_helpers
from ml_collections import ConfigDict
from training_helpers import mesh_config as mesh_cfg

from jaxtrain.models import ModelSpec, build_model
from jaxtrain.parallel import sharding
from jaxtrain.train import state

SPEC = ModelSpec(
    vocab_size=128,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    max_seq_len=64,
)


def test_mesh_fills_the_wildcard_axis():
    mesh = sharding.make_mesh(mesh_cfg(ici_fsdp=-1, ici_tensor=2))
    assert sharding.mesh_shape(mesh) == dict(
        data=1, pipeline=1, fsdp=4, context=1, expert=1, tensor=2
    )


def test_mesh_that_does_not_fit_shows_the_arithmetic():
    with pytest.raises(sharding.MeshError, match=r"multiply to 6 .*fsdp=3 x .*tensor=2.* 8"):
        sharding.make_mesh(mesh_cfg(ici_fsdp=3, ici_tensor=2))
    with pytest.raises(sharding.MeshError, match="only one axis may be -1"):
        sharding.make_mesh(mesh_cfg(ici_fsdp=-1, ici_tensor=-1))
    with pytest.raises(sharding.MeshError, match="not divisible"):
        sharding.make_mesh(mesh_cfg(ici_fsdp=-1, ici_tensor=3))


def test_mesh_errors_name_the_hosts_devices_and_the_launcher_settings():
    # A layout written for 8 GPUs x 2 nodes, started as one process with 8 devices.
    with pytest.raises(sharding.MeshError) as info:
        sharding.make_mesh(mesh_cfg(ici_fsdp=-1, ici_tensor=16))
    message = str(info.value)
    assert "8 devices per host are not divisible by the product of the fixed sizes 16" in message
    assert "1 process(es) (hosts) x 8 devices per host = 8 devices" in message
    assert (
        "NNODES for Primus' launcher, srun --nodes, torchrun --nnodes or --num-processes" in message
    )
    assert "needs 1 host(s) (mesh.dcn_*) with a multiple of 16 devices each" in message
    with pytest.raises(sharding.MeshError) as info:
        sharding.resolved_sizes(mesh_cfg(ici_fsdp=-1, dcn_data=1, dcn_fsdp=4), 16, 2)
    message = str(info.value)
    assert "multiply to 4" in message and "there are 2 hosts (processes) on that side" in message
    assert "2 process(es) (hosts) x 8 devices per host = 16 devices" in message
    assert "needs 4 host(s) (mesh.dcn_*) with any number of devices each" in message


def test_every_logical_name_is_mapped_and_every_rule_is_used(monkeypatch):
    seen: set[str] = set()
    real = sharding.constrain

    def recording(x, axes):
        seen.update(a for a in axes if a)
        return real(x, axes)

    monkeypatch.setattr(sharding, "constrain", recording)
    # The dense model, a mixture of experts, latent attention and leading dense blocks (the
    # stack before a pipeline) use every logical name.
    moe = dataclasses.replace(SPEC, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
    mla = dataclasses.replace(
        moe, kv_lora_rank=8, q_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8
    )
    prefix = dataclasses.replace(moe, num_layers=3, num_dense_layers=1)
    # and the state-space mixers (Mamba-2 and Mamba-1) in a hybrid stack.
    hybrid = dataclasses.replace(
        SPEC,
        num_layers=4,
        block_pattern="M*M-",
        ssm_state_size=8,
        ssm_head_dim=8,
        ssm_n_groups=2,
        ssm_chunk_size=4,
    )
    mamba1 = dataclasses.replace(hybrid, block_pattern="MMMM", mamba_version=1)
    for spec in (SPEC, moe, mla, prefix, hybrid, mamba1):
        model = build_model(spec)
        model(jnp.zeros((1, 4), jnp.int32))
        _, abstract = state.abstract_model(spec)
        param_axes = jax.tree.leaves(
            sharding.param_logical_axes(abstract), is_leaf=lambda x: isinstance(x, tuple)
        )
        for axes in param_axes:
            seen.update(axes)
    for name, rules in sharding.RULE_PRESETS.items():
        table = dict(rules)
        assert seen - set(table) == set(), f"{name}: unmapped logical names"
        assert set(table) - seen == set(), f"{name}: rules that match nothing"


def test_logical_spec_rejects_unknown_names():
    with pytest.raises(KeyError, match="no entry in the sharding rule table"):
        sharding.logical_spec(("nonsense",), dict(sharding.RULE_PRESETS["fsdp"]))


def _losses(mesh, rules: str, steps: int = 3) -> list[float]:
    """Losses of `steps` steps on one fixed batch: the loss must fall as the model memorises
    it."""
    optim = ConfigDict(
        dict(
            lr=1e-2,
            min_lr=1e-3,
            schedule="cosine",
            warmup_steps=1,
            decay_steps=0,
            weight_decay=0.1,
            b1=0.9,
            b2=0.95,
            eps=1e-8,
            clip_grad_norm=1.0,
        )
    )
    return training_helpers.train(SPEC, mesh, steps, optim, rules=rules)[0]


@pytest.mark.parametrize(
    "sizes, rules",
    [
        (dict(ici_data=8), "data"),
        (dict(ici_fsdp=8), "fsdp"),
        (dict(ici_fsdp=4, ici_tensor=2), "fsdp_tensor"),
    ],
)
def test_sharded_training_matches_one_device(sizes, rules):
    one = sharding.make_mesh(mesh_cfg(), devices=jax.devices()[:1])
    reference = _losses(one, rules)
    sharded = _losses(sharding.make_mesh(mesh_cfg(**sizes)), rules)
    np.testing.assert_allclose(sharded, reference, rtol=2e-5)
    assert reference[-1] < reference[0]
