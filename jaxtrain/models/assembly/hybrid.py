"""Hybrid block stacks: one pre-norm residual sublayer per character of `model.block_pattern`
(Megatron's hybrid pattern, see `block_pattern`), with each sublayer kind's own parameters.

Shape letters: B batch, L length, D embed, S cache length.

Sublayers at the same position of the pattern's period share parameter shapes, so each position
is one stack (`s0`, `s1`, ...) stacked over the pattern's repeats (`layers` axis), and one
`lax.scan` over the repeats runs a whole period per step: compile time follows the period, not
the depth. A mixer kind is a `MixerType` in `MIXERS` (how to build it, call it, and the decoding
state it keeps); adding one is the short list in `block_pattern`'s docstring.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain.models.assembly import pipeline
from jaxtrain.models.feedforward.mlp import ReluSquaredMLP, SwiGLU
from jaxtrain.models.feedforward.moe import MoE
from jaxtrain.models.layers.basic import RMSNorm
from jaxtrain.models.mixers import linear_mixer
from jaxtrain.models.mixers.attention import Attention
from jaxtrain.models.mixers.gated_delta import GatedDeltaNet
from jaxtrain.models.mixers.kda import KimiDeltaAttention
from jaxtrain.models.mixers.mamba import MambaMixer
from jaxtrain.models.mixers.mamba2 import Mamba2Mixer, init_ssm_cache
from jaxtrain.models.mixers.mla import MLAttention
from jaxtrain.models.spec.block_pattern import pattern_kinds, period
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.parallel import sharding


@dataclasses.dataclass(frozen=True)
class Context:
    """What every sublayer may read besides x: rotary tables, token slots, segment ids."""

    cos: jax.Array
    sin: jax.Array
    index_BL: jax.Array
    segment_BL: jax.Array | None


@dataclasses.dataclass(frozen=True)
class MixerType:
    """One sublayer kind: `build(spec, rngs)` makes its module; `call(module, x, ctx, cache)`
    returns (output, new cache or None, statistics); `init_cache(spec, batch, max_len, dtype)`
    its empty decoding state ({} when it keeps none)."""

    build: Callable[[ModelSpec, nnx.Rngs], nnx.Module]
    call: Callable[[nnx.Module, jax.Array, Context, dict | None], tuple]
    init_cache: Callable[[ModelSpec, int, int, Any], dict]


def _build_mamba(spec: ModelSpec, rngs: nnx.Rngs) -> nnx.Module:
    return MambaMixer(spec, rngs=rngs) if spec.mamba_version == 1 else Mamba2Mixer(spec, rngs=rngs)


def _call_mamba(mixer, x_BLD, ctx, cache):
    y, cache = mixer(x_BLD, cache, ctx.segment_BL if cache is None else None)
    return y, cache, {}


def _build_attention(spec: ModelSpec, rngs: nnx.Rngs) -> nnx.Module:
    return MLAttention(spec, rngs=rngs) if spec.mla else Attention(spec, rngs=rngs)


def _call_attention(attn, x_BLD, ctx, cache):
    kv = None if cache is None else (cache["k"], cache["v"])
    segment = ctx.segment_BL if cache is None else None
    y, kv = attn(x_BLD, ctx.cos, ctx.sin, ctx.index_BL, segment, kv)
    return y, None if kv is None else {"k": kv[0], "v": kv[1]}, {}


def _attention_cache(spec: ModelSpec, batch: int, max_len: int, dtype: Any) -> dict:
    if spec.mla:
        k = (batch, max_len, spec.num_heads, spec.qk_nope_head_dim + spec.qk_rope_head_dim)
        v = (batch, max_len, spec.num_heads, spec.v_head_dim)
    else:
        k = v = (batch, max_len, spec.num_kv_heads, spec.head_dim)
    return {"k": jnp.zeros(k, dtype), "v": jnp.zeros(v, dtype)}


def _build_mlp(spec: ModelSpec, rngs: nnx.Rngs) -> nnx.Module:
    # relu2 is ungated (two projections); swiglu and geglu are gated (three).
    if spec.mlp_activation == "relu2":
        return ReluSquaredMLP(spec, rngs=rngs)
    return SwiGLU(spec, rngs=rngs)


def _call_delta(mixer, x_BLD, ctx, cache):
    # Gated DeltaNet / KDA: the whole sequence (packed documents kept apart), or a continuation
    # from the conv inputs and recurrent state in `cache`.
    if cache is None:
        return mixer(x_BLD, ctx.segment_BL), None, {}
    y, cache = mixer.decode(x_BLD, cache)
    return y, cache, {}


def _delta_cache(spec: ModelSpec, batch: int, max_len: int, dtype: Any) -> dict:
    return linear_mixer.init_cache(spec, batch, dtype)


def _no_cache(spec: ModelSpec, batch: int, max_len: int, dtype: Any) -> dict:
    return {}


MIXERS: dict[str, MixerType] = {
    "mamba": MixerType(
        _build_mamba, _call_mamba, lambda spec, batch, max_len, dtype: init_ssm_cache(spec, batch)
    ),
    "attention": MixerType(_build_attention, _call_attention, _attention_cache),
    "mlp": MixerType(_build_mlp, lambda mlp, x, ctx, cache: (mlp(x), None, {}), _no_cache),
    "moe": MixerType(
        lambda spec, rngs: MoE(spec, rngs=rngs), lambda moe, x, ctx, cache: _pair(moe(x)), _no_cache
    ),
    "gdn": MixerType(lambda spec, rngs: GatedDeltaNet(spec, rngs=rngs), _call_delta, _delta_cache),
    "kda": MixerType(
        lambda spec, rngs: KimiDeltaAttention(spec, rngs=rngs), _call_delta, _delta_cache
    ),
}


def _pair(out: tuple[jax.Array, dict]) -> tuple[jax.Array, None, dict]:
    return out[0], None, out[1]


class Sublayer(nnx.Module):
    """x + mixer(norm(x)) for one pattern character."""

    def __init__(self, spec: ModelSpec, kind: str, *, rngs: nnx.Rngs):
        self.kind = kind
        self.norm = RMSNorm(
            spec.hidden_size,
            spec.norm_eps,
            dtype=spec.jnp_dtype,
            param_dtype=spec.jnp_param_dtype,
            zero_centered=spec.norm_zero_centered,  # Qwen3-Next / Qwen3.5
        )
        self.mixer = MIXERS[kind].build(spec, rngs)

    def __call__(
        self, x_BLD: jax.Array, ctx: Context, cache: dict | None = None
    ) -> tuple[jax.Array, dict | None, dict]:
        y_BLD, cache, stats = MIXERS[self.kind].call(self.mixer, self.norm(x_BLD), ctx, cache)
        x_BLD = x_BLD + y_BLD.astype(x_BLD.dtype)
        x_BLD = sharding.constrain(
            x_BLD, ("activation_batch", "activation_length", "activation_embed")
        )
        return x_BLD, cache, stats


def _stack(spec: ModelSpec, kind: str, count: int, rngs: nnx.Rngs) -> Sublayer:
    """`count` sublayers of one kind, parameters stacked over a leading `layers` dimension."""

    @nnx.split_rngs(splits=count)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def make(sub_rngs: nnx.Rngs) -> Sublayer:
        return Sublayer(spec, kind, rngs=sub_rngs)

    return make(rngs)


class HybridStack(nnx.Module):
    """The sublayers of `spec.block_pattern`: stack `s{j}` holds position j of every repeat of
    the pattern's period, so checkpoint sublayer i is slot i // period of stack i % period."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        self.spec = spec
        self.period = period(spec.block_pattern)
        self.repeats = spec.num_layers // self.period
        for j, kind in enumerate(pattern_kinds(spec.block_pattern[: self.period])):
            setattr(self, f"s{j}", _stack(spec, kind, self.repeats, rngs))

    def positions(self) -> list[Sublayer]:
        """The per-position stacks, in pattern order."""
        return [getattr(self, f"s{j}") for j in range(self.period)]

    def __call__(
        self,
        x_BLD: jax.Array,
        ctx: Context,
        cache: dict | None,
        *,
        remat_policy: Any = None,
        remat: bool = False,
        unroll: int | bool = 1,
    ) -> tuple[jax.Array, dict | None, dict]:
        """(hidden states, updated cache when one is given, mixture-of-experts statistics of
        every expert sublayer concatenated over sublayers)."""
        if not self.spec.use_rope:  # rotating by angle 0 keeps q and k as they are
            ctx = dataclasses.replace(ctx, cos=jnp.ones_like(ctx.cos), sin=jnp.zeros_like(ctx.sin))
        if cache is None and sharding.axis_size(pipeline.AXIS) > 1:
            remat_fn = functools.partial(jax.checkpoint, policy=remat_policy) if remat else None
            x_BLD, stats = self._pipelined(x_BLD, ctx, remat_fn, unroll)
            return x_BLD, None, stats
        split = [nnx.split(stack) for stack in self.positions()]
        graphdefs = [g for g, _ in split]
        xs: dict[str, Any] = {"params": [s for _, s in split]}
        if cache is not None:
            xs["cache"] = [cache[f"s{j}"] for j in range(self.period)]

        def body(x, xs):
            caches, stats = [], []
            for j, graphdef in enumerate(graphdefs):
                block = nnx.merge(graphdef, xs["params"][j])
                x, c, s = block(x, ctx, None if cache is None else xs["cache"][j])
                caches.append(c if c is not None else {})
                stats.append(s)
            return x, (caches if cache is not None else None, stats)

        if remat and cache is None:
            body = jax.checkpoint(body, policy=remat_policy)
        x_BLD, (caches, stats) = jax.lax.scan(body, x_BLD, xs, unroll=unroll)
        new_cache = None
        if cache is not None:
            new_cache = {f"s{j}": c for j, c in enumerate(caches)}
        found = [s for s in stats if s]
        merged = {}
        if found:
            merged = {k: jnp.concatenate([s[k] for s in found]) for k in found[0]}
        return x_BLD, new_cache, merged

    def _pipelined(
        self, x_BLD: jax.Array, ctx: Context, remat: Any, unroll: int | bool
    ) -> tuple[jax.Array, dict]:
        """The training forward as a pipeline over the `pipeline` mesh axis
        (`jaxtrain.models.assembly.pipeline`): a unit is one repeat of the period, its sublayers in
        order, so the stages hold contiguous runs of repeats."""
        split = [nnx.split(stack) for stack in self.positions()]
        graphdefs = [g for g, _ in split]
        units = [s for _, s in split]  # leaves [repeats, ...]
        rows = {"index": ctx.index_BL}
        if ctx.segment_BL is not None:
            rows["segment"] = ctx.segment_BL
        if ctx.cos.shape[0] == x_BLD.shape[0] and ctx.cos.ndim == 3:  # per-row tables
            rows["cos"], rows["sin"] = ctx.cos, ctx.sin

        def unit_fn(x, unit, rows_b):
            cos, sin = (rows_b["cos"], rows_b["sin"]) if "cos" in rows_b else (ctx.cos, ctx.sin)
            ctx_b = Context(cos, sin, rows_b["index"], rows_b.get("segment"))
            stats = []
            for graphdef, state in zip(graphdefs, unit, strict=True):
                x, _, s = nnx.merge(graphdef, state)(x, ctx_b, None)
                if s:
                    stats.append(s)
            # [expert sublayers of the period, ...] per unit
            return x, {k: jnp.stack([s[k] for s in stats]) for k in stats[0]} if stats else {}

        x_BLD, stats = pipeline.run(unit_fn, units, x_BLD, rows, remat=remat, unroll=unroll)
        # [repeats, positions, ...] -> position-major, as the scan above concatenates them.
        return x_BLD, {k: jnp.swapaxes(v, 0, 1).reshape(-1, *v.shape[2:]) for k, v in stats.items()}

    def init_cache(self, batch: int, max_len: int, dtype: Any) -> dict:
        """An empty decoding state: per position, each kind's cache stacked over repeats."""
        cache = {}
        for j, block in enumerate(self.positions()):
            one = MIXERS[block.kind].init_cache(self.spec, batch, max_len, dtype)
            cache[f"s{j}"] = jax.tree.map(
                lambda t: jnp.broadcast_to(t, (self.repeats, *t.shape)), one
            )
        return cache
