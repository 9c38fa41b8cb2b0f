"""Every family of the vendored Primus (Megatron, TorchTitan, MaxText backends), MaxText and
TorchTitan pretraining configs resolves to its own architecture, with total and active
parameter counts within 1% of the published model's, or of what the file itself defines where
it differs; architectures the zoo cannot build are refused by name.

Expected figures: `published(preset)` is the published model's count, which the zoo's preset
reproduces from the model's Hugging Face config.json (tests/test_hf_interop.py checks the
preset counts against transformers' models; PUBLISHED_PARAMS lists the totals). Where a file
defines something else, the expected spec is the published one with the file's differences
spelled out, or the file's own values, each commented. Config resolution only: no compiling.
"""

import json

import pytest

from jaxtrain import compat
from jaxtrain.cli import main
from jaxtrain.compat.common.report import DevicesNotDivisible
from jaxtrain.data import pipeline
from jaxtrain.errors import ConfigError
from jaxtrain.models.presets.registry import PUBLISHED_PARAMS, model_spec
from jaxtrain.models.spec.hyperparameters import ModelSpec

MEGATRON = "Primus/examples/megatron/configs/{}.yaml"
MAXTEXT_PRIMUS = "Primus/examples/maxtext/configs/{}.yaml"
TITAN_PRIMUS = "Primus/examples/torchtitan/configs/{}.yaml"
TITAN = "torchtitan/torchtitan/models/{}.toml"
BASE_YML = "maxtext/src/maxtext/configs/base.yml"
# The DeepSeek-V3 architecture with Kimi K2's config.json values (moonshotai/Kimi-K2-Instruct:
# 64 heads, 384 routed experts, one leading dense block, vocab 163840).
KIMI_K2 = dict(
    num_heads=64, num_kv_heads=64, num_experts=384, num_dense_layers=1, vocab_size=163840
)


def published(preset, **differences):
    """The preset's spec (the published model), with the file's differences."""
    return model_spec(preset, **differences)


def without_mla(preset, head_dim, kv_heads, **differences):
    """A DeepSeek preset with multi-latent attention switched off, as Primus' Megatron examples
    do (multi_latent_attention: false): grouped-query attention of kv_channels-wide heads."""
    return model_spec(
        preset,
        kv_lora_rank=0,
        q_lora_rank=0,
        qk_nope_head_dim=0,
        qk_rope_head_dim=0,
        v_head_dim=0,
        head_dim=head_dim,
        num_kv_heads=kv_heads,
        rope_interleave=False,
        **differences,
    )


