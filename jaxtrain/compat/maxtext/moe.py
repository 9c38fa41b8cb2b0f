"""MaxText's expert keys -> jaxtrain's `model.num_experts` / `model.moe_*`, for the blocks that
have experts (`model.MOE_BLOCKS`).

Routing as MaxText's router computes it: mixtral and gpt_oss softmax their top-k logits (as
does qwen3_moe, written as softmax then renormalised top-k); llama4 weights each expert's input
by its own sigmoid score; deepseek scores by `routed_score_func` (sigmoid renormalised over the
kept experts, or softmax over all without renormalising) times `routed_scaling_factor`, and
limits routing to groups and keeps the aux-free bias only for model names starting with
deepseek3. MaxText balances the load and counts capacity per sequence, jaxtrain over the micro
batch.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport, is_off


def map_experts(r: KeyReport, fields: dict[str, Any], block: str) -> None:
    """The expert count, top-k, sizes, routing and balancing of a `block` with experts."""
    experts, topk = int(r.get("num_experts")), int(r.get("num_experts_per_tok"))
    size_key = "base_mlp_dim" if block == "mixtral" else "base_moe_mlp_dim"
    fields.update(
        num_experts=experts, num_experts_per_tok=topk, moe_intermediate_size=int(r.get(size_key))
    )
    r.mapped("num_experts", "model.num_experts")
    r.mapped("num_experts_per_tok", "model.num_experts_per_tok")
    r.mapped(
        size_key,
        "model.moe_intermediate_size, model.intermediate_size"
        if block == "mixtral"
        else "model.moe_intermediate_size",
    )
    if block == "mixtral" and r.has("base_moe_mlp_dim"):
        r.ignored("base_moe_mlp_dim", "MaxText's Mixtral experts use base_mlp_dim")
    if block in ("mixtral", "gpt_oss"):
        fields["moe_score"] = "topk_softmax"
    elif block in ("qwen3_moe", "qwen3_next", "qwen3_5"):  # top-k logits softmaxed
        fields.update(moe_score="softmax_topk", moe_norm_topk=True)
    elif block == "llama4":
        fields.update(
            moe_score="topk_sigmoid",
            moe_weight_inputs=True,
            moe_layer_step=int(r.get("interleave_moe_layer_step", 1)),
        )
        r.mapped("interleave_moe_layer_step", "model.moe_layer_step")
    else:
        _deepseek_routing(r, fields)
    if block != "deepseek" and r.has("norm_topk_prob"):
        r.ignored(
            "norm_topk_prob",
            "the kept weights already sum to one"
            if block != "llama4"
            else "Llama 4 weights each expert by its own sigmoid",
        )
    shared = int(r.get("shared_experts", 0) or 0)
    if shared and block in ("deepseek", "llama4"):
        fields["moe_shared_experts"] = shared
        r.mapped("shared_experts", "model.moe_shared_experts", "x base_moe_mlp_dim wide")
    elif shared and block in ("qwen3_next", "qwen3_5"):  # one, gated by sigmoid(x w)
        fields.update(moe_shared_experts=shared, moe_shared_gate=True)
        r.mapped(
            "shared_experts",
            "model.moe_shared_experts, model.moe_shared_gate",
            "x base_moe_mlp_dim wide, scaled by a sigmoid gate",
        )
    elif shared:
        r.unsupported("shared_experts", f"the {block} block has no shared experts in jaxtrain")
    if block == "gpt_oss":
        fields.update(
            moe_router_bias=bool(r.get("routed_bias")), moe_expert_bias=bool(r.get("mlp_bias"))
        )
        r.mapped("routed_bias", "model.moe_router_bias")
        r.mapped("mlp_bias", "model.moe_expert_bias")
    _balance(r, fields, block)


def _deepseek_routing(r: KeyReport, fields: dict[str, Any]) -> None:
    func = str(r.get("routed_score_func") or "softmax")
    name = str(r.get("model_name", ""))
    v3 = name.startswith("deepseek3")  # MaxText's router keys group routing on the name
    dense = int(r.get("first_num_dense_layers", 0))
    if func not in ("softmax", "sigmoid"):
        r.unsupported("routed_score_func", f"{func!r} scores are not implemented")
    sigmoid = func == "sigmoid"
    fields.update(
        num_dense_layers=dense,
        moe_score="sigmoid" if sigmoid else "softmax_topk",
        moe_norm_topk=sigmoid,
        family="deepseek_v3" if sigmoid else "deepseek_v2",
        moe_routed_scaling=float(r.get("routed_scaling_factor", 1.0)),
    )
    r.mapped("first_num_dense_layers", "model.num_dense_layers")
    r.mapped(
        "routed_score_func",
        "model.moe_score",
        "sigmoid scores renormalised over the kept experts"
        if sigmoid
        else "softmax over all experts, kept weights not renormalised",
    )
    r.mapped("routed_scaling_factor", "model.moe_routed_scaling")
    if r.has("norm_topk_prob"):
        r.ignored("norm_topk_prob", "MaxText's DeepSeek router renormalises sigmoid scores only")
    groups, chosen = int(r.get("n_routing_groups", -1)), int(r.get("topk_routing_group", -1))
    if groups > 0 and v3:
        fields.update(moe_topk_method="noaux_tc", moe_n_group=groups, moe_topk_group=chosen)
        for key in ("n_routing_groups", "topk_routing_group"):
            r.mapped(
                key,
                "model.moe_topk_method, model.moe_n_group, model.moe_topk_group",
                "groups ranked by their best two scores",
            )
    else:
        for key in ("n_routing_groups", "topk_routing_group"):
            if r.has(key):
                r.ignored(
                    key,
                    "-1: no group-limited routing"
                    if groups <= 0
                    else "MaxText "
                    "limits routing to groups only for model names starting with "
                    "deepseek3",
                )
    bias = bool(r.get("routed_bias"))
    if bias and v3:
        fields.update(
            moe_score_bias=True, moe_bias_update_rate=float(r.get("routed_bias_update_rate", 0.0))
        )
        r.mapped("routed_bias", "model.moe_score_bias", "bias for the top-k choice only")
        r.mapped("routed_bias_update_rate", "model.moe_bias_update_rate")
    elif bias:
        r.unsupported(
            "routed_bias",
            f"for model_name {name!r} (not deepseek3*) MaxText weights "
            "the experts by their biased scores; jaxtrain's bias only chooses them",
        )
    else:
        for key in ("routed_bias", "routed_bias_update_rate"):
            if r.has(key):
                r.ignored(key, "no expert bias")


def _balance(r: KeyReport, fields: dict[str, Any], block: str) -> None:
    weight = float(r.get("load_balance_loss_weight", 0.0) or 0.0)
    topk = fields["num_experts_per_tok"]
    fields["moe_aux_loss_coef"] = weight * topk
    if weight:
        # MaxText: w x E x sum_e (k f_e) p_e per sequence, averaged over the expert layers;
        # jaxtrain counts f over assignments (no k) over the micro batch.
        r.unsupported(
            "load_balance_loss_weight",
            "MaxText balances each sequence; jaxtrain "
            "the micro batch. With --allow-unsupported the micro-batch loss is used, "
            f"weighted {weight} x top-k {topk}",
        )
    elif r.has("load_balance_loss_weight"):
        r.ignored("load_balance_loss_weight", "0: no balancing loss")
    factor = float(r.get("capacity_factor", -1.0))
    sparse = bool(r.get("sparse_matmul", True))
    if factor > 0 and not sparse:
        fields["moe_capacity_factor"] = factor
        r.mapped(
            "capacity_factor",
            "model.moe_capacity_factor",
            "MaxText counts capacity per "
            "sequence, jaxtrain over the micro batch; later tokens dropped first in both",
        )
    elif r.has("capacity_factor"):
        r.ignored(
            "capacity_factor",
            "sparse_matmul: dropless experts" if factor > 0 else "-1: dropless experts",
        )
    if r.has("sparse_matmul"):
        r.ignored("sparse_matmul", "expert kernel choice (dropless unless capacity_factor)")
    if block not in ("gpt_oss",):
        for key in ("routed_bias", "routed_bias_update_rate", "mlp_bias"):
            if r.has(key) and not r.handled(key):
                if is_off(r.get(key)):
                    r.ignored(key, "off")
                else:
                    r.unsupported(key, f"not part of jaxtrain's {block} experts")
