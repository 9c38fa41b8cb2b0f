"""`train.loss_chunks`: the output layer and the cross-entropy a chunk at a time give the plain
path's loss and gradients, hold a fraction of its memory, and train alike on sharded meshes."""

from __future__ import annotations

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import training_helpers
from conftest import REPO
from flax import nnx

from jaxtrain.config import loader as config_lib
from jaxtrain.config.loader import ConfigError
from jaxtrain.models import ModelSpec, build_model
from jaxtrain.parallel import sharding
from jaxtrain.train import optimizer, state, step
from jaxtrain.train.chunked_loss import head_losses

SPEC = ModelSpec(
    vocab_size=96,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    max_seq_len=64,
)


def _model_and_batch(spec: ModelSpec, batch: int = 4, length: int = 16):
    graphdef, params = nnx.split(build_model(spec))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, spec.vocab_size, (batch, length + 1))
    data = {
        "inputs": jnp.asarray(tokens[:, :-1], jnp.int32),
        "targets": jnp.asarray(tokens[:, 1:], jnp.int32),
        # Some tokens out of the loss, so the weights matter.
        "loss_mask": jnp.asarray(rng.random((batch, length)) > 0.3, jnp.float32),
    }
    return graphdef, nnx.to_pure_dict(params), data


def _loss_and_grads(graphdef, params, data, z_loss, chunks):
    grad_fn = jax.jit(
        jax.value_and_grad(step.loss_sums, argnums=1, has_aux=True), static_argnums=(0, 3, 4)
    )
    return grad_fn(graphdef, params, data, z_loss, chunks)


@pytest.mark.parametrize("chunks", [1, 4, 16])
@pytest.mark.parametrize("z_loss", [0.0, 1e-2])
@pytest.mark.parametrize("tied", [False, True], ids=["lm_head", "tied"])
def test_loss_and_gradients_equal_the_plain_path(chunks, z_loss, tied):
    spec = dataclasses.replace(SPEC, tie_embeddings=tied)
    graphdef, params, data = _model_and_batch(spec)
    (loss, aux), grads = _loss_and_grads(graphdef, params, data, z_loss, 0)
    (chunked_loss, chunked_aux), chunked_grads = _loss_and_grads(
        graphdef, params, data, z_loss, chunks
    )
    np.testing.assert_allclose(chunked_loss, loss, rtol=1e-6)
    np.testing.assert_allclose(chunked_aux["ce_sum"], aux["ce_sum"], rtol=1e-6)
    assert chunked_aux["tokens"] == aux["tokens"]
    if z_loss:
        assert float(loss) > float(aux["ce_sum"])  # the z-loss term is in the loss only
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        chunked = dict(jax.tree_util.tree_leaves_with_path(chunked_grads))[path]
        np.testing.assert_allclose(
            chunked, g, rtol=1e-5, atol=1e-6, err_msg=jax.tree_util.keystr(path)
        )


def test_bfloat16_compute_stays_close_to_the_plain_path():
    spec = dataclasses.replace(SPEC, dtype="bfloat16")
    graphdef, params, data = _model_and_batch(spec)
    (loss, _), grads = _loss_and_grads(graphdef, params, data, 0.0, 0)
    (chunked_loss, _), chunked_grads = _loss_and_grads(graphdef, params, data, 0.0, 4)
    np.testing.assert_allclose(chunked_loss, loss, rtol=1e-3)
    for g, c in zip(jax.tree.leaves(grads), jax.tree.leaves(chunked_grads)):
        assert c.dtype == g.dtype
        scale = float(jnp.max(jnp.abs(g.astype(jnp.float32)))) or 1.0
        np.testing.assert_allclose(c.astype(np.float32), g.astype(np.float32), atol=2e-2 * scale)


def test_evaluation_takes_the_same_chunks_without_gradients():
    graphdef, params, data = _model_and_batch(SPEC)
    plain = step.eval_step(params, data, graphdef=graphdef)
    chunked = jax.jit(step.eval_step, static_argnames=("graphdef", "loss_chunks"))(
        params, data, graphdef=graphdef, loss_chunks=4
    )
    np.testing.assert_allclose(chunked["ce_sum"], plain["ce_sum"], rtol=1e-6)
    assert chunked["tokens"] == plain["tokens"]


def test_the_logits_never_exist_whole():
    # 1024 tokens x 16K vocabulary: 64 MiB of float32 logits, and as much of their gradient.
    spec = ModelSpec(
        vocab_size=16384,
        hidden_size=64,
        num_layers=1,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=128,
        max_seq_len=256,
    )
    graphdef, params = nnx.split(build_model(spec))
    params = nnx.to_pure_dict(params)
    data = {
        "inputs": jnp.zeros((4, 256), jnp.int32),
        "targets": jnp.zeros((4, 256), jnp.int32),
        "loss_mask": jnp.ones((4, 256), jnp.float32),
    }
    logits_bytes = 4 * 256 * spec.vocab_size * 4

    def temp_bytes(chunks):
        grad_fn = jax.jit(
            jax.value_and_grad(step.loss_sums, argnums=1, has_aux=True), static_argnums=(0, 3, 4)
        )
        compiled = grad_fn.lower(graphdef, params, data, 0.0, chunks).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    plain, chunked = temp_bytes(0), temp_bytes(8)
    assert plain > 2 * logits_bytes  # logits kept for the backward pass, and their gradient
    assert chunked < plain - 1.5 * logits_bytes  # about two eighths of a chunk's worth remain