# (file, native overrides, family, expected spec); the comment says what the figure is.
RESOLVES = [
    # --- Megatron (Primus): the vocabulary is the tokenizer's, padded to 128 x TP.
    (MEGATRON.format("MI300X/llama2_7B-BF16-pretrain"), [], "llama", published("llama2-7b")),
    # add_bias_linear: biases on q/k/v, the output projection and the MLP (Llama's
    # attention_bias + mlp_bias).
    (
        MEGATRON.format("MI300X/llama2_7B-BF16-pretrain"),
        ["add_bias_linear=true"],
        "llama",
        published("llama2-7b", qkv_bias=True, o_bias=True, mlp_bias=True),
    ),
    (
        MEGATRON.format("MI300X/llama3.1_8B-BF16-pretrain"),
        [],
        "llama",
        published("llama3.1-8b", rope_scaling="none"),
    ),  # the preset leaves use_rope_scaling off
    # Untied output (untie_embeddings_and_output_weights): 1.50e9, not the tied 1.24e9.
    (
        MEGATRON.format("MI300X/llama3.2_1B-BF16-pretrain"),
        [],
        "llama",
        published("llama3.2-1b", tie_embeddings=False),
    ),
    # Primus' Qwen presets set neither add_qkv_bias nor qk_layernorm: Llama blocks with Qwen's
    # dims and the tokenizer's 151665 / 151669 entries padded to 151680.
    (
        MEGATRON.format("MI300X/qwen2.5_7B-BF16-pretrain"),
        [],
        "llama",
        published("qwen2.5-7b", family="llama", qkv_bias=False, vocab_size=151680),
    ),
    (
        MEGATRON.format("MI300X/qwen3_8B-BF16-pretrain"),
        [],
        "llama",
        published("qwen3-8b", family="llama", qk_norm=False, vocab_size=151680),
    ),
    (
        MEGATRON.format("MI300X/mixtral_8x7B_v0.1-BF16-pretrain"),
        [],
        "mixtral",
        published("mixtral-8x7b"),
    ),
    (
        MEGATRON.format("MI300X/qwen3_30B_A3B-BF16-pretrain"),
        [],
        "qwen3_moe",
        published("qwen3-30b-a3b", vocab_size=151680),
    ),
    # DeepSeek examples switch MLA off: 16 / 128 full-width heads of kv_channels 128.
    (
        MEGATRON.format("MI300X/deepseek_v2_lite-BF16-pretrain"),
        [],
        "deepseek_v2",
        without_mla("deepseek-v2-lite", 128, 16, vocab_size=100096),
    ),
    (
        MEGATRON.format("MI300X/deepseek_v3-BF16-pretrain"),
        [],
        "deepseek_v3",
        without_mla("deepseek-v3", 128, 128, vocab_size=128896),
    ),
    # Kimi K2 keeps MLA: the published model (its tokenizer is 163840 entries, a multiple).
    (
        MEGATRON.format("MI355X/kimi_k2-BF16-pretrain"),
        [],
        "deepseek_v3",
        published("deepseek-v3", **KIMI_K2),
    ),
    # Primus' gpt_oss_20B preset is DeepSeek-V2-Lite's MoE (softmax top-4 of 32 experts plus a
    # shared one, DeepSeek-V2-Lite's tokenizer) with gpt-oss dims: no sinks, biases or windows.
    (
        MEGATRON.format("MI300X/gpt_oss_20B-BF16-pretrain"),
        [],
        "deepseek_v2",
        ModelSpec(
            family="deepseek_v2",
            vocab_size=100096,
            hidden_size=2880,
            num_layers=24,
            num_heads=64,
            num_kv_heads=8,
            head_dim=64,
            intermediate_size=10944,
            num_experts=32,
            num_experts_per_tok=4,
            moe_intermediate_size=2880,
            moe_shared_experts=1,
            moe_score="softmax_topk",
            moe_norm_topk=False,
        ),
    ),
    # Primus' Llama 4 presets: Scout / Maverick dims, softmax top-1 routing with a shared
    # expert (no chunked attention, NoPE or sigmoid routing), Llama 4's 202048 tokens padded
    # to 202112; the 16E preset adds weighted per-head q/k norms (qk_layernorm).
    (
        MEGATRON.format("MI300X/llama4_17B16E-BF16-pretrain"),
        [],
        "deepseek_v2",
        published("llama4-scout-17b-16e", vocab_size=202112, qk_norm=True),
    ),
    (
        MEGATRON.format("MI300X/llama4_17B128E-BF16-pretrain"),
        [],
        "deepseek_v2",
        published("llama4-maverick-17b-128e", vocab_size=202112),
    ),
    # Primus' grok presets (llama_base.yaml underneath): what Megatron builds from them, GPT
    # layers with SwiGLU experts (softmax over the top-2 logits), untied output, the Mixtral
    # 8x22B tokenizer's 32768 entries; grok2.yaml adds Primus' router and output soft-caps and
    # no dense MLP beside the experts: 216.4e9 total, 61.7e9 active (the file's comment says
    # 270B / 62B: the total is xAI's Grok-2 with its residual MLP, the active count this build).
    (
        MEGATRON.format("MI300X/grok1-FP8-pretrain"),
        [],
        "grok",
        ModelSpec(
            family="grok",
            vocab_size=32768,
            hidden_size=6144,
            num_layers=64,
            num_heads=48,
            num_kv_heads=8,
            head_dim=128,
            intermediate_size=32768,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32768,
        ),
    ),
    (
        MEGATRON.format("MI300X/grok2-FP8-pretrain"),
        [],
        "grok",
        ModelSpec(
            family="grok",
            vocab_size=32768,
            hidden_size=8192,
            num_layers=64,
            num_heads=64,
            num_kv_heads=8,
            head_dim=128,
            intermediate_size=21824,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=16384,
            final_logit_softcap=50.0,
            router_logit_softcap=30.0,
        ),
    ),
    # --- MaxText through Primus (its model presets name MaxText's models/*.yml).
    (MAXTEXT_PRIMUS.format("MI300X/llama2_7B-bf16-pretrain"), [], "llama", published("llama2-7b")),
    (MAXTEXT_PRIMUS.format("MI355X/llama3_8B-bf16-pretrain"), [], "llama", published("llama3-8b")),
    (
        MAXTEXT_PRIMUS.format("MI300X/mixtral_8x7B-bf16-pretrain"),
        [],
        "mixtral",
        published("mixtral-8x7b"),
    ),
    (
        MAXTEXT_PRIMUS.format("MI300X/qwen3_30B_A3B-bf16-pretrain"),
        [],
        "qwen3_moe",
        published("qwen3-30b-a3b"),
    ),
    (
        MAXTEXT_PRIMUS.format("MI300X/deepseek_v2_16B-bf16-pretrain"),
        [],
        "deepseek_v2",
        published("deepseek-v2-lite"),
    ),
    # Grok-1's dims in MaxText's mixtral block, as Primus' grok1.yaml writes them (untied
    # output, 131072 tokens): 316.5e9 (the published Grok-1 is ~314e9).
    (
        MAXTEXT_PRIMUS.format("MI300X/grok1-nanoo_fp8-pretrain"),
        [],
        "mixtral",
        published(
            "mixtral-8x7b",
            vocab_size=131072,
            hidden_size=6144,
            num_layers=64,
            num_heads=48,
            intermediate_size=32768,
            moe_intermediate_size=32768,
        ),
    ),
    # --- TorchTitan through Primus and native TOML (flavours of v0.2.2).
    (TITAN_PRIMUS.format("MI300X/qwen3_0.6B-pretrain"), [], "qwen3", published("qwen3-0.6b")),
    (
        TITAN_PRIMUS.format("MI300X/llama3.1_8B-BF16-pretrain"),
        [],
        "llama",
        published("llama3.1-8b"),
    ),
    # TorchTitan's deepseek_v3 16B flavour is DeepSeek-V2-Lite (softmax routing).
    (
        TITAN_PRIMUS.format("MI300X/deepseek_v3_16b-BF16-pretrain"),
        [],
        "deepseek_v2",
        published("deepseek-v2-lite"),
    ),
    (
        TITAN_PRIMUS.format("MI300X/deepseek_v3_671b-pretrain"),
        [],
        "deepseek_v3",
        published("deepseek-v3"),
    ),
    (
        TITAN_PRIMUS.format("MI300X/gpt_oss_20B-BF16-pretrain"),
        [],
        "gpt_oss",
        published("gpt-oss-20b"),
    ),
    (
        TITAN_PRIMUS.format("MI300X/llama4_17Bx16E-BF16-pretrain"),
        [],
        "llama4",
        published("llama4-scout-17b-16e"),
    ),
    (TITAN.format("llama3/train_configs/llama3_8b"), [], "llama", published("llama3.1-8b")),
    (
        TITAN.format("deepseek_v3/train_configs/deepseek_v3_16b"),
        [],
        "deepseek_v2",
        published("deepseek-v2-lite"),
    ),
    (
        TITAN.format("deepseek_v3/train_configs/deepseek_v3_671b"),
        [],
        "deepseek_v3",
        published("deepseek-v3"),
    ),
    (
        TITAN.format("llama4/train_configs/llama4_17bx16e"),
        [],
        "llama4",
        published("llama4-scout-17b-16e"),
    ),
    # Debug flavours: TorchTitan's own dims (torchtitan/models/*/__init__.py).
    (
        TITAN.format("deepseek_v3/train_configs/debug_model"),
        [],
        "deepseek_v2",
        published(
            "deepseek-v2-lite",
            vocab_size=2048,
            hidden_size=256,
            intermediate_size=1024,
            moe_intermediate_size=256,
            num_layers=6,
            num_heads=16,
            num_kv_heads=16,
            num_experts=8,
            num_experts_per_tok=3,
        ),
    ),
    (
        TITAN.format("gpt_oss/train_configs/debug_model"),
        [],
        "gpt_oss",
        published("gpt-oss-20b", hidden_size=256, num_layers=4, num_experts=8),
    ),
    (
        TITAN.format("qwen3/train_configs/qwen3_moe_debug"),
        [],
        "qwen3_moe",
        published(
            "qwen3-30b-a3b",
            vocab_size=2048,
            hidden_size=256,
            num_layers=8,
            num_heads=16,
            num_kv_heads=8,
            intermediate_size=3072,
            num_experts=64,
        ),
    ),
    # --- MaxText's own invocation: base.yml model_name=X (models/X.yml at the pinned commit).
    (BASE_YML, ["model_name=llama2-7b"], "llama", published("llama2-7b")),
    (BASE_YML, ["model_name=llama3.1-8b"], "llama", published("llama3.1-8b")),
    (BASE_YML, ["model_name=llama3.3-70b"], "llama", published("llama3.3-70b")),
    (BASE_YML, ["model_name=mistral-7b"], "mistral", published("mistral-7b")),
    (BASE_YML, ["model_name=qwen2.5-7b"], "qwen2", published("qwen2.5-7b")),
    (BASE_YML, ["model_name=qwen3-8b"], "qwen3", published("qwen3-8b")),
    (BASE_YML, ["model_name=mixtral-8x7b"], "mixtral", published("mixtral-8x7b")),
    (BASE_YML, ["model_name=mixtral-8x22b"], "mixtral", published("mixtral-8x22b")),
    (BASE_YML, ["model_name=qwen3-30b-a3b"], "qwen3_moe", published("qwen3-30b-a3b")),
    (BASE_YML, ["model_name=qwen3-235b-a22b"], "qwen3_moe", published("qwen3-235b-a22b")),
    (BASE_YML, ["model_name=deepseek2-16b"], "deepseek_v2", published("deepseek-v2-lite")),
    (BASE_YML, ["model_name=deepseek2-236b"], "deepseek_v2", published("deepseek-v2")),
    (BASE_YML, ["model_name=deepseek3-671b"], "deepseek_v3", published("deepseek-v3")),
    (BASE_YML, ["model_name=kimi-k2-1t"], "deepseek_v3", published("deepseek-v3", **KIMI_K2)),
    (BASE_YML, ["model_name=gpt-oss-20b"], "gpt_oss", published("gpt-oss-20b")),
    (BASE_YML, ["model_name=gpt-oss-120b"], "gpt_oss", published("gpt-oss-120b")),
    (BASE_YML, ["model_name=llama4-17b-16e"], "llama4", published("llama4-scout-17b-16e")),
    (BASE_YML, ["model_name=llama4-17b-128e"], "llama4", published("llama4-maverick-17b-128e")),
    # Gemma: MaxText pads the vocabulary (256128, 262144 where Google has 256000, 262208)
    # and counts Gemma 2's sliding + global block pairs as one layer.
    (BASE_YML, ["model_name=gemma-2b"], "gemma", published("gemma-2b")),
    (BASE_YML, ["model_name=gemma-7b"], "gemma", published("gemma-7b")),
    (BASE_YML, ["model_name=gemma2-2b"], "gemma2", published("gemma2-2b")),
    (BASE_YML, ["model_name=gemma2-9b"], "gemma2", published("gemma2-9b")),
    (BASE_YML, ["model_name=gemma2-27b"], "gemma2", published("gemma2-27b")),
    (BASE_YML, ["model_name=gemma3-4b"], "gemma3", published("gemma3-4b")),
    (BASE_YML, ["model_name=gemma3-12b"], "gemma3", published("gemma3-12b")),
    (BASE_YML, ["model_name=gemma3-27b"], "gemma3", published("gemma3-27b")),
    (BASE_YML, ["model_name=olmo3-7b"], "olmo3", published("olmo3-7b")),
    (BASE_YML, ["model_name=olmo3-32b"], "olmo3", published("olmo3-32b")),
    # The MLPerf GPT-3 reference: the paper's 175B, MaxText padding the vocabulary to 50304
    # and learning 16384 positions (tests/test_compat_olmo3_gpt3.py has its other sizes).
    (BASE_YML, ["model_name=gpt3-175b"], "gpt3", published("gpt3-175b")),
    # Megatron's MambaModel with is_hybrid_model false: 48 Mamba-2 layers. Its model file's
    # `bases: mamba_base.yaml` is not a key Primus' loader follows (only `extends`), and
    # nothing else sets untie_embeddings_and_output_weights: Megatron's default ties them,
    # ~368M. The MI300X file names gpt-neox-20b's tokenizer (50277 -> 50304), the MI355X
    # one keeps GPT2BPETokenizer (50257 -> 50304).
    (MEGATRON.format("MI300X/mamba_370M-pretrain"), [], "mamba2", model_spec("mamba-370m")),
    (MEGATRON.format("MI355X/mamba_370M-pretrain"), [], "mamba2", model_spec("mamba-370m")),
    # Primus' Zebra-Llama hybrids (Megatron model_type mamba, Primus' hybrid layer specs).
    (
        MEGATRON.format("MI300X/zebra_llama_1B_gdn_pure-pretrain"),
        [],
        "zebra_llama",
        model_spec("zebra-llama-1b-gdn"),
    ),
    (
        MEGATRON.format("MI300X/zebra_llama_300M_kda_pure-pretrain"),
        [],
        "zebra_llama",
        model_spec("zebra-llama-300m-kda"),
    ),
    (
        MEGATRON.format("MI300X/zebra_llama_300M_gdn_hybrid-pretrain"),
        [],
        "zebra_llama",
        model_spec("zebra-llama-300m-gdn-hybrid"),
    ),
    # Qwen3-Next and Qwen3.5: Megatron's gated DeltaNet layers, MaxText's qwen3 Next blocks.
    (
        MEGATRON.format("MI300X/qwen3_5_35B_A3B-BF16-pretrain"),
        [],
        "qwen3_5_moe",
        model_spec("qwen3.5-35b-a3b"),
    ),
    (BASE_YML, ["model_name=qwen3-next-80b-a3b"], "qwen3_next", model_spec("qwen3-next-80b-a3b")),
    (BASE_YML, ["model_name=qwen3.5-35b-a3b"], "qwen3_5_moe", model_spec("qwen3.5-35b-a3b")),
]

