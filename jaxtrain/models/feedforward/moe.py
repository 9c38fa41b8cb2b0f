"""The mixture-of-experts feed-forward block: a router picks top-k SwiGLU (or GeGLU, clamped
SwiGLU, ungated relu2) experts per token.

Shape letters: B batch, L length, D embed, E experts, K top-k, F expert hidden size,
T tokens (B x L), A assignments (T x K), G expert groups, P experts per group.

Routers score experts by softmax (Mixtral, gpt-oss, Qwen-MoE, DeepSeek V2) or sigmoid
(DeepSeek V3, Llama 4), may first limit each token to its best groups of experts (DeepSeek), and
may add a per-expert bias to the scores that choose experts, never to the weights (DeepSeek V3's
auxiliary-loss-free balancing: the train step moves the bias toward even load, see
`updated_router_bias`). Shared experts (DeepSeek, Llama 4) are one dense SwiGLU every token
passes through, added to the routed output. gpt-oss adds biases to the router and the experts
and clamps its SwiGLU (`clamped_swiglu`); Llama 4 scales each expert's input, not its output,
by the router weight.

Routing is dropless: every token reaches all of its k experts, whatever the load. Assignments
are sorted by expert so each expert's tokens are contiguous, then one grouped matmul (rows
[M, D] in expert order, weights [E, D, F], group sizes [E]; `layers.grouped_matmul`) runs all
experts at once. On a mesh each device routes its own tokens (`expert_dispatch`): weights
split over `expert` run the tokens of the devices along that axis, gathered, through each
device's own experts.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain.models.feedforward import expert_dispatch
from jaxtrain.models.feedforward.mlp import ReluSquaredMLP, SwiGLU, geglu, swiglu
from jaxtrain.models.layers import fp8 as fp8_lib
from jaxtrain.models.layers import products
from jaxtrain.models.layers.basic import Dense, make_param, softcap
from jaxtrain.models.layers.grouped_matmul import grouped_matmul
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.parallel import sharding

# {"aux_loss": [], "z_loss": [], "load": [E], "prob": [E], "dropped": []}
MoeStats = dict[str, jax.Array]


class RouterBias(nnx.Variable):
    """The per-expert score bias of auxiliary-loss-free balancing (transformers'
    `e_score_correction_bias`). A Variable of its own type, not an `nnx.Param`: it gets no
    gradient and the optimizer never sees it; the train step sets it from the expert load."""


def limit_to_groups(choice_TE: jax.Array, method: str, n_group: int, topk_group: int) -> jax.Array:
    """`choice` with every expert outside the token's `topk_group` best groups set to -inf.

    A group's score is its best expert's ("group_limited_greedy", DeepSeek V2) or the sum of
    its two best ("noaux_tc", DeepSeek V3); "greedy" keeps every expert.
    """
    if method == "greedy":
        return choice_TE
    t, e = choice_TE.shape
    choice_TGP = choice_TE.reshape(t, n_group, e // n_group)
    if method == "group_limited_greedy":
        group_TG = jnp.max(choice_TGP, axis=-1)
    else:
        group_TG = jnp.sum(jax.lax.top_k(choice_TGP, 2)[0], axis=-1)
    _, kept_TK = jax.lax.top_k(group_TG, topk_group)
    keep_TG = jnp.any(jax.nn.one_hot(kept_TK, n_group, dtype=jnp.bool_), axis=1)
    keep_TE = jnp.repeat(keep_TG, e // n_group, axis=-1)
    return jnp.where(keep_TE, choice_TE, -jnp.inf)


def route(
    logits_TE: jax.Array,
    k: int,
    score: str,
    norm_topk: bool,
    *,
    bias_E: jax.Array | None = None,
    topk_method: str = "greedy",
    n_group: int = 1,
    topk_group: int = 1,
    scaling: float = 1.0,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(weights [T, K], experts [T, K], probs [T, E]) from float32 router logits.

    score "topk_softmax" (Mixtral) takes the k largest logits and softmaxes over them;
    "softmax_topk" (Qwen-MoE, DeepSeek V2) softmaxes over all experts, keeps the k largest
    probabilities and renormalises them to sum to one only when `norm_topk`; "sigmoid"
    (DeepSeek V3) scores each expert by its own sigmoid, renormalised likewise; "topk_sigmoid"
    (Llama 4) keeps the k largest logits and weights each by its sigmoid. Experts are
    chosen by score + `bias_E` among the groups `limit_to_groups` keeps, weighted by the
    unbiased score times `scaling`. `probs` (the load-balancing loss's router probabilities)
    is the softmax over all experts, or for sigmoid the scores normalised to sum to one.
    """
    probs_TE = jax.nn.softmax(logits_TE, axis=-1)
    plain = bias_E is None and topk_method == "greedy" and scaling == 1.0
    if score == "topk_softmax" and plain:
        top_logits_TK, experts_TK = jax.lax.top_k(logits_TE, k)
        return jax.nn.softmax(top_logits_TK, axis=-1), experts_TK, probs_TE
    if score == "topk_sigmoid":  # Llama 4: each kept logit's own sigmoid, not renormalised
        top_logits_TK, experts_TK = jax.lax.top_k(logits_TE, k)
        return jax.nn.sigmoid(top_logits_TK) * scaling, experts_TK, probs_TE
    if score == "sigmoid":
        scores_TE = jax.nn.sigmoid(logits_TE)
        probs_TE = scores_TE / jnp.sum(scores_TE, axis=-1, keepdims=True)
    else:
        scores_TE = probs_TE
    choice_TE = scores_TE if bias_E is None else scores_TE + bias_E.astype(jnp.float32)
    choice_TE = limit_to_groups(choice_TE, topk_method, n_group, topk_group)
    _, experts_TK = jax.lax.top_k(choice_TE, k)
    weights_TK = jnp.take_along_axis(scores_TE, experts_TK, axis=-1)
    if norm_topk or score == "topk_softmax":
        # The tiny floor keeps sigmoid scores that all underflowed from dividing by zero.
        weights_TK = weights_TK / (jnp.sum(weights_TK, axis=-1, keepdims=True) + 1e-20)
    return weights_TK * scaling, experts_TK, probs_TE


