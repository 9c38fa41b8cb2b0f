"""Megatron-LM mixture-of-experts arguments -> jaxtrain's `model.num_experts` / `model.moe_*`.

Semantics the mapping relies on (Megatron's TopKRouter and its load-balancing losses):

- softmax scores without `moe_router_pre_softmax` keep the top-k logits and softmax over them
  (jaxtrain's "topk_softmax"); with it they softmax over every expert and keep the top-k
  probabilities without renormalising ("softmax_topk", moe_norm_topk=False). Sigmoid scores are
  renormalised over the kept experts only when top-k > 1. Every weight is then multiplied by
  `moe_router_topk_scaling_factor`.
- Group-limited routing scores a group by the sum of its best top-k / group_topk experts: one
  (jaxtrain's "group_limited_greedy") or two ("noaux_tc") are expressible.
- Megatron's balancing loss already counts assignments (its expert fraction divides by T x k),
  as jaxtrain's does, so no top-k factor applies; but each expert layer adds its own
  coefficient x loss, whereas jaxtrain averages the layers, so both loss coefficients are
  multiplied by the number of expert layers.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport, is_off
from jaxtrain.compat.megatron.expert_layers import expert_layout
from jaxtrain.errors import ConfigError

# Keys this module accounts for; those left without an entry are reported off by the caller.
MOE_KEYS = (
    "num_experts",
    "moe_ffn_hidden_size",
    "moe_router_topk",
    "moe_layer_freq",
    "moe_shared_expert_intermediate_size",
    "moe_shared_expert_gate",
    "moe_router_score_function",
    "moe_router_pre_softmax",
    "moe_router_num_groups",
    "moe_router_group_topk",
    "moe_router_topk_scaling_factor",
    "moe_router_enable_expert_bias",
    "moe_router_bias_update_rate",
    "moe_router_load_balancing_type",
    "moe_aux_loss_coeff",
    "moe_z_loss_coeff",
    "moe_expert_capacity_factor",
    "moe_token_drop_policy",
    "moe_pad_expert_input_to_capacity",
    "moe_input_jitter_eps",
    "expert_tensor_parallel_size",
)


def _positive_int(r: KeyReport, key: str, default: Any) -> int:
    value = r.get(key, default)
    if value is None or isinstance(value, bool) or int(value) != value or int(value) <= 0:
        raise ConfigError(f"{r.source}: {key}={value!r} must be a positive integer.")
    return int(value)


def _float(r: KeyReport, key: str, default: float) -> float:
    value = r.get(key)
    return default if is_off(value) else float(value)


def map_moe(r: KeyReport, model: dict[str, Any]) -> None:
    """Sets the expert keys of `model` from a Megatron module with num_experts > 0."""
    layers = model["num_layers"]
    experts = _positive_int(r, "num_experts", None)
    topk = _positive_int(r, "moe_router_topk", 2)
    if is_off(r.get("moe_ffn_hidden_size")):  # Megatron's default: ffn_hidden_size
        ffn = model["intermediate_size"]
    else:
        ffn = _positive_int(r, "moe_ffn_hidden_size", None)
    model.update(num_experts=experts, num_experts_per_tok=topk, moe_intermediate_size=ffn)
    r.mapped("num_experts", "model.num_experts")
    r.mapped("moe_router_topk", "model.num_experts_per_tok")
    if r.has("moe_ffn_hidden_size") and r.get("moe_ffn_hidden_size") is not None:
        r.mapped("moe_ffn_hidden_size", "model.moe_intermediate_size")
    else:
        r.note(f"moe_ffn_hidden_size unset: Megatron uses ffn_hidden_size ({ffn}) per expert")
        if r.has("moe_ffn_hidden_size"):
            r.mapped(
                "moe_ffn_hidden_size",
                "model.moe_intermediate_size",
                "unset: ffn_hidden_size per expert",
            )
    _layout(r, model, layers)
    _shared(r, model, ffn)
    _router(r, model, experts, topk)
    _losses(r, model)
    _capacity(r, model)
    if r.has("expert_tensor_parallel_size"):
        r.ignored(
            "expert_tensor_parallel_size",
            "how experts are split across devices; the "
            "mesh (mesh.ici_expert / ici_tensor) decides placement, not the numbers",
        )
    if not is_off(r.get("moe_input_jitter_eps")):
        r.unsupported(
            "moe_input_jitter_eps", "multiplicative jitter on router inputs is not implemented"
        )


def _layout(r: KeyReport, model: dict[str, Any], layers: int) -> None:
    dense, step, why = expert_layout(r.get("moe_layer_freq", 1), layers)
    model.update(num_dense_layers=dense, moe_layer_step=step)
    if why:
        r.unsupported("moe_layer_freq", why, target="model.num_dense_layers")
        return
    if r.has("moe_layer_freq"):
        target = "model.moe_layer_step" if step > 1 else "model.num_dense_layers"
        r.mapped(
            "moe_layer_freq",
            target,
            f"{dense} leading dense block(s)"
            if dense
            else f"experts in every {step}-th block"
            if step > 1
            else "experts in every block",
        )


def _shared(r: KeyReport, model: dict[str, Any], ffn: int) -> None:
    size = r.get("moe_shared_expert_intermediate_size")
    if not is_off(size):
        if int(size) % ffn:  # one shared expert of its own size
            model["moe_shared_experts"] = 1
            model["moe_shared_intermediate_size"] = int(size)
            r.mapped(
                "moe_shared_expert_intermediate_size",
                "model.moe_shared_intermediate_size",
                "one shared expert of that hidden size",
            )
        else:
            model["moe_shared_experts"] = int(size) // ffn
            r.mapped(
                "moe_shared_expert_intermediate_size",
                "model.moe_shared_experts",
                f"{int(size) // ffn} x moe_ffn_hidden_size",
            )
    if r.get("moe_shared_expert_gate") and model.get("moe_shared_experts"):
        model["moe_shared_gate"] = True
        r.mapped(
            "moe_shared_expert_gate",
            "model.moe_shared_gate",
            "the shared expert's output x sigmoid(x w) (Qwen2-MoE, Qwen3-Next)",
        )
    elif r.get("moe_shared_expert_gate"):
        r.ignored("moe_shared_expert_gate", "no shared expert to gate")


def _router(r: KeyReport, model: dict[str, Any], experts: int, topk: int) -> None:
    function = str(r.get("moe_router_score_function") or "softmax")
    pre = bool(r.get("moe_router_pre_softmax"))
    if function == "sigmoid":
        model.update(moe_score="sigmoid", moe_norm_topk=topk > 1)
        how = (
            "sigmoid scores, renormalised over the kept experts"
            if topk > 1
            else "sigmoid score of the one kept expert, not renormalised"
        )
    elif function == "softmax":
        model.update(moe_score="softmax_topk" if pre else "topk_softmax", moe_norm_topk=not pre)
        how = (
            "softmax over all experts, top-k probabilities kept as they are"
            if pre
            else "softmax over the top-k logits"
        )
    else:
        r.unsupported(
            "moe_router_score_function",
            f"{function!r}: only softmax and sigmoid router scores exist",
        )
        how = ""
    if how:
        r.mapped("moe_router_score_function", "model.moe_score, model.moe_norm_topk", how)
    if r.has("moe_router_pre_softmax"):
        if function == "softmax":
            r.mapped("moe_router_pre_softmax", "model.moe_score", how)
        else:
            r.ignored("moe_router_pre_softmax", "applies to softmax scores only")
    scale = _float(r, "moe_router_topk_scaling_factor", 1.0)
    model["moe_routed_scaling"] = scale
    if r.has("moe_router_topk_scaling_factor"):
        r.mapped(
            "moe_router_topk_scaling_factor",
            "model.moe_routed_scaling",
            "" if r.get("moe_router_topk_scaling_factor") else "unset: 1.0",
        )
    _groups(r, model, experts, topk, function == "softmax" and not pre)
    _expert_bias(r, model, function)


def _groups(r: KeyReport, model: dict[str, Any], experts: int, topk: int, on_logits: bool) -> None:
    groups, chosen = r.get("moe_router_num_groups"), r.get("moe_router_group_topk")
    keys = [k for k in ("moe_router_num_groups", "moe_router_group_topk") if r.has(k)]
    if is_off(groups) or is_off(chosen):
        for key in keys:
            r.ignored(key, "group-limited routing off (needs both num_groups and group_topk)")
        return
    groups, chosen = int(groups), int(chosen)
    per_group = topk // chosen
    method = {1: "group_limited_greedy", 2: "noaux_tc"}.get(per_group)
    why = ""
    if method is None:
        why = (
            f"groups are ranked by the sum of their best topk // group_topk = {per_group} "
            "expert scores; jaxtrain ranks by the best one or the best two only"
        )
    elif method == "noaux_tc" and on_logits:
        why = (
            "without moe_router_pre_softmax Megatron ranks groups by summed raw logits; "
            "jaxtrain sums softmax probabilities, which can pick other groups"
        )
    if why:
        for key in keys:
            r.unsupported(key, why)
        return
    model.update(moe_topk_method=method, moe_n_group=groups, moe_topk_group=chosen)
    for key in keys:
        r.mapped(
            key,
            "model.moe_topk_method, model.moe_n_group, model.moe_topk_group",
            f"{chosen} of {groups} groups of {experts // groups} experts, ranked by their "
            f"best {per_group} score(s)",
        )


def _expert_bias(r: KeyReport, model: dict[str, Any], function: str) -> None:
    enabled = bool(r.get("moe_router_enable_expert_bias"))
    if enabled and function != "sigmoid":
        r.unsupported(
            "moe_router_enable_expert_bias",
            "Megatron adds the aux-free expert bias "
            "to sigmoid scores only; with softmax scores it has no defined effect",
        )
    elif enabled:
        rate = _float(r, "moe_router_bias_update_rate", 1e-3)
        model.update(moe_score_bias=True, moe_bias_update_rate=rate)
        r.mapped(
            "moe_router_enable_expert_bias",
            "model.moe_score_bias",
            "bias on the scores for the top-k choice only, as in Megatron",
        )
        if r.has("moe_router_bias_update_rate"):
            r.mapped(
                "moe_router_bias_update_rate",
                "model.moe_bias_update_rate",
                "bias += rate x sign(mean load - load) once per optimizer step",
            )
        return
    elif r.has("moe_router_enable_expert_bias"):
        r.ignored("moe_router_enable_expert_bias", "off: no aux-free expert bias")
    if r.has("moe_router_bias_update_rate"):
        r.ignored("moe_router_bias_update_rate", "used only with the expert bias, off here")


def _losses(r: KeyReport, model: dict[str, Any]) -> None:
    layers = (model["num_layers"] - model.get("num_dense_layers", 0)) // model.get(
        "moe_layer_step", 1
    )
    why = (
        f"x {layers} expert layers: Megatron adds each layer's loss, jaxtrain averages them "
        "(both count the balance over token-expert assignments)"
    )
    kind = r.get("moe_router_load_balancing_type", "aux_loss")
    aux = _float(r, "moe_aux_loss_coeff", 0.0)
    kinds = kind if isinstance(kind, (list, tuple)) else [kind]
    if kinds == ["none"]:  # Megatron then adds no balancing loss, whatever the coefficient
        model["moe_aux_loss_coef"] = 0.0
        r.mapped(
            "moe_router_load_balancing_type", "model.moe_aux_loss_coef", "none: no balancing loss"
        )
        if r.has("moe_aux_loss_coeff"):
            r.ignored("moe_aux_loss_coeff", "not applied: moe_router_load_balancing_type is none")
    elif aux and kinds in (["aux_loss"], ["global_aux_loss"]):
        model["moe_aux_loss_coef"] = aux * layers
        r.mapped("moe_aux_loss_coeff", "model.moe_aux_loss_coef", why)
        r.mapped(
            "moe_router_load_balancing_type",
            "model.moe_aux_loss_coef",
            "jaxtrain measures the balance over the whole global micro batch",
        )
    elif aux and kinds == ["seq_aux_loss"]:
        model["moe_aux_loss_coef"] = aux * layers
        r.mapped("moe_aux_loss_coeff", "model.moe_aux_loss_coef", why)
        r.unsupported(
            "moe_router_load_balancing_type",
            "the per-sequence balancing loss is not "
            "implemented; with --allow-unsupported the micro-batch loss (same "
            "coefficient) is used instead",
        )
    elif aux:
        model["moe_aux_loss_coef"] = 0.0
        r.unsupported(
            "moe_router_load_balancing_type",
            f"{kind!r}: only the aux_loss / "
            "seq_aux_loss balancing losses have a counterpart (no sinkhorn, no "
            "combinations)",
        )
        r.mapped(
            "moe_aux_loss_coeff",
            "model.moe_aux_loss_coef",
            "not applied: see moe_router_load_balancing_type",
        )
    else:
        model["moe_aux_loss_coef"] = 0.0
        for key in ("moe_aux_loss_coeff", "moe_router_load_balancing_type"):
            if r.has(key):
                r.ignored(key, "no balancing loss (coefficient 0 or type none)")
    z = _float(r, "moe_z_loss_coeff", 0.0)
    model["moe_z_loss_coef"] = z * layers
    if r.has("moe_z_loss_coeff"):
        r.mapped("moe_z_loss_coeff", "model.moe_z_loss_coef", why if z else "unset: no z-loss")


def _capacity(r: KeyReport, model: dict[str, Any]) -> None:
    factor = _float(r, "moe_expert_capacity_factor", 0.0)
    policy = r.get("moe_token_drop_policy", "probs")
    if not factor:
        for key in (
            "moe_expert_capacity_factor",
            "moe_token_drop_policy",
            "moe_pad_expert_input_to_capacity",
        ):
            if r.has(key):
                r.ignored(key, "no expert capacity: dropless routing")
        return
    if policy != "position":
        r.unsupported(
            "moe_token_drop_policy",
            f"{policy!r} drops an expert's lowest-probability "
            "tokens; jaxtrain keeps the first ones in token order ('position')",
        )
    else:
        r.mapped("moe_token_drop_policy", "model.moe_capacity_factor", "later tokens dropped first")
    model["moe_capacity_factor"] = factor
    r.mapped(
        "moe_expert_capacity_factor",
        "model.moe_capacity_factor",
        "capacity counted over the global micro batch rather than per rank",
    )
    if r.has("moe_pad_expert_input_to_capacity"):
        r.ignored(
            "moe_pad_expert_input_to_capacity",
            "padding only fixes buffer shapes; jaxtrain's expert buffers are static already",
        )