# (file, native overrides, the key=value the refusal names)
REFUSED = [
    (MEGATRON.format("MI355X/deepseek_v4_flash-BF16-pretrain"), [], "model_type='deepseek_v4'"),
    (MEGATRON.format("MI355X/lfm2_8B_A1B-BF16-pretrain"), [], "lfm_layer_types=["),
    (MAXTEXT_PRIMUS.format("MI300X/gemma4_26B-bf16-pretrain"), [], "decoder_block='gemma4'"),
    (TITAN.format("flux/train_configs/flux_dev_model"), [], "model.name='flux'"),
    (BASE_YML, ["model_name=gemma4-26b"], "decoder_block='gemma4'"),
    (BASE_YML, ["model_name=deepseek4-tiny"], "decoder_block='deepseek4'"),
    (BASE_YML, ["model_name=deepseek3.2-671b"], "use_indexer=True"),
    (BASE_YML, ["model_name=qwen3-vl-4b"], "use_multimodal=True"),
]


def _id(case):
    parts = case[0].split("/")
    where = {"Primus": parts[2], "torchtitan": parts[min(3, len(parts) - 1)]}.get(parts[0], "")
    return f"{where}/{parts[-1]}".lstrip("/") + "".join(f" {o}" for o in case[1])


def _load(samples, path, native, **kwargs):
    try:
        return compat.load_foreign(samples / path, env={}, native_overrides=native, **kwargs)
    except DevicesNotDivisible as short:  # a multi-node example: on the nodes it needs
        env = {short.nodes_key: str(short.hosts)}
        return compat.load_foreign(samples / path, env=env, native_overrides=native, **kwargs)