def load_balancing_loss(probs_TE: jax.Array, experts_TK: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(E x sum_e f_e x p_e, f [E]): f_e the fraction of the T x K assignments that go to
    expert e, p_e the mean router probability of e. A perfectly even router scores 1.

    (transformers' Mixtral loss counts f over tokens rather than assignments, which is k times
    this value; dividing by k keeps one coefficient meaningful across top-k choices.)
    """
    num_experts = probs_TE.shape[-1]
    load_E = jnp.mean(jax.nn.one_hot(experts_TK, num_experts, dtype=jnp.float32), axis=(0, 1))
    prob_E = jnp.mean(probs_TE, axis=0)
    return num_experts * jnp.sum(load_E * prob_E), load_E


def balance_loss_of_means(load_E: jax.Array, prob_E: jax.Array) -> jax.Array:
    """`load_balancing_loss` from its two means (any leading dimensions): E x sum_e f_e x p_e."""
    return load_E.shape[-1] * jnp.sum(load_E * prob_E, axis=-1)


def clamped_swiglu(gate: jax.Array, up: jax.Array, alpha: float, limit: float) -> jax.Array:
    """gpt-oss's expert activation: (up + 1) x gate x sigmoid(alpha x gate), with the gate
    clamped to at most `limit` and up to [-limit, limit] so no activation can blow up."""
    gate = jnp.minimum(gate, limit)
    up = jnp.clip(up, -limit, limit)
    return (up + 1.0) * gate * jax.nn.sigmoid(alpha * gate)


def router_z_loss(logits_TE: jax.Array) -> jax.Array:
    """Mean squared log-partition of the router logits (ST-MoE), keeping logits small."""
    return jnp.mean(jnp.square(jax.nn.logsumexp(logits_TE, axis=-1)))


class MoE(nnx.Module):
    """Router plus `num_experts` SwiGLU experts (and optional shared experts and expert bias);
    returns the output and the routing statistics."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        d, f, e = spec.hidden_size, spec.moe_intermediate_size, spec.num_experts
        self.num_experts = e
        self.k, self.score, self.norm_topk = (
            spec.num_experts_per_tok,
            spec.moe_score,
            spec.moe_norm_topk,
        )
        self.groups = dict(
            topk_method=spec.moe_topk_method,
            n_group=spec.moe_n_group,
            topk_group=spec.moe_topk_group,
            scaling=spec.moe_routed_scaling,
        )
        self.dtype = spec.jnp_dtype
        pdt = spec.jnp_param_dtype
        # Routing decisions are made in float32 whatever the compute dtype: near-ties in
        # bfloat16 would flip expert choices.
        self.router = Dense(
            (d,),
            (e,),
            ("embed",),
            ("exp",),
            rngs=rngs,
            std=spec.init_std,
            use_bias=spec.moe_router_bias,
            dtype=jnp.float32,
            param_dtype=pdt,
        )
        gated = spec.moe_activation != "relu2"  # relu2 experts have no gate projection
        if gated:
            self.gate_proj = make_param(
                rngs, (e, d, f), ("exp", "embed", "mlp"), spec.init_std, pdt
            )
        self.up_proj = make_param(rngs, (e, d, f), ("exp", "embed", "mlp"), spec.init_std, pdt)
        self.down_proj = make_param(rngs, (e, f, d), ("exp", "mlp", "embed"), spec.init_std, pdt)
        # fp8 experts: one per-tensor scale over all experts of each weight, one amax history.
        self.fp8 = fp8_lib.recipe(spec) if spec.fp8_experts else None
        if self.fp8 is not None and self.fp8.keeps_history:
            for name in ("gate_proj", "up_proj", "down_proj")[0 if gated else 1 :]:
                setattr(self, f"{name}_fp8_amax", fp8_lib.empty_history(self.fp8))
        self.activation = (spec.moe_activation, spec.moe_swiglu_alpha, spec.moe_swiglu_limit)
        self.weight_inputs = spec.moe_weight_inputs
        self.capacity_factor = spec.moe_capacity_factor
        if spec.moe_expert_bias:
            self.gate_bias = make_param(rngs, (e, f), ("exp", "mlp"), 0.0, pdt)
            self.up_bias = make_param(rngs, (e, f), ("exp", "mlp"), 0.0, pdt)
            self.down_bias = make_param(rngs, (e, d), ("exp", "embed"), 0.0, pdt)
        # Attributes only when used, so Mixtral / Qwen3-MoE keep their parameter tree.
        if spec.moe_shared_experts:
            shared = SwiGLU if gated else ReluSquaredMLP
            self.shared = shared(spec, rngs=rngs, intermediate_size=spec.shared_expert_size())
        if spec.moe_shared_gate:  # Qwen3-Next: a token may turn the shared experts down
            self.shared_gate = Dense(
                (d,), (1,), ("embed",), (None,), rngs=rngs, std=spec.init_std, param_dtype=pdt
            )
        if spec.moe_residual_mlp:  # Grok-2: a dense MLP of intermediate_size beside the experts
            self.residual = SwiGLU(spec, rngs=rngs)
        self.router_softcap = spec.router_logit_softcap
        if spec.moe_score_bias:
            # float32 whatever param_dtype: bias steps of ~1e-3 vanish in bfloat16 near 1.
            self.score_bias = RouterBias(jnp.zeros((e,), jnp.float32), logical_axes=("exp",))

    def __call__(self, x_BLD: jax.Array) -> tuple[jax.Array, MoeStats]:
        b, l, d = x_BLD.shape
        x_TD = x_BLD.reshape(b * l, d)
        logits_TE = self.router(x_TD)
        if self.router_softcap:
            logits_TE = softcap(logits_TE, self.router_softcap)
        bias = (self.score_bias[...],) if hasattr(self, "score_bias") else ()
        weights_TK, experts_TK, probs_TE = (
            a.reshape(b * l, -1)
            for a in expert_dispatch.per_device_tokens(
                self._route, (logits_TE.reshape(b, l, -1),), bias
            )
        )
        aux_loss, load_E = load_balancing_loss(probs_TE, experts_TK)
        # The mean probabilities too: a pipeline, which runs the batch in parts, forms the
        # balance loss of the whole batch from the parts' means (`balance_loss_of_means`).
        stats = {
            "aux_loss": aux_loss,
            "z_loss": router_z_loss(logits_TE),
            "load": load_E,
            "prob": jnp.mean(probs_TE, axis=0),
        }

        params, param_axes = self._expert_weights()
        experts_BLK, weights_BLK = experts_TK.reshape(b, l, -1), weights_TK.reshape(b, l, -1)
        routed = self._routed_with_capacity if self.capacity_factor else self._routed_dropless
        if self.fp8 is None:
            y_BLD, dropped = expert_dispatch.on_own_tokens(
                routed,
                x_BLD,
                experts_BLK,
                weights_BLK,
                params,
                param_axes,
                counted=bool(self.capacity_factor),
            )
        else:  # the float8 amax histories are state, updated from the whole batch at once
            y_BLD, dropped = routed(x_BLD, experts_BLK, weights_BLK, params, 0)
        stats["dropped"] = dropped / (b * l * self.k)
        y_TD = y_BLD.reshape(b * l, d)
        if hasattr(self, "shared"):
            shared_TD = self.shared(x_BLD).reshape(b * l, d)
            if hasattr(self, "shared_gate"):
                gate_T1 = jax.nn.sigmoid(self.shared_gate(x_TD).astype(jnp.float32))
                shared_TD = (shared_TD.astype(jnp.float32) * gate_T1).astype(shared_TD.dtype)
            y_TD = y_TD + shared_TD
        if hasattr(self, "residual"):
            y_TD = (y_TD + self.residual(x_BLD).reshape(b * l, d)) * (0.5**0.5)
        y_BLD = sharding.constrain(
            y_TD.reshape(b, l, d), ("activation_batch", "activation_length", "activation_embed")
        )
        return y_BLD, stats

    def _ffn(self, x_RD: jax.Array, matmul) -> jax.Array:
        """The experts' (clamped) SwiGLU, GeGLU or relu2 MLP over rows x_RD, with
        `matmul(rows, weight name, bias name)` applying each row's own expert."""
        up_RF = matmul(x_RD, "up_proj", "up_bias")
        kind, alpha, limit = self.activation
        if kind == "relu2":
            return matmul(jnp.square(jax.nn.relu(up_RF)), "down_proj", "down_bias")
        gate_RF = matmul(x_RD, "gate_proj", "gate_bias")
        if kind == "clamped_swiglu":
            h_RF = clamped_swiglu(gate_RF, up_RF, alpha, limit)
        elif kind == "geglu":
            h_RF = geglu(gate_RF, up_RF)
        else:
            h_RF = swiglu(gate_RF, up_RF)
        return matmul(h_RF, "down_proj", "down_bias")

    def _route(self, logits_BLE: jax.Array, *bias_E: jax.Array) -> tuple[jax.Array, ...]:
        """`route` of these tokens: (weights [B, L, K], experts [B, L, K], probs [B, L, E])."""
        b, l, e = logits_BLE.shape
        routed = route(
            logits_BLE.reshape(b * l, e),
            self.k,
            self.score,
            self.norm_topk,
            bias_E=bias_E[0] if bias_E else None,
            **self.groups,
        )
        return tuple(a.reshape(b, l, -1) for a in routed)

    def _expert_weights(self) -> tuple[dict[str, jax.Array], dict[str, tuple[str, ...]]]:
        """The experts' weights and biases in the compute dtype, and their logical axes."""
        names = ("gate_proj", "up_proj", "down_proj", "gate_bias", "up_bias", "down_bias")
        held = {n: getattr(self, n) for n in names if hasattr(self, n)}  # relu2 has no gate
        return (
            {n: v[...].astype(self.dtype) for n, v in held.items()},
            {n: tuple(v.logical_axes) for n, v in held.items()},
        )

    def _product(
        self, kind: str, lhs: jax.Array, name: str, w: jax.Array, sizes: jax.Array | None = None
    ) -> jax.Array:
        """lhs times expert weight `name` (value w), in float8 when the spec asks (`models.fp8`)."""
        if self.fp8 is not None:
            return fp8_lib.scaled_product(
                fp8_lib.Product(kind),
                lhs,
                w,
                self.fp8,
                fp8_lib.history_of(self, f"{name}_fp8_amax"),
                sizes,
            )
        if kind == "ragged":
            return grouped_matmul(lhs, w, sizes)
        return products.batched_product(lhs, w)

    def _sorted(
        self,
        x_BLD: jax.Array,
        experts_BLK: jax.Array,
        weights_BLK: jax.Array,
        first: Any,
        held: int,
    ) -> tuple[jax.Array, ...]:
        """The B x L x K assignments sorted by expert, for the `held` experts first, first+1,
        ...: (rows x_AD in that order, order_A, each sorted row's expert among those held
        (`held` for an expert held elsewhere, sorted last), sizes_E of the held ones, the
        weights as weights_TK over the T = B x L tokens).

        A stable sort keeps token order inside an expert's group."""
        x_TD = x_BLD.reshape(-1, x_BLD.shape[-1])
        experts_TK = experts_BLK.reshape(x_TD.shape[0], -1)
        weights_TK = weights_BLK.reshape(x_TD.shape[0], -1)
        local_A = experts_TK.reshape(-1) - first
        local_A = jnp.where((local_A >= 0) & (local_A < held), local_A, held)
        order_A = jnp.argsort(local_A, stable=True)
        x_AD = jnp.take(x_TD, order_A // self.k, axis=0).astype(self.dtype)
        if self.weight_inputs:
            # Llama 4 weights what enters the expert; the outputs are then summed as they are.
            weight_A = jnp.take(weights_TK.reshape(-1), order_A)
            x_AD = x_AD * weight_A[:, None].astype(self.dtype)
            weights_TK = jnp.ones_like(weights_TK)
        sizes_E = jnp.bincount(local_A, length=held).astype(jnp.int32)
        return x_AD, order_A, jnp.take(local_A, order_A), sizes_E, weights_TK

    def _combined(self, y_AD: jax.Array, order_A: jax.Array, weights_TK: jax.Array) -> jax.Array:
        """Rows back in (token, slot) order, then the router-weighted sum over each token's k
        experts: y_TD."""
        t, d = weights_TK.shape[0], y_AD.shape[-1]
        y_TKD = jnp.zeros_like(y_AD).at[order_A].set(y_AD).reshape(t, self.k, d)
        return jnp.einsum("tkd,tk->td", y_TKD, weights_TK.astype(self.dtype))

    def _routed_dropless(
        self,
        x_BLD: jax.Array,
        experts_BLK: jax.Array,
        weights_BLK: jax.Array,
        params: dict[str, jax.Array],
        first: Any,
    ) -> tuple[jax.Array, jax.Array]:
        """Every assignment to the experts in `params` (first, first+1, ...) through its expert,
        one grouped matmul per weight; assignments to experts held elsewhere give zeros.
        Returns (y_BLD, 0 assignments dropped)."""
        b, l, d = x_BLD.shape
        held = params["up_proj"].shape[0]
        x_AD, order_A, expert_A, sizes_E, weights_TK = self._sorted(
            x_BLD, experts_BLK, weights_BLK, first, held
        )
        biased = any(n.endswith("_bias") for n in params)

        def grouped(lhs, name, bias):
            out = self._product("ragged", lhs, name, params[name], sizes_E)
            if bias in params:
                out = out + jnp.take(params[bias], expert_A, axis=0, mode="clip")
            return out

        y_AD = self._ffn(x_AD, grouped)
        if biased:  # experts held elsewhere: the grouped matmul leaves their rows zero, biases not
            y_AD = jnp.where((expert_A < held)[:, None], y_AD, 0)
        y_BLD = self._combined(y_AD, order_A, weights_TK).reshape(b, l, d)
        return y_BLD, jnp.float32(0.0)

    def _routed_with_capacity(
        self,
        x_BLD: jax.Array,
        experts_BLK: jax.Array,
        weights_BLK: jax.Array,
        params: dict[str, jax.Array],
        first: Any,
    ) -> tuple[jax.Array, jax.Array]:
        """The assignments to the experts in `params` (first, first+1, ...), sorted by expert,
        packed into a fixed [E, C, D] buffer: C, the capacity, is `capacity_factor` times an
        even share of the assignments given to all experts. An expert's assignments past C are
        dropped and give zeros, as do those to experts held elsewhere. Returns (y_BLD, number
        of assignments dropped). Static shapes let the expert axis shard without ragged sizes;
        on a mesh each device's tokens (gathered along `expert`) have a capacity of their own.
        """
        b, l, d = x_BLD.shape
        held = params["up_proj"].shape[0]
        x_AD, order_A, expert_A, sizes_E, weights_TK = self._sorted(
            x_BLD, experts_BLK, weights_BLK, first, held
        )
        num_assignments = x_AD.shape[0]
        capacity = max(1, math.ceil(self.capacity_factor * num_assignments / self.num_experts))
        first_E = jnp.cumsum(sizes_E) - sizes_E
        rank_A = jnp.arange(num_assignments) - jnp.take(first_E, expert_A, mode="clip")
        mine_A = expert_A < held
        kept_A = mine_A & (rank_A < capacity)
        # Rows of experts held elsewhere index past the buffer and are dropped with the rest.
        x_ECD = jnp.zeros((held, capacity, d), x_AD.dtype)
        x_ECD = x_ECD.at[expert_A, rank_A].set(x_AD, mode="drop")

        def batched(lhs, name, bias):
            out = self._product("batched", lhs, name, params[name])
            if bias in params:
                out = out + params[bias][:, None]
            return out

        y_ECD = self._ffn(x_ECD, batched)
        y_AD = y_ECD[jnp.minimum(expert_A, held - 1), jnp.minimum(rank_A, capacity - 1)]
        y_AD = jnp.where(kept_A[:, None], y_AD, 0)
        dropped = jnp.sum(mine_A & ~kept_A).astype(jnp.float32)
        return self._combined(y_AD, order_A, weights_TK).reshape(b, l, d), dropped


# Train-step metrics of a mixture of experts: token-weighted means over the step.
MOE_METRICS = ("moe_aux_loss", "moe_z_loss", "moe_load_max", "moe_load_min", "moe_dropped")


def moe_losses(
    stats: MoeStats, aux_coef: float, z_coef: float
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """(per-token penalty to add to the loss, metrics) from the per-layer stacked statistics.

    Both losses are averaged over layers, so a coefficient keeps its meaning at any depth.
    Load is the fraction of assignments per expert (1 / E when balanced), over all layers.
    """
    aux_loss = jnp.mean(stats["aux_loss"])
    z_loss = jnp.mean(stats["z_loss"])
    metrics = {
        "moe_aux_loss": aux_loss,
        "moe_z_loss": z_loss,
        "moe_load_max": jnp.max(stats["load"]),
        "moe_load_min": jnp.min(stats["load"]),
        "moe_dropped": jnp.mean(stats["dropped"]),
    }
    return aux_coef * aux_loss + z_coef * z_loss, metrics


def updated_router_bias(bias_LE: jax.Array, load_LE: jax.Array, rate: float) -> jax.Array:
    """Auxiliary-loss-free balancing (DeepSeek V3): each layer's bias moves by `rate` toward
    even load, up for experts below the mean load and down for those above it.

    `load_LE` is each layer's fraction of assignments per expert over the step.
    """
    mean_L1 = jnp.mean(load_LE, axis=-1, keepdims=True)
    return bias_LE + rate * jnp.sign(mean_L1 - load_LE).astype(bias_LE.dtype)
