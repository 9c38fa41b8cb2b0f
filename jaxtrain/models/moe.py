"""The mixture-of-experts feed-forward block: a softmax router picks top-k SwiGLU experts per token.

Shape letters: B batch, L length, D embed, E experts, K top-k, F expert hidden size,
T tokens (B x L), A assignments (T x K).

Routing is dropless: every token reaches all of its k experts, whatever the load. Assignments
are sorted by expert so each expert's tokens are contiguous, then one `jax.lax.ragged_dot`
(a grouped matmul: rows [M, D] in expert order, weights [E, D, F], group sizes [E]) runs all
experts at once. With expert weights sharded over the `expert` mesh axis, XLA inserts the
collectives; an explicit all-to-all dispatch under `shard_map` is a later optimisation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain import sharding
from jaxtrain.models.layers import Dense, make_param
from jaxtrain.models.spec import ModelSpec

MoeStats = dict[str, jax.Array]  # {"aux_loss": [], "z_loss": [], "load": [E]}


def route(logits_TE: jax.Array, k: int, score: str, norm_topk: bool
          ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(weights [T, K], experts [T, K], probs [T, E]) from float32 router logits.

    score "topk_softmax" (Mixtral) takes the k largest logits and softmaxes over them;
    "softmax_topk" (Qwen-MoE) softmaxes over all experts, keeps the k largest probabilities
    and renormalises them to sum to one only when `norm_topk`. `probs` is always the softmax
    over all experts, which the load-balancing loss needs.
    """
    probs_TE = jax.nn.softmax(logits_TE, axis=-1)
    if score == "topk_softmax":
        top_logits_TK, experts_TK = jax.lax.top_k(logits_TE, k)
        return jax.nn.softmax(top_logits_TK, axis=-1), experts_TK, probs_TE
    weights_TK, experts_TK = jax.lax.top_k(probs_TE, k)
    if norm_topk:
        weights_TK = weights_TK / jnp.sum(weights_TK, axis=-1, keepdims=True)
    return weights_TK, experts_TK, probs_TE


def load_balancing_loss(probs_TE: jax.Array, experts_TK: jax.Array) -> tuple[jax.Array,
                                                                             jax.Array]:
    """(E x sum_e f_e x p_e, f [E]): f_e the fraction of the T x K assignments that go to
    expert e, p_e the mean router probability of e. A perfectly even router scores 1.

    (transformers' Mixtral loss counts f over tokens rather than assignments, which is k times
    this value; dividing by k keeps one coefficient meaningful across top-k choices.)
    """
    num_experts = probs_TE.shape[-1]
    load_E = jnp.mean(jax.nn.one_hot(experts_TK, num_experts, dtype=jnp.float32), axis=(0, 1))
    prob_E = jnp.mean(probs_TE, axis=0)
    return num_experts * jnp.sum(load_E * prob_E), load_E


def router_z_loss(logits_TE: jax.Array) -> jax.Array:
    """Mean squared log-partition of the router logits (ST-MoE), keeping logits small."""
    return jnp.mean(jnp.square(jax.nn.logsumexp(logits_TE, axis=-1)))


class MoE(nnx.Module):
    """Router plus `num_experts` SwiGLU experts; returns the output and the routing statistics."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        d, f, e = spec.hidden_size, spec.moe_intermediate_size, spec.num_experts
        self.k, self.score, self.norm_topk = (spec.num_experts_per_tok, spec.moe_score,
                                              spec.moe_norm_topk)
        self.dtype = spec.jnp_dtype
        pdt = spec.jnp_param_dtype
        # Routing decisions are made in float32 whatever the compute dtype: near-ties in
        # bfloat16 would flip expert choices.
        self.router = Dense((d,), (e,), ("embed",), ("exp",), rngs=rngs, std=spec.init_std,
                            dtype=jnp.float32, param_dtype=pdt)
        self.gate_proj = make_param(rngs, (e, d, f), ("exp", "embed", "mlp"), spec.init_std, pdt)
        self.up_proj = make_param(rngs, (e, d, f), ("exp", "embed", "mlp"), spec.init_std, pdt)
        self.down_proj = make_param(rngs, (e, f, d), ("exp", "mlp", "embed"), spec.init_std, pdt)

    def __call__(self, x_BLD: jax.Array) -> tuple[jax.Array, MoeStats]:
        b, l, d = x_BLD.shape
        x_TD = x_BLD.reshape(b * l, d)
        logits_TE = self.router(x_TD)
        weights_TK, experts_TK, probs_TE = route(logits_TE, self.k, self.score, self.norm_topk)
        aux_loss, load_E = load_balancing_loss(probs_TE, experts_TK)
        stats = {"aux_loss": aux_loss, "z_loss": router_z_loss(logits_TE), "load": load_E}

        # Sort the T x K assignments by expert; a stable sort keeps token order inside a group.
        num_experts = self.gate_proj.shape[0]
        experts_A = experts_TK.reshape(-1)
        order_A = jnp.argsort(experts_A, stable=True)
        x_AD = jnp.take(x_TD, order_A // self.k, axis=0).astype(self.dtype)
        sizes_E = jnp.bincount(experts_A, length=num_experts).astype(jnp.int32)

        def grouped(lhs, w):
            return jax.lax.ragged_dot(lhs, w[...].astype(self.dtype), sizes_E)

        h_AF = jax.nn.silu(grouped(x_AD, self.gate_proj)) * grouped(x_AD, self.up_proj)
        y_AD = grouped(h_AF, self.down_proj)
        # Back to (token, slot) order, then the router-weighted sum over each token's k experts.
        y_TKD = jnp.zeros_like(y_AD).at[order_A].set(y_AD).reshape(b * l, self.k, d)
        y_TD = jnp.einsum("tkd,tk->td", y_TKD, weights_TK.astype(self.dtype))
        y_BLD = sharding.constrain(y_TD.reshape(b, l, d), ("activation_batch",
                                                           "activation_length",
                                                           "activation_embed"))
        return y_BLD, stats


# Train-step metrics of a mixture of experts: token-weighted means over the step.
MOE_METRICS = ("moe_aux_loss", "moe_z_loss", "moe_load_max", "moe_load_min")


def moe_losses(stats: MoeStats, aux_coef: float, z_coef: float
               ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """(per-token penalty to add to the loss, metrics) from the per-layer stacked statistics.

    Both losses are averaged over layers, so a coefficient keeps its meaning at any depth.
    Load is the fraction of assignments per expert (1 / E when balanced), over all layers.
    """
    aux_loss = jnp.mean(stats["aux_loss"])
    z_loss = jnp.mean(stats["z_loss"])
    metrics = {"moe_aux_loss": aux_loss, "moe_z_loss": z_loss,
               "moe_load_max": jnp.max(stats["load"]), "moe_load_min": jnp.min(stats["load"])}
    return aux_coef * aux_loss + z_coef * z_loss, metrics
