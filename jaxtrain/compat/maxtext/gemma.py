"""MaxText's Gemma blocks (`decoder_block` gemma, gemma2, gemma3) -> jaxtrain's Gemma families,
as MaxText builds them (models/gemma*.py at the commit in tests/fixtures/compat/SOURCES.md):

- every block: GeGLU MLPs (`mlp_activations: [gelu, linear]`), tied embeddings. MaxText stores
  the embedding times sqrt(emb_dim) and divides the tied logits by sqrt(emb_dim)
  (`normalize_embedding_logits`); jaxtrain's Gemma, like Hugging Face's, scales the stored
  embedding by sqrt(emb_dim) on the way in. The same model, the embedding stored smaller.
  MaxText's RMSNorm scales by its weight (its checkpoint converter adds the 1); jaxtrain's by
  1 + weight: the same norm, the weight shifted.
- gemma2: one MaxText layer is a sliding-window block then a global one, so
  `base_num_decoder_layers` counts pairs; norms after attention and MLP
  (`use_post_attn_norm`, `use_post_ffw_norm`); soft-capped scores and logits; queries scaled
  by head_dim^-0.5 (MaxText passes no query_pre_attn_scalar, so for 27B it differs from
  Google's 144^-0.5).
- gemma3: five sliding blocks per global one, qk-norm, `local_rope_max_timescale` for the
  sliding blocks (their RoPE unscaled) and `rope_max_timescale` with
  `rope_linear_scaling_factor` for the global ones; queries scaled by head_dim^-0.5, or by
  (emb_dim / heads)^-0.5 for gemma3-27b, as MaxText's get_query_pre_attn_scalar chooses.
"""

from __future__ import annotations

import math
from typing import Any

from jaxtrain.compat.common.report import KeyReport

GEMMA_BLOCKS = ("gemma", "gemma2", "gemma3")
# Blocks per global one: Gemma 2 alternates, Gemma 3 has five sliding blocks per global one.
_GLOBAL_STEP = {"gemma2": 2, "gemma3": 6}


def map_gemma(r: KeyReport, fields: dict[str, Any], block: str) -> None:
    """The Gemma fields of a resolved MaxText config (after the shared dense keys)."""
    hidden = int(fields["hidden_size"])
    fields.update(
        mlp_activation="geglu",
        norm_zero_centered=True,
        embed_multiplier=math.sqrt(hidden),
    )
    if r.get("logits_via_embedding") and r.get("normalize_embedding_logits"):
        r.mapped(
            "normalize_embedding_logits",
            "model.embed_multiplier",
            "MaxText's Gemma stores the embedding x sqrt(emb_dim) and divides tied logits "
            "by it; jaxtrain scales the embedding by sqrt(emb_dim) on input instead",
        )
    elif r.has("normalize_embedding_logits"):
        r.ignored("normalize_embedding_logits", "applies only with logits_via_embedding")
    if block == "gemma":
        _unused(r, "Gemma 1 has neither", "use_post_attn_norm", "use_post_ffw_norm")
        return
    post = (bool(r.get("use_post_attn_norm")), bool(r.get("use_post_ffw_norm")))
    if post == (True, True):
        fields["post_norms"] = True
        for key in ("use_post_attn_norm", "use_post_ffw_norm"):
            r.mapped(key, "model.post_norms")
    else:
        r.unsupported(
            "use_post_attn_norm",
            f"use_post_attn_norm={post[0]}, use_post_ffw_norm={post[1]}: jaxtrain's "
            f"{block} has both norms",
        )
    step = _GLOBAL_STEP[block]
    fields.update(
        sliding_window=int(r.get("sliding_window_size")),
        global_layer_step=step,
        attn_logit_softcap=float(r.get("attn_logits_soft_cap") or 0.0),
        final_logit_softcap=float(r.get("final_logits_soft_cap") or 0.0),
        query_pre_attn_scalar=float(_query_scalar(r, fields, block)),
    )
    r.mapped(
        "sliding_window_size",
        "model.sliding_window, model.global_layer_step",
        f"{step - 1} sliding block(s) per global one, the sliding ones first",
    )
    for key, target in (
        ("attn_logits_soft_cap", "attn_logit_softcap"),
        ("final_logits_soft_cap", "final_logit_softcap"),
    ):
        if r.has(key):
            r.mapped(key, f"model.{target}")
    if r.has("attention_type"):
        r.ignored("attention_type", f"{block} blocks choose sliding or global by position")
    if block == "gemma2":
        pairs = int(r.get("base_num_decoder_layers"))
        fields["num_layers"] = 2 * pairs
        r.mapped(
            "base_num_decoder_layers",
            "model.num_layers",
            f"{pairs} MaxText layers of a sliding and a global block each = {2 * pairs} blocks",
        )
        _unused(r, "Gemma 2 has one rotary base", "local_rope_max_timescale")
        return
    fields["qk_norm"] = True
    local = float(r.get("local_rope_max_timescale", -1) or -1)
    fields["rope_local_theta"] = local if local > 0 else float(fields["rope_theta"])
    r.mapped(
        "local_rope_max_timescale",
        "model.rope_local_theta",
        "the sliding blocks' base, unscaled" if local > 0 else "unset: rope_max_timescale",
    )


def _query_scalar(r: KeyReport, fields: dict[str, Any], block: str) -> float:
    if block == "gemma3" and str(r.get("model_name", "")) == "gemma3-27b":
        return fields["hidden_size"] / fields["num_heads"]
    return fields["head_dim"]


def _unused(r: KeyReport, why: str, *keys: str) -> None:
    for key in keys:
        if r.has(key) and not r.handled(key):
            if r.get(key) in (None, False, -1, 0):
                r.ignored(key, f"off: {why}")
            else:
                r.unsupported(key, f"{r.get(key)!r}: {why}")
