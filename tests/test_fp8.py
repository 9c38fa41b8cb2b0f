"""FP8 matmuls (`jaxtrain.models.layers.fp8`): products and gradients within the float8 rounding bound,
delayed-scaling histories through the train step and checkpoints, formats per device."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from training_helpers import assert_remat_changes_no_value, mesh, saved_activations, train

from jaxtrain.errors import ConfigError
from jaxtrain.hardware import backend
from jaxtrain.hardware import peaks as perf
from jaxtrain.models.layers import fp8
from jaxtrain.models.presets.registry import model_spec
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.train import buffers, state

CURRENT = fp8.Fp8Recipe(scaling="current")
TINY = ModelSpec(
    vocab_size=128,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    max_seq_len=32,
    quantization="fp8",
)


def _radius(a: jax.Array, dtype) -> jax.Array:
    """Per element, the most the float8 rounding of `a` (current scaling) can move it:
    half an ulp relative (eps / 2) plus half the smallest subnormal in absolute terms."""
    info = jnp.finfo(dtype)
    scale = jnp.max(jnp.abs(a)) / float(info.max)
    return jnp.abs(a) * float(info.eps) / 2 + float(info.smallest_subnormal) / 2 * scale


def _bound(op, a, b, a_type, b_type):
    """|op(qa, qb) - op(a, b)| <= op(|a| + ra, |b| + rb) - op(|a|, |b|) for a bilinear op with
    non-negative coefficients, plus a float32-accumulation slack."""
    big = op(jnp.abs(a) + _radius(a, a_type), jnp.abs(b) + _radius(b, b_type))
    return big - op(jnp.abs(a), jnp.abs(b)) + 1e-5 * big


def _cases():
    x = jax.random.normal(jax.random.key(0), (96, 64))
    x = x.at[3, 5].set(40.0)  # an outlier sets the scale, as in real activations
    sizes = jnp.array([40, 0, 56], jnp.int32)
    return {
        "dense": (
            fp8.Product("dense"),
            x,
            0.05 * jax.random.normal(jax.random.key(1), (64, 48)),
            None,
            lambda a, b: a @ b,
        ),
        "dense, two contracted dims": (
            fp8.Product("dense", 2),
            x.reshape(96, 4, 16),
            0.05 * jax.random.normal(jax.random.key(1), (4, 16, 48)),
            None,
            lambda a, b: jnp.einsum("tnh,nhf->tf", a, b),
        ),
        "capacity experts": (
            fp8.Product("batched"),
            x.reshape(3, 32, 64),
            0.05 * jax.random.normal(jax.random.key(2), (3, 64, 48)),
            None,
            lambda a, b: jnp.einsum("ecx,exy->ecy", a, b),
        ),
        "ragged experts": (
            fp8.Product("ragged"),
            x,
            0.05 * jax.random.normal(jax.random.key(3), (3, 64, 48)),
            sizes,
            lambda a, b: jax.lax.ragged_dot(a, b, sizes),
        ),
    }


@pytest.mark.parametrize("target", ["nvidia-h100", "amd-mi300x"])
@pytest.mark.parametrize("case", list(_cases()))
def test_products_and_gradients_lie_within_the_float8_rounding_bound(case, target):
    product, x, w, sizes, reference = _cases()[case]
    with backend.use(backend.TARGETS[target]), jax.default_matmul_precision("highest"):
        forward_type, grad_type = fp8.formats(CURRENT)
        y, vjp = jax.vjp(lambda a, b: fp8.scaled_product(product, a, b, CURRENT, sizes=sizes), x, w)
        g = jax.random.normal(jax.random.key(4), y.shape)
        dx, dw = vjp(g)
        y_ref, vjp_ref = jax.vjp(reference, x, w)
        dx_ref, dw_ref = vjp_ref(g)
        y_bound = _bound(reference, x, w, forward_type, forward_type)
        dx_bound = _bound(
            lambda gg, b: jax.vjp(lambda a: reference(a, b), x)[1](gg)[0],
            g,
            w,
            grad_type,
            forward_type,
        )
        dw_bound = _bound(
            lambda a, gg: jax.vjp(lambda b: reference(a, b), w)[1](gg)[0],
            x,
            g,
            forward_type,
            grad_type,
        )
    assert forward_type == (jnp.float8_e4m3fnuz if target == "amd-mi300x" else jnp.float8_e4m3fn)
    for got, want, bound in ((y, y_ref, y_bound), (dx, dx_ref, dx_bound), (dw, dw_ref, dw_bound)):
        assert bool(jnp.all(jnp.abs(got - want) <= bound)), float(
            jnp.max(jnp.abs(got - want) / bound)
        )
        # ... and the product really is float8: far coarser than a bfloat16 one (~0.3%).
        relative = float(jnp.linalg.norm(got - want) / jnp.linalg.norm(want))
        assert 0.01 < relative < 0.1


def test_delayed_scaling_reads_the_history_and_returns_the_new_amaxes():
    recipe = fp8.Fp8Recipe(history=4)
    x = jnp.full((8, 16), 2.0)
    w = jnp.full((16, 4), 0.5)
    history = jnp.zeros((3, 4)).at[:, 1].set(jnp.asarray([4.0, 0.25, 1.0]))
    y, vjp = jax.vjp(lambda a, b, h: fp8.project(a, b, 1, recipe, h), x, w, history)
    _, _, new_history = vjp(jnp.full(y.shape, 3.0))
    # Newest first, the oldest dropped; the input amax 2, kernel 0.5, gradient 3.
    np.testing.assert_array_equal(
        new_history, [[2.0, 0.0, 4.0, 0.0], [0.5, 0.0, 0.25, 0.0], [3.0, 0.0, 1.0, 0.0]]
    )
    # The history's amax of the kernel (0.25) is below this one (0.5): w saturates at 0.25, so
    # the product is x @ 0.25 = 16 x 2 x 0.25, not 16 x 2 x 0.5: the cost of a stale scale.
    np.testing.assert_allclose(y, 8.0, rtol=1e-5)
    # most_recent reads only the newest entry, here zero (an empty history): scale 1, under
    # which 0.5 is exact.
    y_recent = fp8.project(x, w, 1, dataclasses.replace(recipe, algo="most_recent"), history)
    np.testing.assert_allclose(y_recent, 16.0, rtol=1e-5)
    # ... and a value past e4m3's 448 saturates there at scale 1.
    np.testing.assert_allclose(
        fp8.project(jnp.full((1, 1), 1000.0), jnp.ones((1, 1)), 1, recipe, jnp.zeros((3, 4))), 448.0
    )


def test_every_projection_keeps_a_history_and_the_optimizer_none():
    _, metrics, state, _, _ = train(dataclasses.replace(TINY, fp8_stats=True), mesh(), steps=1)
    params = state["params"]
    amax = {k: v["fp8_amax"] for k, v in params["layers"]["attn"].items()}
    amax.update({k: v["fp8_amax"] for k, v in params["layers"]["mlp"].items()})
    assert sorted(amax) == [
        "down_proj",
        "gate_proj",
        "k_proj",
        "o_proj",
        "q_proj",
        "up_proj",
        "v_proj",
    ]
    for name, history in amax.items():
        assert history.shape == (2, 3, 1024)  # [layers, input/kernel/grad, history]
        assert np.all(history[:, :, 0] > 0) and np.all(history[:, :, 1:] == 0), name
    assert "fp8_amax" not in params["lm_head"]  # the output layer stays in model.dtype
    assert not any(
        "fp8_amax" in jax.tree_util.keystr(path)
        for path, _ in jax.tree_util.tree_flatten_with_path(state["opt_state"])[0]
    )
    # fp8_stats: the newest amax and next scale of every tensor, per layer.
    assert metrics["fp8/layers/mlp/down_proj/1/grad_amax"] == pytest.approx(
        float(amax["down_proj"][1, 2, 0])
    )
    assert metrics["fp8/layers/attn/q_proj/0/input_scale"] == pytest.approx(
        float(amax["q_proj"][0, 0, 0]) / 448.0
    )


def test_remat_keeps_float8_products_in_the_model_dtype_with_the_same_gradients():
    # A float8 product accumulates in float32; `remat=minimal` saves matmul results, and must
    # keep the product as cast to bfloat16, as the bfloat16 model does, not its float32 sum.
    spec = dataclasses.replace(TINY, dtype="bfloat16", remat="minimal")
    bf16 = saved_activations(dataclasses.replace(spec, quantization=""))
    assert set(bf16) == {"bfloat16"}
    assert saved_activations(spec) == bf16
    # Saving or recomputing changes no value: the steps equal those of the model without remat.
    assert_remat_changes_no_value(spec)


def test_hybrid_stacks_keep_histories_where_megatron_runs_fp8():
    # Mamba, attention, relu2 MLP, Gated DeltaNet and KDA sublayers: the Mamba in/out
    # projections (Transformer Engine linears in Megatron) and attention and MLP are fp8; the
    # delta-rule mixers (plain nn.Linear in FLA) and Mamba's x/dt projections are not.
    spec = model_spec(
        "zebra-llama-debug",
        num_layers=6,
        block_pattern="M*-GKM",
        mamba_version=2,
        linear_chunk=4,
        ssm_chunk_size=4,
        quantization="fp8",
        max_seq_len=32,
    )
    losses, _, trained, _, _ = train(spec, mesh(ici_fsdp=2), steps=2)
    assert losses[-1] < losses[0]
    histories = {
        jax.tree_util.keystr(path): leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(trained["params"])[0]
        if "fp8_amax" in jax.tree_util.keystr(path)
    }
    owners = sorted({k.split("['fp8_amax']")[0].split("['mixer']")[1] for k in histories})
    # Zebra-Llama's attention is latent (MLA) and its MLP SwiGLU; no q/k/v/a/b/g projection of
    # the delta-rule mixers is among them.
    assert owners == [
        "['down_proj']",
        "['gate_proj']",
        "['in_proj']",
        "['kv_a_proj']",
        "['kv_b_proj']",
        "['o_proj']",
        "['out_proj']",
        "['q_a_proj']",
        "['q_b_proj']",
        "['up_proj']",
    ]
    for name, history in histories.items():
        assert np.all(np.asarray(history)[..., :2] > 0), name  # two steps of amaxes


def test_micro_batches_combine_their_amaxes_by_maximum():
    graphdef, abstract = state.abstract_model(TINY)
    pure = nnx.to_pure_dict(abstract)
    is_amax = lambda path: "fp8_amax" in jax.tree_util.keystr(path)  # noqa: E731
    fill = lambda amax, other: jax.tree_util.tree_map_with_path(  # noqa: E731
        lambda p, a: jnp.full(a.shape, amax if is_amax(p) else other), pure
    )
    total = buffers.accumulate(
        graphdef, buffers.accumulate(graphdef, fill(0.0, 0.0), fill(5.0, 1.0)), fill(3.0, 2.0)
    )
    for path, leaf in jax.tree_util.tree_flatten_with_path(total)[0]:
        assert float(leaf.max()) == (5.0 if is_amax(path) else 3.0)  # max vs sum
    # Through the train step: the first projection's input (the normed embeddings) and kernel
    # amaxes do not depend on fp8 rounding, so two micro batches give the whole batch's.
    one = train(TINY, mesh(), steps=1)[2]["params"]["layers"]["attn"]["q_proj"]["fp8_amax"]
    two = train(TINY, mesh(), steps=1, num_micro=2)[2]["params"]["layers"]["attn"]["q_proj"]
    np.testing.assert_allclose(two["fp8_amax"][0, :2, 0], one[0, :2, 0], rtol=1e-6)
    # The gradients' amaxes differ a little: each micro batch quantized with its own amax.
    np.testing.assert_allclose(two["fp8_amax"], one, rtol=0.1)


def test_fp8_trains_like_the_model_dtype_on_a_sharded_mesh():
    plain = train(dataclasses.replace(TINY, quantization=""), mesh(ici_fsdp=2), steps=3)[0]
    quantized = train(TINY, mesh(ici_fsdp=2), steps=3)[0]
    assert quantized[-1] < quantized[0]
    np.testing.assert_allclose(quantized, plain, rtol=0.01)


def test_the_output_layer_is_fp8_only_when_asked():
    spec = dataclasses.replace(TINY, fp8_output_layer=True, tie_embeddings=True)
    state = train(spec, mesh(), steps=1)[2]
    assert state["params"]["embed"]["fp8_amax"][:, 0].min() > 0


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(quantization="mxfp8"), r"model.quantization='mxfp8' is not supported: MXFP8"),
        (dict(fp8_recipe="blockwise"), r"model.fp8_recipe='blockwise' is not supported"),
        (dict(quantization="", fp8_recipe="current"), r"only applies to fp8 matmuls"),
        (dict(fp8_amax_algo="mean"), r"model.fp8_amax_algo='mean' is not one of"),
    ],
)
def test_unusable_fp8_settings_are_refused_by_name(overrides, message):
    with pytest.raises(ConfigError, match=message):
        dataclasses.replace(TINY, **overrides).validate()


def test_formats_follow_the_device_and_the_config_overrides_them():
    assert backend.TARGETS["amd-mi300x"].fp8_formats == "fnuz"
    assert backend.TARGETS["amd-mi325x"].fp8_formats == "fnuz"
    assert backend.TARGETS["amd-mi355x"].fp8_formats == "ocp"
    assert backend.TARGETS["nvidia-h100"].fp8_formats == "ocp"
    assert all(backend.TARGETS[t].fp8_native for t in ("amd-mi300x", "amd-mi355x", "nvidia-h200"))
    assert not backend.for_gpu("nvidia", "NVIDIA A100-SXM4-80GB").fp8_native
    assert backend.for_gpu("amd", "gfx942").fp8_formats == "fnuz"
    assert not backend.detect().fp8_native  # this CPU: XLA emulates the types
    chosen = backend.from_config({"target": "amd-mi355x", "fp8_formats": "fnuz"})
    assert chosen.fp8_formats == "fnuz" and "fp8 FNUZ native" in chosen.describe()
    with pytest.raises(ConfigError, match=r"backend.fp8_formats='e4m3' is not one of"):
        backend.from_config({"fp8_formats": "e4m3"})


@pytest.mark.parametrize(
    "target,types",
    [("nvidia-h100", ("f8E4M3FN", "f8E5M2")), ("amd-mi300x", ("f8E4M3FNUZ", "f8E5M2FNUZ"))],
)
def test_the_program_multiplies_float8_operands_of_the_targets_types(target, types):
    x, w = jnp.ones((16, 32), jnp.bfloat16), jnp.ones((32, 16), jnp.bfloat16)
    with backend.use(backend.TARGETS[target]):
        text = (
            jax.jit(
                jax.value_and_grad(
                    lambda a, b: fp8.project(a, b, 1, CURRENT).astype(jnp.float32).sum(), (0, 1)
                )
            )
            .lower(x, w)
            .as_text()
        )
    dots = [line for line in text.splitlines() if "dot_general" in line]
    assert len(dots) == 3  # forward, input gradient, kernel gradient
    assert all(f"x{types[0]}>" in line for line in dots)
    assert sum(f"x{types[1]}>" in line for line in dots) == 2  # the two gradient products


def test_mfu_of_an_fp8_run_is_against_the_fp8_peak():
    class Device:
        def __init__(self, kind):
            self.device_kind = kind

    assert perf.device_peak_flops(Device("NVIDIA H100 80GB HBM3"), fp8=True) == 1979e12
    assert perf.device_peak_flops(Device("NVIDIA H100 80GB HBM3")) == 989e12
    assert perf.device_peak_flops(Device("AMD Instinct MI300X"), fp8=True) == 2615e12
    # No float8 units: the bf16 peak stays the reference.
    assert perf.device_peak_flops(Device("NVIDIA A100-SXM4-80GB"), fp8=True) == 312e12
