"""The decoder-only transformer: embed, N blocks (stacked and scanned), norm, logits.

Shape letters: B batch, L length, D embed, V vocab, S cache length, E experts.
Blocks are created with `nnx.vmap` so every parameter gains a leading `layers` dimension, and run
with `nnx.scan` (plus `nnx.remat` when asked), so compile time does not grow with depth;
`scan_layers=False` unrolls the same scan, keeping one parameter layout either way.

A mixture of experts whose first blocks are dense (DeepSeek's `first_k_dense_replace`) keeps
those in a second stack, `dense_layers`, scanned before `layers`; only such specs have it, so
every other family keeps its parameter tree. When dense and expert blocks alternate (Llama 4's
`moe_layer_step` s), `dense_layers` holds the s - 1 dense blocks of every group and `layers` its
expert block, and one scan runs group after group (`_scan_groups`).

A spec with a `block_pattern` (Mamba, Mamba-2, Megatron / Nemotron-H hybrids) holds its
sublayers in `blocks` (`jaxtrain.models.assembly.hybrid`) in place of `layers`.

Blocks that differ only in their attention (sliding / full, chunked RoPE / global NoPE) share a
stack; each gets its `AttentionKind` index as a scanned per-layer array.

On a mesh whose `pipeline` axis is larger than 1, training runs the stack as a pipeline
(`jaxtrain.models.assembly.pipeline`): `layers` (or the groups of `_scan_groups`) split into stages.
Leading dense blocks are not part of it: they run first on every stage, with the batch split
over `pipeline` as over `data`, and their stack is whole on every stage (`prefix_layers`).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain.models.assembly import pipeline
from jaxtrain.models.assembly.hybrid import Context as HybridContext
from jaxtrain.models.assembly.hybrid import HybridStack
from jaxtrain.models.feedforward.mlp import dense_mlp
from jaxtrain.models.feedforward.moe import MoE
from jaxtrain.models.layers import fp8, grouped_matmul, products
from jaxtrain.models.layers.basic import Dense, Embed, LearnedPositions, softcap
from jaxtrain.models.layers.norms import make_norm
from jaxtrain.models.layers.rope import rope_angles, rope_angles_for_length
from jaxtrain.models.mixers.attention import Attention
from jaxtrain.models.mixers.mla import MLAttention
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.models.spec.layer_pattern import attention_kinds, stack_layer_indices
from jaxtrain.parallel import sharding

# {"k": [layers, B, S, K, H], "v": same} (MLA: [layers, B, S, N, Q] and [layers, B, S, N, V]),
# plus "dense_k" / "dense_v" for the leading dense stack when there is one.
Cache = dict[str, jax.Array]

_REMAT_POLICIES = {
    "full": None,
    "dots": jax.checkpoint_policies.checkpoint_dots,
    "dots_with_no_batch_dims": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
    "minimal": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def _remat_policy(spec: ModelSpec):
    """The jax.checkpoint policy of `spec.remat` (None: recompute everything), made to keep the
    results of float8 products, and of bfloat16 products on backends that round them, in the
    model dtype rather than as their float32 accumulators (`products.remat_policy`), and the
    experts' tiled and batched products, which run behind custom gradients
    (`grouped_matmul.OUTPUT_NAME`, `products.BATCHED_NAME`)."""
    policy = _REMAT_POLICIES.get(spec.remat)
    if policy is None:
        return policy
    names = (products.ROUNDED_NAME, grouped_matmul.OUTPUT_NAME)
    if spec.remat == "dots":  # the one policy that saves batched products
        names += (products.BATCHED_NAME,)
    if spec.quantization == "fp8":
        names += (fp8.OUTPUT_NAME,)
        if spec.remat == "dots":
            names += (fp8.BATCHED_OUTPUT_NAME,)
    return products.remat_policy(policy, names)


class Block(nnx.Module):
    """x + attn(norm(x)), then x + mlp(norm(x)); the mlp is a mixture of experts when
    `num_experts` > 0 and not `dense`, whose routing statistics the block returns ({} for a
    dense mlp). The attention is latent (MLA) when `kv_lora_rank` > 0; `kind` indexes the
    block's grouped-query `AttentionKind` (see `layer_pattern`). With `post_norms` the
    sublayer outputs are normed before each add too, and without `pre_norms` (OLMo 2/3) only
    they are: x + norm(attn(x)), then x + norm(mlp(x))."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs, dense: bool = False):
        if spec.pre_norms:
            self.input_norm = make_norm(spec)
        self.attn = MLAttention(spec, rngs=rngs) if spec.mla else Attention(spec, rngs=rngs)
        if spec.pre_norms:
            self.post_attn_norm = make_norm(spec)
        experts = spec.num_experts and not dense
        self.mlp = MoE(spec, rngs=rngs) if experts else dense_mlp(spec, rngs=rngs)
        if spec.post_norms:  # Grok, Gemma 2/3, OLMo: sublayer outputs normed before the add
            self.attn_out_norm = make_norm(spec)
            self.mlp_out_norm = make_norm(spec)

    def __call__(self, x_BLD, cos, sin, index_BL, segment_BL=None, cache=None, kind=0):
        extra = {} if isinstance(self.attn, MLAttention) else {"kind": kind}
        h_BLD = self.input_norm(x_BLD) if hasattr(self, "input_norm") else x_BLD
        attn_BLD, cache = self.attn(h_BLD, cos, sin, index_BL, segment_BL, cache, **extra)
        if hasattr(self, "attn_out_norm"):
            attn_BLD = self.attn_out_norm(attn_BLD)
        x_BLD = x_BLD + attn_BLD
        h_BLD = self.post_attn_norm(x_BLD) if hasattr(self, "post_attn_norm") else x_BLD
        mlp_BLD, stats = self._mlp(h_BLD)
        if hasattr(self, "mlp_out_norm"):
            mlp_BLD = self.mlp_out_norm(mlp_BLD)
        x_BLD = x_BLD + mlp_BLD
        x_BLD = sharding.constrain(
            x_BLD, ("activation_batch", "activation_length", "activation_embed")
        )
        return x_BLD, cache, stats

    def _mlp(self, x_BLD: jax.Array) -> tuple[jax.Array, dict]:
        # One return shape for both kinds keeps a single scan body in the decoder.
        if isinstance(self.mlp, MoE):
            return self.mlp(x_BLD)
        return self.mlp(x_BLD), {}


