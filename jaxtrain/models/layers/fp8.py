"""FP8 projections: float8 operands scaled per tensor, float32 accumulation.

With `model.quantization="fp8"` every projection of attention, MLP and experts (and the output
layer with `model.fp8_output_layer`) runs as below; norms, softmax, attention scores, the
router, the loss and the optimizer keep model.dtype / float32. Shape letters: A rows of a
grouped product (expert assignments), D / F its input and output widths, E experts (groups),
C expert capacity, H amax history.

Forward, y = x @ w: x and w are each divided by a per-tensor scale s = amax x 2^margin / max,
clipped to the format's range and rounded to e4m3 (max 448; 240 for the FNUZ variant); the product
multiplies the two float8 tensors with float32 accumulation (`preferred_element_type`) and the
result is multiplied by s_x x s_w. Backward: the output gradient dy is scaled and rounded to e5m2
(max 57344, two mantissa bits: gradients need range more than precision; e4m3 too with
`fp8_format="e4m3"`), then dx = dy8 @ w8^T x (s_dy s_w) and dw = x8^T @ dy8 x (s_x s_dy), float32
accumulation again. The float8 x and w of the forward pass are what the backward pass keeps
(half the bytes of bfloat16). This is Transformer Engine's "hybrid" format; the float8 types
themselves (OCP or FNUZ) come from `jaxtrain.hardware.backend` (`fp8_formats`).

Scaling recipes (`model.fp8_recipe`):
- "current": amax is that of the tensor itself, this step (Megatron's "tensorwise", TorchTitan's
  float8 default): never clips, costs a reduction over each tensor before its product.
- "delayed" (Transformer Engine's default, MaxText's fp8): amax is the largest (`fp8_amax_algo=
  "max"`) or the latest ("most_recent") of the last `fp8_amax_history` steps' amaxes, so the
  scale is known before the tensor is; values beyond it saturate. Each projection keeps its
  history as an `Fp8Amax` variable [3, H] (input, kernel, output gradient; newest first), part
  of the model state and its checkpoints, never trained. A history still all zero (a run's
  first step) gives scale 1, as in Transformer Engine.

How the gradient's amax gets out of the backward pass: the custom gradient returns the updated
history as the cotangent of the history, and the train step takes that "gradient" as the new
history (Flax's fp8 ops do the same); micro batches combine theirs by maximum
(`jaxtrain.train.buffers`). The optimizer never sees the histories.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from jaxtrain.hardware import backend

# (forward type, gradient type) per `Backend.fp8_formats`, for fp8_format "hybrid".
FORMATS = {
    "ocp": (jnp.float8_e4m3fn, jnp.float8_e5m2),
    "fnuz": (jnp.float8_e4m3fnuz, jnp.float8_e5m2fnuz),
}
TENSORS = ("input", "kernel", "grad")  # rows of an amax history
# Names under which a product's result, scaled and cast to its output dtype, is offered to the
# remat policies (`products.remat_policy`): dense products, and expert-batched ones.
OUTPUT_NAME = "fp8_product"
BATCHED_OUTPUT_NAME = "fp8_batched_product"


@dataclasses.dataclass(frozen=True)
class Fp8Recipe:
    """How a projection quantizes: the `model.fp8_*` settings model code needs."""

    scaling: str = "delayed"  # "delayed" | "current"
    history: int = 1024  # delayed: steps of amax history
    algo: str = "max"  # delayed: "max" | "most_recent"
    margin: int = 0  # scales leave 2^margin headroom
    format: str = "hybrid"  # "hybrid" | "e4m3"
    stats: bool = False  # keep amaxes (current scaling too) for the train metrics

    @property
    def keeps_history(self) -> bool:
        """Whether projections hold an `Fp8Amax` variable."""
        return self.scaling == "delayed" or self.stats

    @property
    def history_length(self) -> int:
        """Steps of amax each history holds (1 when kept only for statistics)."""
        return self.history if self.scaling == "delayed" else 1


def recipe(spec: Any, output_layer: bool = False) -> Fp8Recipe | None:
    """The recipe of a ModelSpec's projections (of its output layer when `output_layer`), or
    None when they compute in model.dtype."""
    if spec.quantization != "fp8" or (output_layer and not spec.fp8_output_layer):
        return None
    return Fp8Recipe(
        scaling=spec.fp8_recipe,
        history=spec.fp8_amax_history,
        algo=spec.fp8_amax_algo,
        margin=spec.fp8_margin,
        format=spec.fp8_format,
        stats=spec.fp8_stats,
    )


class Fp8Amax(nnx.Variable):
    """A projection's amax history [3, H]: rows input, kernel, output gradient, newest first.

    A Variable of its own type, not an `nnx.Param`: the optimizer never sees it; the train step
    sets it to what the backward pass returns in its place (see the module docstring)."""


def empty_history(fp8: Fp8Recipe) -> Fp8Amax:
    """A fresh (all zero) amax history for one projection."""
    return Fp8Amax(
        jnp.zeros((len(TENSORS), fp8.history_length), jnp.float32), logical_axes=(None, None)
    )


def formats(fp8: Fp8Recipe) -> tuple[Any, Any]:
    """(forward, gradient) float8 types on the current backend."""
    forward, grad = FORMATS[backend.current().fp8_formats]
    return (forward, forward) if fp8.format == "e4m3" else (forward, grad)


def _amax(x: jax.Array) -> jax.Array:
    return jnp.max(jnp.abs(x)).astype(jnp.float32)


def scale(
    amax_now: jax.Array, history_H: jax.Array | None, fp8: Fp8Recipe, dtype: Any
) -> jax.Array:
    """The dequantization scale (x ~ q x scale) of one tensor: amax x 2^margin / max.

    Delayed scaling reads only the history, never `amax_now`: the tensor's own amax and its
    quantization then read it in one pass, instead of the quantization waiting for the
    reduction. An empty history (zero: a run's first step) gives scale 1, as in Transformer
    Engine.
    """
    amax = amax_now
    if fp8.scaling == "delayed" and history_H is not None:
        amax = jnp.max(history_H) if fp8.algo == "max" else history_H[0]
    top = float(jnp.finfo(dtype).max)
    ok = jnp.isfinite(amax) & (amax > 0)
    return jnp.where(ok, amax * (2.0**fp8.margin) / top, 1.0)


def quantize(x: jax.Array, scale_: jax.Array, dtype: Any) -> jax.Array:
    """x / scale, saturated to the format's range, in float8 `dtype`."""
    top = float(jnp.finfo(dtype).max)
    return jnp.clip(x.astype(jnp.float32) / scale_, -top, top).astype(dtype)


def pushed(history_3H: jax.Array, amax_3: jax.Array) -> jax.Array:
    """The history with this step's amaxes in front and the oldest dropped."""
    return jnp.concatenate([amax_3[:, None], history_3H[:, :-1]], axis=1)


@dataclasses.dataclass(frozen=True)
class Product:
    """One kind of projection as its three float32-accumulating products.

    "dense": x[..., in...] @ w[in..., out...] contracting x's last `in_rank` dimensions;
    "batched": x_ECD @ w_EDF per expert (capacity-packed experts);
    "ragged": rows x_AD in expert order @ w_EDF by group sizes (`jax.lax.ragged_dot`).
    """

    kind: str
    in_rank: int = 1

    def forward(self, x, w, sizes):
        """y = x @ w."""
        f32 = jnp.float32
        if self.kind == "ragged":
            return jax.lax.ragged_dot(x, w, sizes, preferred_element_type=f32)
        if self.kind == "batched":
            return jax.lax.dot_general(
                x, w, (((2,), (1,)), ((0,), (0,))), preferred_element_type=f32
            )
        contract = tuple(range(x.ndim - self.in_rank, x.ndim))
        return jax.lax.dot_general(
            x, w, ((contract, tuple(range(self.in_rank))), ((), ())), preferred_element_type=f32
        )

    def grad_input(self, g, w, sizes):
        """dx = dy @ w^T."""
        f32 = jnp.float32
        if self.kind == "ragged":
            return jax.lax.ragged_dot(g, jnp.swapaxes(w, 1, 2), sizes, preferred_element_type=f32)
        if self.kind == "batched":
            return jax.lax.dot_general(
                g, w, (((2,), (2,)), ((0,), (0,))), preferred_element_type=f32
            )
        out_rank = w.ndim - self.in_rank
        g_out = tuple(range(g.ndim - out_rank, g.ndim))
        return jax.lax.dot_general(
            g,
            w,
            ((g_out, tuple(range(self.in_rank, w.ndim))), ((), ())),
            preferred_element_type=f32,
        )

    def grad_kernel(self, x, g, sizes):
        """dw = x^T @ dy (x transposed, as `layers.project` does: the smaller operand)."""
        f32 = jnp.float32
        if self.kind == "ragged":
            numbers = jax.lax.RaggedDotDimensionNumbers(
                dot_dimension_numbers=(([0], [0]), ([], [])),
                lhs_ragged_dimensions=[0],
                rhs_group_dimensions=[],
            )
            return jax.lax.ragged_dot_general(x, g, sizes, numbers, preferred_element_type=f32)
        if self.kind == "batched":
            return jax.lax.dot_general(
                x, g, (((1,), (1,)), ((0,), (0,))), preferred_element_type=f32
            )
        batch = tuple(range(x.ndim - self.in_rank))
        return jax.lax.dot_general(x, g, ((batch, batch), ((), ())), preferred_element_type=f32)


def _row(history: jax.Array | None, i: int) -> jax.Array | None:
    return None if history is None else history[i]


def _forward(product, fp8, types, dtypes, x, w, history, sizes):
    forward_type, _ = types
    amax_x, amax_w = _amax(x), _amax(w)
    s_x = scale(amax_x, _row(history, 0), fp8, forward_type)
    s_w = scale(amax_w, _row(history, 1), fp8, forward_type)
    q_x, q_w = quantize(x, s_x, forward_type), quantize(w, s_w, forward_type)
    y = product.forward(q_x, q_w, sizes) * (s_x * s_w)
    residuals = (q_x, q_w, s_x, s_w, amax_x, amax_w, history, sizes)
    return y.astype(dtypes[2]), residuals


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def _scaled(product, fp8, types, dtypes, x, w, history, sizes):
    return _forward(product, fp8, types, dtypes, x, w, history, sizes)[0]


def _scaled_bwd(product, fp8, types, dtypes, residuals, dy):
    q_x, q_w, s_x, s_w, amax_x, amax_w, history, sizes = residuals
    _, grad_type = types
    amax_g = _amax(dy)
    s_g = scale(amax_g, _row(history, 2), fp8, grad_type)
    q_g = quantize(dy, s_g, grad_type)
    dx = product.grad_input(q_g, q_w, sizes) * (s_g * s_w)
    dw = product.grad_kernel(q_x, q_g, sizes) * (s_x * s_g)
    new_history = None if history is None else pushed(history, jnp.stack([amax_x, amax_w, amax_g]))
    return dx.astype(dtypes[0]), dw.astype(dtypes[1]), new_history, None


_scaled.defvjp(lambda *args: _forward(*args), _scaled_bwd)


def scaled_product(
    product: Product,
    x: jax.Array,
    w: jax.Array,
    fp8: Fp8Recipe,
    history: jax.Array | None = None,
    sizes: jax.Array | None = None,
    out_dtype: Any = None,
) -> jax.Array:
    """`product` of x and w computed in float8 (see the module docstring), the result in
    `out_dtype` (x's dtype when None). `history` is the projection's amax history [3, H] (None
    for current scaling without statistics); `sizes` the group sizes of a ragged product.

    The gradient with respect to `history` is the updated history, not a derivative.
    """
    dtypes = (np.dtype(x.dtype), np.dtype(w.dtype), np.dtype(out_dtype or x.dtype))
    y = _scaled(product, fp8, formats(fp8), dtypes, x, w, history, sizes)
    name = {"dense": OUTPUT_NAME, "batched": BATCHED_OUTPUT_NAME}.get(product.kind)
    return checkpoint_name(y, name) if name else y


def project(
    x: jax.Array,
    kernel: jax.Array,
    in_rank: int,
    fp8: Fp8Recipe,
    history: jax.Array | None = None,
    out_dtype: Any = None,
) -> jax.Array:
    """`layers.project` in float8: x[..., in...] @ kernel[in..., out...]."""
    return scaled_product(Product("dense", in_rank), x, kernel, fp8, history, out_dtype=out_dtype)


def history_of(module: Any, name: str = "fp8_amax") -> jax.Array | None:
    """The amax history a module holds under `name`, or None (no history kept)."""
    variable = getattr(module, name, None)
    return None if variable is None else variable[...]


def statistics(histories: dict[str, jax.Array], fp8: Fp8Recipe) -> dict[str, jax.Array]:
    """Scalar train metrics from updated histories {path: [..., 3, H]}: for every projection,
    layer and tensor, the newest amax and the scale the next step will use.

    Named `fp8/<path>/<layer>/<tensor>_amax` and `..._scale` (no layer for unstacked ones).
    """
    types = formats(fp8)
    out: dict[str, jax.Array] = {}
    for path, history in histories.items():
        stacked = history.reshape(-1, *history.shape[-2:])
        for layer in range(stacked.shape[0]):
            where = f"fp8/{path}" + (f"/{layer}" if history.ndim > 2 else "")
            for i, tensor in enumerate(TENSORS):
                row = stacked[layer, i]
                dtype = types[1] if tensor == "grad" else types[0]
                out[f"{where}/{tensor}_amax"] = row[0]
                out[f"{where}/{tensor}_scale"] = scale(row[0], row, fp8, dtype)
    return out