@pytest.mark.parametrize("path,native,family,expected", RESOLVES, ids=map(_id, RESOLVES))
def test_file_resolves_to_its_family_and_counts(compat_samples, path, native, family, expected):
    cfg, _ = _load(compat_samples, path, native, allow_unsupported=True)
    spec = ModelSpec.from_config(cfg.model)
    assert spec.family == family
    assert spec.num_params() == pytest.approx(expected.num_params(), rel=0.01)
    assert spec.num_active_params() == pytest.approx(expected.num_active_params(), rel=0.01)


def test_megatron_linear_biases(compat_samples):
    # Biases are a small share of the count, so the table above cannot tell them apart.
    cfg, _ = _load(
        compat_samples, MEGATRON.format("MI300X/llama2_7B-BF16-pretrain"), ["add_bias_linear=true"]
    )
    spec = ModelSpec.from_config(cfg.model)
    assert (spec.family, spec.qkv_bias, spec.o_bias, spec.mlp_bias) == ("llama", True, True, True)
    path = MEGATRON.format("MI300X/mixtral_8x7B_v0.1-BF16-pretrain")
    with pytest.raises(ConfigError, match="add_bias_linear"):
        _load(compat_samples, path, ["add_bias_linear=true"])


def test_expected_figures_are_the_published_ones():
    # The presets the table calls published: their totals are the published checkpoints'.
    for preset in (
        "llama2-7b",
        "mixtral-8x7b",
        "qwen3-235b-a22b",
        "deepseek-v3",
        "gpt-oss-120b",
        "llama4-maverick-17b-128e",
    ):
        assert model_spec(preset).num_params() == PUBLISHED_PARAMS[preset]
    # Kimi K2's published total, 1,026,408,232,448, counts the 60 x 384 expert-bias buffers.
    assert published("deepseek-v3", **KIMI_K2).num_params() + 60 * 384 == 1_026_408_232_448


