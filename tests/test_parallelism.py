"""Parallel strategies on 8 devices train exactly like one device; the state really is sharded.

Strategies beyond tests/test_sharding.py (data, fsdp, fsdp x tensor): tensor, context (the
sequence split over `context`, attention gathering keys and values), data x fsdp x tensor and
fsdp x context. Then ZeRO-3 (parameters and both Adam moments sharded over `fsdp`), an init
that never builds a whole parameter on one device, and the mesh-fit errors.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import training_helpers
from conftest import REPO
from flax import nnx
from ml_collections import ConfigDict
from training_helpers import mesh_config as mesh_cfg

from jaxtrain.config import loader as config_lib
from jaxtrain.config import mesh_check
from jaxtrain.models import ModelSpec
from jaxtrain.models.assembly.decoder import Decoder
from jaxtrain.parallel import sharding
from jaxtrain.parallel.sharding import MeshError
from jaxtrain.train import optimizer, state
from jaxtrain.trainer import Trainer

# Grouped-query attention (2 query heads per kv head) for every strategy with tensor <= 2, and
# 8 kv heads for the pure tensor=8 run (kv heads must divide by the tensor size).
GQA = ModelSpec(
    vocab_size=128,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    max_seq_len=64,
)
MHA8 = ModelSpec(
    vocab_size=128,
    hidden_size=32,
    num_layers=2,
    num_heads=8,
    num_kv_heads=8,
    head_dim=4,
    intermediate_size=64,
    max_seq_len=64,
)
OPTIM = ConfigDict(
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
STEPS = 3


def losses(spec: ModelSpec, mesh, rules: str) -> list[float]:
    """Losses of STEPS steps on one fixed batch of 8 x 16 tokens."""
    return training_helpers.train(spec, mesh, STEPS, OPTIM, rules=rules)[0]


@functools.cache
def one_device(spec: ModelSpec) -> tuple[float, ...]:
    """The reference: every mesh axis of size 1, so any rule table gives the same program."""
    mesh = sharding.make_mesh(mesh_cfg(), devices=jax.devices()[:1])
    return tuple(losses(spec, mesh, "fsdp_tensor"))


@pytest.mark.parametrize(
    "spec, sizes, rules",
    [
        (MHA8, dict(ici_tensor=8), "fsdp_tensor"),
        (GQA, dict(ici_context=8), "fsdp_tensor"),
        (GQA, dict(ici_data=2, ici_fsdp=2, ici_tensor=2), "fsdp_tensor"),
        (GQA, dict(ici_fsdp=4, ici_context=2), "fsdp_tensor"),
    ],
    ids=["tensor8", "context8", "data2_fsdp2_tensor2", "fsdp4_context2"],
)
def test_strategy_trains_like_one_device(spec, sizes, rules):
    mesh = sharding.make_mesh(mesh_cfg(**sizes))
    table = sharding.RULE_PRESETS[rules]
    mesh_check.check_fits_mesh(spec, mesh, table, seq_len=16, micro_batch=8)
    reference = one_device(spec)
    np.testing.assert_allclose(losses(spec, mesh, rules), reference, rtol=2e-5)
    assert reference[-1] < reference[0]


# Big enough that a whole embedding on one device would stand out in the memory figures.
WIDE = ModelSpec(
    vocab_size=4096,
    hidden_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
    intermediate_size=256,
    max_seq_len=64,
)


def _paths(tree) -> dict[str, jax.Array]:
    """{'['a']['b']': leaf} for every leaf of a tree."""
    return {jax.tree_util.keystr(p): leaf for p, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def test_fsdp_shards_parameters_and_adam_moments_zero3():
    mesh = sharding.make_mesh(mesh_cfg(ici_fsdp=8))
    rules = sharding.RULE_PRESETS["fsdp"]
    tx = optimizer.make_optimizer(OPTIM, STEPS)
    with sharding.use_mesh(mesh, rules):
        layout = state.state_layout(WIDE, tx, mesh, rules)
        train_state = state.init_state(WIDE, tx, layout, seed=0)
    params = _paths(train_state["params"])
    adam = [
        s
        for s in jax.tree.leaves(train_state["opt_state"], is_leaf=lambda s: hasattr(s, "mu"))
        if hasattr(s, "mu")
    ]
    assert len(adam) == 1
    moments = [_paths(adam[0].mu), _paths(adam[0].nu)]
    sharded = 0
    for path, param in params.items():
        is_norm = path.endswith("['scale']")
        assert ("fsdp" in param.sharding.spec) != is_norm, (path, param.sharding.spec)
        for moment in moments:
            assert moment[path].sharding.spec == param.sharding.spec, path
        if not is_norm:
            sharded += 1
            # No device holds more than its eighth of a sharded parameter.
            for shard in param.addressable_shards:
                assert shard.data.size * 8 == param.size, (path, shard.data.shape)
    assert sharded >= 9  # embed, lm_head and the 7 stacked projection kernels


def test_sharded_init_never_materialises_a_whole_parameter():
    mesh = sharding.make_mesh(mesh_cfg(ici_fsdp=8))
    rules = sharding.RULE_PRESETS["fsdp"]
    tx = optimizer.make_optimizer(OPTIM, STEPS)
    with sharding.use_mesh(mesh, rules):
        layout = state.state_layout(WIDE, tx, mesh, rules)

        # The same jitted init `init_state` runs, compiled but not executed.
        def init():
            params = nnx.to_pure_dict(nnx.state(Decoder(WIDE, rngs=nnx.Rngs(params=0)), nnx.Param))
            return {
                "step": jnp.zeros((), jnp.int32),
                "params": params,
                "opt_state": tx.init(params),
            }

        memory = jax.jit(init, out_shardings=layout.shardings).lower().compile().memory_analysis()
    embedding_bytes = WIDE.vocab_size * WIDE.hidden_size * 4
    state_bytes = sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(layout.abstract))
    # Each device outputs about an eighth of the state (norms and the step are replicated) and
    # needs less scratch space than one whole embedding table.
    assert memory.output_size_in_bytes < state_bytes / 8 * 1.05
    assert memory.temp_size_in_bytes < embedding_bytes


def _fit_error(
    spec: ModelSpec,
    rules: str = "fsdp_tensor",
    seq_len: int = 16,
    micro_batch: int = 8,
    **sizes: int,
) -> str:
    cfg = mesh_cfg(**sizes)
    with pytest.raises(MeshError) as info:
        mesh_check.check_fits_mesh(
            spec,
            sharding.make_mesh(cfg),
            sharding.RULE_PRESETS[rules],
            seq_len=seq_len,
            micro_batch=micro_batch,
            mesh_cfg=cfg,
            rules_name=rules,
        )
    return str(info.value)


def test_mesh_fit_errors_show_the_arithmetic_and_the_keys():
    message = _fit_error(GQA, ici_fsdp=2, ici_tensor=4)
    assert "model.num_kv_heads=2" in message and "mesh.ici_tensor=4" in message
    assert "2 / 4 = 0.5 kv heads per shard" in message
    assert "model.num_heads=4" in _fit_error(GQA, ici_tensor=8)
    assert "model.vocab_size=100" in _fit_error(
        dataclasses.replace(MHA8, vocab_size=100), ici_tensor=8
    )
    assert "model.intermediate_size=60" in _fit_error(
        dataclasses.replace(MHA8, intermediate_size=60), ici_tensor=8
    )
    assert "model.hidden_size=36" in _fit_error(
        dataclasses.replace(GQA, hidden_size=36), ici_fsdp=8
    )
    message = _fit_error(GQA, seq_len=12, ici_fsdp=1, ici_context=8)
    assert "train.seq_len=12" in message and "mesh.ici_context=8" in message
    message = _fit_error(GQA, micro_batch=6, ici_data=2, ici_fsdp=4)
    assert "train.micro_batch_size=6" in message and "'data' x 'fsdp'" in message
    # The pure FSDP table leaves heads whole, so a tensor size does not need to divide them.
    mesh_check.check_fits_mesh(
        GQA,
        sharding.make_mesh(mesh_cfg(ici_tensor=8)),
        sharding.RULE_PRESETS["fsdp"],
        seq_len=16,
        micro_batch=8,
    )


def test_trainer_checks_the_mesh_before_building_anything(tmp_path):
    cfg = config_lib.load_config(
        str(REPO / "configs" / "llama_debug.py"),
        {"run.dir": str(tmp_path), "mesh.ici_fsdp": -1, "mesh.ici_tensor": 4},
    )
    with pytest.raises(MeshError, match=r"model.num_kv_heads=2 .*mesh.ici_tensor=4"):
        Trainer(cfg, console=False)
    assert not tmp_path.joinpath("checkpoints").exists()
