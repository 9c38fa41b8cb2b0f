"""The optimizer schedule, the loss and the pure train step (accumulation, masking, z-loss)."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from ml_collections import ConfigDict

from jaxtrain.models import ModelSpec, build_model
from jaxtrain.train import optimizer, step

SPEC = ModelSpec(
    vocab_size=64,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    max_seq_len=64,
)


def optim_cfg(**kw):
    base = dict(
        lr=1e-3,
        min_lr=1e-4,
        schedule="cosine",
        warmup_steps=10,
        decay_steps=0,
        weight_decay=0.1,
        b1=0.9,
        b2=0.95,
        eps=1e-8,
        clip_grad_norm=1.0,
    )
    return ConfigDict({**base, **kw})


@pytest.mark.parametrize("kind", ["cosine", "linear", "constant"])
def test_schedule_matches_formula(kind):
    lr, min_lr, warmup, total = 1e-3, 1e-4, 10, 110
    schedule = optimizer.learning_rate_schedule(optim_cfg(schedule=kind), total)
    for s in [0, 5, 9, 10, 35, 60, 109, 150]:
        if s < warmup:
            expected = lr * (s + 1) / warmup
        else:
            p = min((s - warmup) / (total - warmup), 1.0)
            expected = {
                "cosine": min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * p)),
                "linear": min_lr + (lr - min_lr) * (1 - p),
                "constant": lr,
            }[kind]
        assert float(schedule(s)) == pytest.approx(expected, rel=1e-5), s


def test_weight_decay_skips_norms_and_biases():
    params = {"attn": {"q": {"kernel": 1, "bias": 2}}, "norm": {"scale": 3}}
    mask = optimizer.weight_decay_mask(params)
    assert mask == {"attn": {"q": {"kernel": True, "bias": False}}, "norm": {"scale": False}}


def _setup(batch=8, length=16, seed=0):
    model = build_model(SPEC)
    graphdef, params = nnx.split(model)
    params = nnx.to_pure_dict(params)
    rng = np.random.default_rng(seed)
    toks = rng.integers(0, SPEC.vocab_size, (batch, length + 1))
    mask = (rng.random((batch, length)) > 0.3).astype(np.float32)
    data = {
        "inputs": jnp.asarray(toks[:, :-1], jnp.int32),
        "targets": jnp.asarray(toks[:, 1:], jnp.int32),
        "loss_mask": jnp.asarray(mask),
    }
    return graphdef, params, data


def _run_step(graphdef, params, data, num_micro, z_loss=0.0):
    cfg = optim_cfg()
    tx = optimizer.make_optimizer(cfg, 100)
    state = {"step": jnp.int32(0), "params": params, "opt_state": tx.init(params)}
    fn = jax.jit(
        functools.partial(
            step.train_step,
            graphdef=graphdef,
            tx=tx,
            schedule=optimizer.learning_rate_schedule(cfg, 100),
            num_micro=num_micro,
            z_loss=z_loss,
        )
    )
    return fn(state, data)


@pytest.mark.parametrize("max_norm", [0.5, 100.0])  # clipping, and a norm under the limit
def test_clipping_equals_optax_and_keeps_its_state(max_norm):
    grads = {"a": jnp.arange(6.0).reshape(2, 3), "b": {"c": jnp.asarray([-3.0, 4.0])}}
    ours, reference = optimizer.clip_by_global_norm(max_norm), optax.clip_by_global_norm(max_norm)
    got, state = ours.update(grads, ours.init(grads))
    want, reference_state = reference.update(grads, reference.init(grads))
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    assert float(optax.tree.norm(got)) == pytest.approx(
        min(max_norm, float(optax.tree.norm(grads))), rel=1e-6
    )
    # The same (empty) state, so checkpoints written with either restore with the other.
    assert jax.tree.structure(state) == jax.tree.structure(reference_state)


def test_gradient_accumulation_equals_one_big_batch():
    graphdef, params, data = _setup()
    s1, m1 = _run_step(graphdef, params, data, 1)
    s4, m4 = _run_step(graphdef, params, data, 4)
    assert float(m1["loss"]) == pytest.approx(float(m4["loss"]), rel=1e-6)
    assert float(m1["tokens"]) == float(data["loss_mask"].sum())
    for a, b in zip(jax.tree.leaves(s1["params"]), jax.tree.leaves(s4["params"])):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert int(s4["step"]) == 1


def test_masked_tokens_do_not_count():
    graphdef, params, data = _setup()
    model = nnx.merge(graphdef, params)
    logits = model(data["inputs"]).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits)
    nll = -jnp.take_along_axis(logp, data["targets"][..., None], -1)[..., 0]
    expected = float((nll * data["loss_mask"]).sum() / data["loss_mask"].sum())
    _, metrics = _run_step(graphdef, params, data, 1)
    assert float(metrics["loss"]) == pytest.approx(expected, rel=1e-5)


def test_z_loss_penalises_log_partition():
    logits = jnp.asarray([[[2.0, 0.5, -1.0]]])
    targets = jnp.asarray([[0]])
    total, ce = step.token_losses(logits, targets, z_loss=1e-2)
    log_z = float(jax.nn.logsumexp(logits))
    assert float(ce[0, 0]) == pytest.approx(log_z - 2.0, rel=1e-6)
    assert float(total[0, 0]) == pytest.approx(log_z - 2.0 + 1e-2 * log_z**2, rel=1e-6)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_cross_entropy_gradient_equals_autodiff_of_the_definition(dtype):
    from jaxtrain.train.cross_entropy import cross_entropy_and_log_z

    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    logits = (3 * jax.random.normal(keys[0], (3, 5, 11))).astype(dtype)
    targets = jax.random.randint(keys[1], (3, 5), 0, 11)
    w_ce, w_z = jax.random.normal(keys[2], (3, 5)), jax.random.normal(keys[3], (3, 5))

    def definition(logits, targets):
        logits = logits.astype(jnp.float32)
        log_z = jax.nn.logsumexp(logits, axis=-1)
        return log_z - jnp.take_along_axis(logits, targets[..., None], -1)[..., 0], log_z

    def loss(fn):
        def total(logits):
            ce, log_z = fn(logits, targets)
            return jnp.sum(ce * w_ce + w_z * log_z**2)

        return total

    for got, want in zip(cross_entropy_and_log_z(logits, targets), definition(logits, targets)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    got, want = jax.grad(loss(cross_entropy_and_log_z))(logits), jax.grad(loss(definition))(logits)
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(jnp.float32), want.astype(jnp.float32), atol=1e-5)