@pytest.mark.parametrize("path,native,named", REFUSED, ids=map(_id, REFUSED))
def test_unbuildable_architecture_is_refused_by_name(compat_samples, path, native, named):
    with pytest.raises(ConfigError) as err:
        _load(compat_samples, path, native, allow_unsupported=True)
    message = str(err.value)
    assert named in message
    assert "an architecture jaxtrain's model zoo cannot build" in message


def test_primus_grok_presets_keep_what_megatron_builds(compat_samples):
    cfg, report = _load(
        compat_samples, MEGATRON.format("MI300X/grok2-FP8-pretrain"), [], allow_unsupported=True
    )
    spec = ModelSpec.from_config(cfg.model)
    # Primus' patches cap the output and router logits; the GPT layers stay Megatron's.
    assert (spec.final_logit_softcap, spec.router_logit_softcap) == (50.0, 30.0)
    assert (spec.moe_activation, spec.post_norms, spec.attn_logit_softcap) == ("swiglu", False, 0.0)
    # moe_router_load_balancing_type none: no balancing loss despite moe_aux_loss_coeff 0.01.
    assert spec.moe_aux_loss_coef == 0.0
    assert report.entries["moe_router_load_balancing_type"].status == "mapped"
    assert not report.by_status("unsupported")
    assert any("family grok" in line and "SwiGLU" in line for line in report.notes)
    # The xAI presets carry what Megatron does not build.
    assert model_spec("grok-2").num_params() == pytest.approx(270e9, rel=0.01)