def _stack(spec: ModelSpec, count: int, dense: bool, rngs: nnx.Rngs, axis: str = "layers") -> Block:
    """`count` blocks whose parameters are stacked over a leading dimension, named `axis` for
    the sharding rules (`stack_axis` metadata; `layers` when absent)."""

    @nnx.split_rngs(splits=count)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def make_blocks(block_rngs: nnx.Rngs) -> Block:
        return Block(spec, rngs=block_rngs, dense=dense)

    blocks = make_blocks(rngs)
    if axis != "layers":
        for _, node in nnx.iter_graph(blocks):
            if isinstance(node, nnx.Variable):
                node.set_metadata("stack_axis", axis)
    return blocks


class Decoder(nnx.Module):
    """A causal language model; `__call__` returns float32 logits [B, L, V] (whatever the
    compute dtype: the loss and sampling need them unrounded)."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        self.spec = spec
        output_fp8 = fp8.recipe(spec, output_layer=True)
        self.embed = Embed(
            spec.vocab_size,
            spec.hidden_size,
            rngs=rngs,
            std=spec.init_std,
            dtype=spec.jnp_dtype,
            param_dtype=spec.jnp_param_dtype,
            fp8=output_fp8 if spec.tie_embeddings else None,
        )
        if spec.learned_positions:  # GPT-3: absolute positions in place of RoPE
            self.position_embed = LearnedPositions(
                spec.learned_positions,
                spec.hidden_size,
                rngs=rngs,
                std=spec.init_std,
                dtype=spec.jnp_dtype,
                param_dtype=spec.jnp_param_dtype,
            )
        if spec.block_pattern:  # a hybrid / state-space stack (models/hybrid.py)
            self.blocks = HybridStack(spec, rngs=rngs)
        else:
            stacks = stack_layer_indices(spec)
            if "dense_layers" in stacks:
                # Leading dense blocks run before the pipeline; interleaved ones are grouped
                # with the expert blocks and split into stages with them.
                axis = "layers" if spec.moe_layer_step > 1 else "prefix_layers"
                self.dense_layers = _stack(spec, len(stacks["dense_layers"]), True, rngs, axis)
            self.layers = _stack(spec, len(stacks["layers"]), False, rngs)
        self.final_norm = make_norm(spec)
        self.lm_head = (
            None
            if spec.tie_embeddings
            else Dense(
                (spec.hidden_size,),
                (spec.vocab_size,),
                ("embed",),
                ("vocab",),
                rngs=rngs,
                std=spec.init_std,
                dtype=spec.jnp_dtype,
                param_dtype=spec.jnp_param_dtype,
                out_dtype=jnp.float32,
                fp8=output_fp8,
            )
        )

    def hidden_states(
        self,
        tokens_BL: jax.Array,
        positions_BL: jax.Array | None = None,
        segment_ids_BL: jax.Array | None = None,
        cache: Cache | None = None,
        cache_index: jax.Array | int = 0,
    ) -> tuple[jax.Array, Cache | None]:
        """The final-norm output [B, L, D], and the updated cache when one is given."""
        x_BLD, new_cache, _ = self._run(tokens_BL, positions_BL, segment_ids_BL, cache, cache_index)
        return x_BLD, new_cache

    def _run(
        self,
        tokens_BL: jax.Array,
        positions_BL: jax.Array | None,
        segment_ids_BL: jax.Array | None,
        cache: Cache | None,
        cache_index: jax.Array | int,
    ) -> tuple[jax.Array, Cache | None, dict]:
        """(final hidden states, updated cache, per-layer mlp statistics stacked over layers)."""
        spec = self.spec
        b, l = tokens_BL.shape
        index_BL = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
        if cache is not None:
            index_BL = index_BL + jnp.asarray(cache_index, jnp.int32)
        if positions_BL is None and cache is None:
            cos, sin = rope_angles_for_length(spec, l)
        else:
            cos, sin = rope_angles(spec, index_BL if positions_BL is None else positions_BL)
        x_BLD = self.embed(tokens_BL)
        if spec.embed_multiplier != 1.0:
            x_BLD = x_BLD * jnp.asarray(spec.embed_multiplier, x_BLD.dtype)
        if spec.learned_positions:
            x_BLD = x_BLD + self.position_embed(index_BL if positions_BL is None else positions_BL)
        unroll = True if not spec.scan_layers else 1
        if spec.block_pattern:
            ctx = HybridContext(cos, sin, index_BL, segment_ids_BL)
            x_BLD, new_cache, stats = self.blocks(
                x_BLD,
                ctx,
                cache,
                remat=spec.remat != "none",
                remat_policy=_remat_policy(spec),
                unroll=unroll,
            )
            return self.final_norm(x_BLD), new_cache, stats

        dense_layers = getattr(self, "dense_layers", None)
        per_layer = attention_kinds(spec)[1]
        kinds = {
            name: jnp.asarray([per_layer[i] for i in layers], jnp.int32)
            for name, layers in stack_layer_indices(spec).items()
        }
        if cache is None and sharding.axis_size(pipeline.AXIS) > 1:
            rows = {"index": index_BL}
            if segment_ids_BL is not None:
                rows["segment"] = segment_ids_BL
            if cos.shape[0] == b and positions_BL is not None:  # per-row positions
                rows["cos"], rows["sin"] = cos, sin
            x_BLD, stats = self._pipelined(x_BLD, (cos, sin), rows, kinds, unroll)
            new_cache = None
        elif spec.moe_layer_step > 1:
            args = (cos, sin, index_BL, segment_ids_BL if cache is None else None)
            x_BLD, new_cache, stats = self._scan_groups(x_BLD, args, kinds, cache, unroll)
        elif cache is None:

            def layer(x, block, kind):
                x, _, stats = block(x, cos, sin, index_BL, segment_ids_BL, kind=kind)
                return x, stats

            if spec.remat != "none":
                layer = nnx.remat(layer, policy=_remat_policy(spec))
            scan = nnx.scan(
                layer, in_axes=(nnx.Carry, 0, 0), out_axes=(nnx.Carry, 0), unroll=unroll
            )
            if dense_layers is not None:
                # dense blocks have no statistics
                x_BLD, _ = scan(x_BLD, dense_layers, kinds["dense_layers"])
            x_BLD, stats = scan(x_BLD, self.layers, kinds["layers"])
            new_cache = None
        else:

            def layer_with_cache(x, block, kind, k, v):
                x, (k, v), _ = block(x, cos, sin, index_BL, None, (k, v), kind=kind)
                return x, (k, v)

            scan = nnx.scan(
                layer_with_cache,
                in_axes=(nnx.Carry, 0, 0, 0, 0),
                out_axes=(nnx.Carry, 0),
                unroll=unroll,
            )
            new_cache = {}
            if dense_layers is not None:
                x_BLD, (k, v) = scan(
                    x_BLD, dense_layers, kinds["dense_layers"], cache["dense_k"], cache["dense_v"]
                )
                new_cache.update(dense_k=k, dense_v=v)
            x_BLD, (k, v) = scan(x_BLD, self.layers, kinds["layers"], cache["k"], cache["v"])
            new_cache.update(k=k, v=v)
            stats = {}
        return self.final_norm(x_BLD), new_cache, stats

    def _pipelined(
        self,
        x_BLD: jax.Array,
        rope: tuple,
        rows: dict[str, jax.Array],
        kinds: dict[str, jax.Array],
        unroll: int | bool,
    ) -> tuple[jax.Array, dict]:
        """The training forward through the stack as a pipeline over the `pipeline` mesh axis
        (see `jaxtrain.models.assembly.pipeline`); `rows` holds the per-row inputs (token index, and
        segment ids and per-row RoPE tables when given)."""
        spec = self.spec

        def args_of(rows_b: dict[str, jax.Array]) -> tuple:
            cos, sin = (rows_b["cos"], rows_b["sin"]) if "cos" in rows_b else rope
            return cos, sin, rows_b["index"], rows_b.get("segment")

        if spec.moe_layer_step > 1:
            units, group, _ = self._group_units(kinds)

            def unit_fn(x, unit, rows_b):
                x, (stats, _) = group(x, unit, args_of(rows_b))
                return x, stats
        else:
            dense_layers = getattr(self, "dense_layers", None)
            if dense_layers is not None:  # leading dense blocks, before the pipeline

                def layer(x, block, kind):
                    x, _, _ = block(x, *args_of(rows), kind=kind)
                    return x

                if spec.remat != "none":
                    layer = nnx.remat(layer, policy=_remat_policy(spec))
                x_BLD = nnx.scan(
                    layer, in_axes=(nnx.Carry, 0, 0), out_axes=nnx.Carry, unroll=unroll
                )(x_BLD, dense_layers, kinds["dense_layers"])
            graphdef, state = nnx.split(self.layers)
            units = {"blocks": state, "kind": kinds["layers"]}

            def unit_fn(x, unit, rows_b):
                block = nnx.merge(graphdef, unit["blocks"])
                x, _, stats = block(x, *args_of(rows_b), kind=unit["kind"])
                return x, stats

        remat = None
        if spec.remat != "none":
            remat = functools.partial(jax.checkpoint, policy=_remat_policy(spec))
        return pipeline.run(unit_fn, units, x_BLD, rows, remat=remat, unroll=unroll)

    def _group_units(self, kinds: dict[str, jax.Array]):
        """(per-group inputs with a leading [groups] dimension, group(x, xs, args) -> (x,
        (stats, cache)), the [groups x (s-1)] -> [groups, s-1] reshape) for alternating dense
        and expert blocks: one group is s - 1 dense
        blocks (slots g(s-1) .. g(s-1) + s-2 of `dense_layers`) and one expert block (slot g
        of `layers`), so the two stacks keep their own parameter shapes."""
        spec = self.spec
        sub = spec.moe_layer_step - 1
        groups = spec.num_layers // spec.moe_layer_step
        dense_def, dense_state = nnx.split(self.dense_layers)
        moe_def, moe_state = nnx.split(self.layers)

        def by_group(t):
            return t.reshape(groups, sub, *t.shape[1:])

        xs = {
            "dense": jax.tree.map(by_group, dense_state),
            "moe": moe_state,
            "dense_kind": by_group(kinds["dense_layers"]),
            "moe_kind": kinds["layers"],
        }

        def group(x, xs, args):
            caches = xs.get("cache")
            new = {"dense_k": [], "dense_v": []}
            for r in range(sub):
                block = nnx.merge(dense_def, jax.tree.map(lambda t, r=r: t[r], xs["dense"]))
                kv = None if caches is None else (caches["dense_k"][r], caches["dense_v"][r])
                x, kv, _ = block(x, *args, kv, kind=xs["dense_kind"][r])
                if kv is not None:
                    new["dense_k"].append(kv[0])
                    new["dense_v"].append(kv[1])
            block = nnx.merge(moe_def, xs["moe"])
            kv = None if caches is None else (caches["k"], caches["v"])
            x, kv, stats = block(x, *args, kv, kind=xs["moe_kind"])
            if kv is None:
                return x, (stats, None)
            new = {name: jnp.stack(values) for name, values in new.items()}
            return x, ({}, dict(new, k=kv[0], v=kv[1]))

        return xs, group, by_group

    def _scan_groups(
        self,
        x_BLD: jax.Array,
        args: tuple,
        kinds: dict[str, jax.Array],
        cache: Cache | None,
        unroll: int | bool,
    ) -> tuple[jax.Array, Cache | None, dict]:
        """Alternating dense and expert blocks: one scan step per group (`_group_units`)."""
        spec = self.spec
        xs, group, by_group = self._group_units(kinds)
        if cache is not None:
            xs["cache"] = {
                "dense_k": by_group(cache["dense_k"]),
                "dense_v": by_group(cache["dense_v"]),
                "k": cache["k"],
                "v": cache["v"],
            }

        def step(x, xs):
            return group(x, xs, args)

        if spec.remat != "none" and cache is None:
            step = jax.checkpoint(step, policy=_remat_policy(spec))
        x_BLD, (stats, new_cache) = jax.lax.scan(step, x_BLD, xs, unroll=unroll)
        if new_cache is not None:
            new_cache = {
                name: value.reshape(cache[name].shape) for name, value in new_cache.items()
            }
        return x_BLD, new_cache, stats

    def logits(self, x_BLD: jax.Array) -> jax.Array:
        """Output projection of final hidden states (tied to the embedding when configured)."""
        if self.lm_head is None:
            logits_BLV = self.embed.attend(x_BLD)
        else:
            logits_BLV = self.lm_head(x_BLD)
        if self.spec.output_multiplier != 1.0:
            logits_BLV = logits_BLV * self.spec.output_multiplier
        if self.spec.final_logit_softcap:
            logits_BLV = softcap(logits_BLV, self.spec.final_logit_softcap)
        return sharding.constrain(
            logits_BLV, ("activation_batch", "activation_length", "activation_vocab")
        )

    def output_kernel(self) -> jax.Array:
        """The output projection [D, V] in the compute dtype: `logits(x)` is x @ this in
        float32 (the embedding, transposed, when tied; times `output_multiplier`), before any
        `final_logit_softcap`."""
        kernel = (
            self.embed.attend_kernel() if self.lm_head is None else self.lm_head.compute_kernel()
        )
        if self.spec.output_multiplier != 1.0:
            kernel = kernel * jnp.asarray(self.spec.output_multiplier, kernel.dtype)
        return kernel

    def __call__(
        self,
        tokens_BL: jax.Array,
        positions_BL: jax.Array | None = None,
        segment_ids_BL: jax.Array | None = None,
    ) -> jax.Array:
        x_BLD, _ = self.hidden_states(tokens_BL, positions_BL, segment_ids_BL)
        return self.logits(x_BLD)

    def forward_with_stats(
        self,
        tokens_BL: jax.Array,
        positions_BL: jax.Array | None = None,
        segment_ids_BL: jax.Array | None = None,
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Logits [B, L, V] plus the mixture-of-experts statistics of every expert layer
        ({"aux_loss": [layers], "z_loss": [layers], "load": [layers, E]}; {} when dense)."""
        x_BLD, stats = self.hidden_with_stats(tokens_BL, positions_BL, segment_ids_BL)
        return self.logits(x_BLD), stats

    def hidden_with_stats(
        self,
        tokens_BL: jax.Array,
        positions_BL: jax.Array | None = None,
        segment_ids_BL: jax.Array | None = None,
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """`forward_with_stats` up to the final norm: hidden states [B, L, D] in the compute
        dtype, for losses that apply `output_kernel` themselves (`train.loss_chunks`)."""
        x_BLD, _, stats = self._run(tokens_BL, positions_BL, segment_ids_BL, None, 0)
        return x_BLD.astype(self.spec.jnp_dtype), stats

    def init_cache(self, batch: int, max_len: int, dtype: Any = None) -> Cache:
        """An empty key/value cache for `batch` rows of up to `max_len` tokens."""
        spec = self.spec
        dtype = dtype or spec.jnp_dtype
        if spec.block_pattern:
            return self.blocks.init_cache(batch, max_len, dtype)
        if spec.mla:
            k_shape = (
                batch,
                max_len,
                spec.num_heads,
                spec.qk_nope_head_dim + spec.qk_rope_head_dim,
            )
            v_shape = (batch, max_len, spec.num_heads, spec.v_head_dim)
        else:
            k_shape = v_shape = (batch, max_len, spec.num_kv_heads, spec.head_dim)
        cache = {}
        for name, layers in stack_layer_indices(spec).items():
            prefix = "dense_" if name == "dense_layers" else ""
            cache[f"{prefix}k"] = jnp.zeros((len(layers), *k_shape), dtype)
            cache[f"{prefix}v"] = jnp.zeros((len(layers), *v_shape), dtype)
        return cache


def build_model(spec: ModelSpec, seed: int = 0) -> Decoder:
    """A freshly initialised decoder (for sharded creation use `jaxtrain.train.state`)."""
    return Decoder(spec, rngs=nnx.Rngs(params=seed))