@pytest.mark.parametrize(
    "sizes",
    [dict(ici_data=2, ici_fsdp=2, ici_tensor=2), dict(ici_fsdp=4, ici_context=2)],
    ids=["data2_fsdp2_tensor2", "fsdp4_context2"],
)
def test_sharded_training_matches_one_device_without_chunks(sizes):
    one = training_helpers.mesh()
    reference = training_helpers.train(SPEC, one, steps=3)[0]
    mesh = sharding.make_mesh(training_helpers.mesh_config(**sizes))
    losses = training_helpers.train(SPEC, mesh, steps=3, loss_chunks=4)[0]
    np.testing.assert_allclose(losses, reference, rtol=2e-5)
    assert losses[-1] < losses[0]


def test_head_losses_reject_chunks_that_do_not_divide_the_sequence():
    x = jnp.zeros((2, 12, 8))
    with pytest.raises(ValueError, match="train.loss_chunks=5"):
        head_losses(
            x,
            jnp.zeros((8, 16)),
            jnp.zeros((2, 12), jnp.int32),
            jnp.ones((2, 12)),
            chunks=5,
            z_loss=0.0,
        )


def test_config_names_the_key_and_the_sequence_length():
    cfg = config_lib.load_config(
        str(REPO / "configs" / "llama_debug.py"), ["--config.train.loss_chunks=7"]
    )
    with pytest.raises(ConfigError, match=r"train.loss_chunks=7 .* train.seq_len="):
        config_lib.validate(cfg)


def test_step_options_come_from_the_config_and_default_for_older_configs():
    cfg = config_lib.load_config(
        str(REPO / "configs" / "llama_debug.py"),
        ["--config.train.loss_chunks=4", "--config.train.z_loss=1e-4"],
    )
    assert step.loss_options(cfg.train) == {"z_loss": 1e-4, "loss_chunks": 4}
    # A config written before `train.loss_chunks` existed computes the logits at once.
    with cfg.unlocked():
        del cfg.train["loss_chunks"]
    assert step.loss_options(cfg.train)["loss_chunks"] == 0


def _collectives_inside_loops(hlo: str) -> list[str]:
    """The result shapes of the collectives in the bodies of the program's while loops."""
    found = []
    for body in re.findall(r"body=%([\w.\-]+)", hlo):
        text = re.search(r"\n%" + re.escape(body) + r" [^\n]*\{\n(.*?)\n\}", hlo, re.S).group(1)
        # A result may be a tuple, "(f32[], f32[64,96])", when XLA combines collectives.
        found += re.findall(
            r"= (\(.*?\)|\S+) (?:all-reduce|reduce-scatter|all-gather)"
            r"(?:-start)?\(",
            text,
        )
    return found


def test_data_parallel_chunks_sum_the_kernel_gradient_once():
    """Each device keeps its own partial kernel gradient through the chunks: only the scalar
    loss sums cross devices inside the loop, not a [D, V] gradient per chunk."""
    spec = dataclasses.replace(SPEC, scan_layers=False)  # the chunks' scan is the only loop
    mesh = training_helpers.mesh(ici_data=8)
    rules = sharding.RULE_PRESETS["fsdp_tensor"]
    tx = optimizer.make_optimizer(training_helpers.optim(), 1)
    with sharding.use_mesh(mesh, rules):
        layout = state.state_layout(spec, tx, mesh, rules)
        abstract = jax.eval_shape(lambda: state.init_state(spec, tx, layout, seed=0))
        batch = {
            "inputs": jax.ShapeDtypeStruct((8, 16), jnp.int32),
            "targets": jax.ShapeDtypeStruct((8, 16), jnp.int32),
            "loss_mask": jax.ShapeDtypeStruct((8, 16), jnp.float32),
        }
        fn = jax.jit(
            functools.partial(
                step.train_step,
                graphdef=layout.graphdef,
                tx=tx,
                schedule=optimizer.learning_rate_schedule(training_helpers.optim(), 1),
                num_micro=1,
                z_loss=0.0,
                loss_chunks=4,
            ),
            in_shardings=(layout.shardings, None),
        )
        hlo = fn.lower(abstract, batch).compile().as_text()
    in_loops = _collectives_inside_loops(hlo)
    assert in_loops, "the chunks' scan should be a loop with its loss sums reduced inside"
    assert all(
        re.fullmatch(r"\(?f32\[\](\{\})?(, f32\[\](\{\})?)*\)?", shape) for shape in in_loops
    ), in_loops