def test_config_prints_no_parameter_count_for_a_refused_file(compat_samples, capsys):
    path = compat_samples / MEGATRON.format("MI355X/deepseek_v4_flash-BF16-pretrain")
    assert main(["config", str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "model_type='deepseek_v4'" in err and "num_params" not in err


def test_maxtext_base_yml_with_model_name_counts_only_what_the_user_set(
    compat_samples, capsys, monkeypatch
):
    # MaxText's standard invocation, from inside the checkout with a relative path: base.yml's
    # keys are MaxText's defaults, the model file's and the command line's are the config's.
    monkeypatch.chdir(compat_samples / "maxtext")
    argv = ["config", "src/maxtext/configs/base.yml", "model_name=mixtral-8x7b", "--json"]
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    # base.yml reads TFDS data, which jaxtrain cannot; nothing else is unsupported.
    assert [e["key"] for e in payload["unsupported"]] == ["dataset_type"]
    assert payload["derived"]["num_params"] == PUBLISHED_PARAMS["mixtral-8x7b"]
    keys = {k["key"]: k for k in payload["report"]["keys"]}
    assert keys["num_experts"]["origin"].endswith("models/mixtral-8x7b.yml")
    assert keys["model_name"]["origin"] == "command line"


def test_maxtext_minus_one_on_an_axis_jaxtrain_lacks_is_filled(compat_samples):
    # ici_fsdp_parallelism 8 and ici_tensor_sequence_parallelism -1 on 8 devices per host:
    # MaxText fills tensor_sequence with 8 / 8 = 1, an unused axis.
    path = MAXTEXT_PRIMUS.format("MI355X/llama3_8B-bf16-pretrain")
    cfg, report = _load(compat_samples, path, [])
    assert report.entries["ici_tensor_sequence_parallelism"].status == "ignored"
    assert cfg.mesh.ici_fsdp == 8
    # On 16 devices per host it would be 2: an axis jaxtrain has no counterpart for.
    _, report = compat.load_foreign(
        compat_samples / path, env={"GPUS_PER_NODE": "16"}, allow_unsupported=True
    )
    assert report.entries["ici_tensor_sequence_parallelism"].status == "unsupported"


@pytest.mark.parametrize(
    "path",
    [
        MEGATRON.format("MI300X/llama2_7B-BF16-pretrain"),  # eval_iters: 0
        TITAN_PRIMUS.format("MI300X/qwen3_0.6B-pretrain"),  # validation.enable: false
        MAXTEXT_PRIMUS.format("MI300X/llama2_7B-bf16-pretrain"),  # eval_interval: -1
        "prime-hosted/pretrain.toml",  # without its [val] tables, see below
    ],
    ids=["megatron", "torchtitan", "maxtext", "prime-rl"],
)
def test_disabled_validation_means_no_validation_at_all(compat_samples, tmp_path, path):
    source = compat_samples / path
    if path.startswith("prime-hosted"):  # prime-rl validates only with a [val] table
        kept, skip = [], False
        for line in source.read_text().splitlines():
            if line.startswith("["):
                skip = line.startswith("[val")
            kept.append("" if skip else line)
        source = tmp_path / "pretrain.toml"
        source.write_text("\n".join(kept))
    cfg, _ = compat.load_foreign(source, {"data.kind": "synthetic"}, env={}, allow_unsupported=True)
    assert (cfg.train.eval_every, cfg.train.eval_batches) == (0, 0)
    # No periodic validation and no final one either: there are no validation batches.
    assert pipeline.make_eval_batches(cfg, 512) is None
