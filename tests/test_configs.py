"""Config files and model presets: every file loads, validates and builds; sizes are right.

Models are built abstractly (`nnx.eval_shape`), so even the 405B preset costs no memory.
Parameter counts are checked three ways: the abstract model, `ModelSpec.num_params`, and
Hugging Face transformers' own modules built on the meta device.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import jax
import pytest
from flax import nnx

from jaxtrain.config.loader import apply_overrides, load_config, load_py_config
from jaxtrain.errors import ConfigError
from jaxtrain.models.assembly.decoder import Decoder
from jaxtrain.models.presets.registry import PRESETS, PUBLISHED_PARAMS, model_config, model_spec
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.run import validate

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
FAMILIES = (
    "llama",
    "qwen2",
    "qwen3",
    "mistral",
    "mixtral",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
    "llama4",
    "grok",
    "mamba",
    "mamba2",
    "nemotron_h",
    "zebra_llama",
    "gemma",
    "gemma2",
    "gemma3",
    "olmo3",
    "gpt3",
    "qwen3_next",
    "qwen3_5",
    "qwen3_5_moe",
)


def _defines_get_config(path: Path) -> bool:
    """Whether a configs/*.py file is a config (helper modules define no get_config)."""
    tree = ast.parse(path.read_text())
    return any(
        isinstance(node, ast.FunctionDef) and node.name == "get_config" for node in tree.body
    )


CONFIG_FILES = sorted(p for p in CONFIGS.glob("*.py") if _defines_get_config(p))


def _config_stem(preset: str) -> str:
    """The config file name of a preset: dots and dashes become underscores."""
    return preset.replace(".", "_").replace("-", "_")


def _abstract_param_count(spec: ModelSpec) -> int:
    """Sum of the sizes of every parameter of the model, built without allocating it (buffers
    such as DeepSeek V3's expert bias are not parameters, in transformers either)."""
    model = nnx.eval_shape(lambda: Decoder(spec, rngs=nnx.Rngs(0)))
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)))


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_config_file_loads_validates_and_builds(path: Path) -> None:
    cfg = load_py_config(str(path))
    # Data checks need real shard and tokenizer folders; the invalid-combination tests and
    # test_cli_faults cover them.
    apply_overrides(cfg, {"data.kind": "synthetic", "data.tokenizer": ""})
    spec = validate(cfg)
    assert _abstract_param_count(spec) == spec.num_params()


def test_every_preset_has_a_config_file() -> None:
    stems = {p.stem for p in CONFIG_FILES}
    missing = sorted(name for name in PRESETS if _config_stem(name) not in stems)
    assert not missing, f"presets without a configs/<name>.py file: {missing}"
    for name in PRESETS:
        cfg = load_py_config(str(CONFIGS / f"{_config_stem(name)}.py"))
        assert cfg.model.preset == name
        assert ModelSpec.from_config(cfg.model) == model_spec(
            name, **{k: cfg.model[k] for k in ("dtype", "param_dtype", "remat")}
        )


def test_pretrain_configs_train_in_bfloat16_on_real_data() -> None:
    for path in CONFIG_FILES:
        cfg = load_py_config(str(path))
        # Debug sizes and the CPU demo train in float32; every preset recipe in bfloat16.
        if (
            cfg.model.preset not in PRESETS
            or cfg.model.preset.endswith("-debug")
            or cfg.data.kind != "datatrove"
        ):
            continue
        assert (cfg.model.dtype, cfg.model.param_dtype) == ("bfloat16", "float32"), path.name
        assert cfg.train.seq_len <= cfg.model.max_seq_len, path.name
        assert cfg.optim.warmup_steps < cfg.train.steps, path.name


def test_configs_stay_locked() -> None:
    cfg = load_py_config(str(CONFIGS / "llama2_7b.py"))
    with pytest.raises(AttributeError):
        cfg.train.new_setting = 1
    with pytest.raises(AttributeError):
        cfg.model.new_setting = 1


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_a_spec(name: str) -> None:
    spec = model_spec(name)
    assert spec.family in FAMILIES
    assert spec.num_heads % spec.num_kv_heads == 0
    assert ModelSpec.from_config(model_config(name)) == spec
    if name.endswith("-debug"):
        assert _abstract_param_count(spec) == spec.num_params()


def test_published_parameter_counts() -> None:
    # The three best-known sizes are spelled out here so PUBLISHED_PARAMS cannot drift alone.
    assert PUBLISHED_PARAMS["llama2-7b"] == 6_738_415_616
    assert PUBLISHED_PARAMS["llama3-8b"] == 8_030_261_248
    assert PUBLISHED_PARAMS["qwen3-8b"] == 8_190_735_360
    # DeepSeek's papers round: V2-Lite 15.7B, V2 236B, V3 671B (its MTP module not counted).
    assert round(PUBLISHED_PARAMS["deepseek-v2-lite"] / 1e9, 1) == 15.7
    assert round(PUBLISHED_PARAMS["deepseek-v2"] / 1e9) == 236
    assert round(PUBLISHED_PARAMS["deepseek-v3"] / 1e9) == 671
    assert round(PUBLISHED_PARAMS["gpt3-175b"] / 1e9) == 175  # the paper's (no checkpoint)
    for name, count in PUBLISHED_PARAMS.items():
        assert model_spec(name).num_params() == count, name
    for name in ("llama2-7b", "llama3-8b", "qwen3-8b"):
        assert _abstract_param_count(model_spec(name)) == PUBLISHED_PARAMS[name], name


def _hf_param_count(family: str, **hf_config) -> int:
    """Parameters of the transformers model of `family`, built on the meta device."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config_class = {
        "llama": transformers.LlamaConfig,
        "qwen2": transformers.Qwen2Config,
        "qwen3": transformers.Qwen3Config,
        "mistral": transformers.MistralConfig,
        "mixtral": transformers.MixtralConfig,
        "qwen3_moe": transformers.Qwen3MoeConfig,
        "deepseek_v2": transformers.DeepseekV2Config,
        "deepseek_v3": transformers.DeepseekV3Config,
        "gpt_oss": transformers.GptOssConfig,
        "llama4": transformers.Llama4TextConfig,
        "gemma": transformers.GemmaConfig,
        "gemma2": transformers.Gemma2Config,
        "gemma3": transformers.Gemma3TextConfig,
        "olmo3": transformers.Olmo3Config,
        "gpt3": transformers.GPT2Config,
    }[family]
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config_class(**hf_config))
    return sum(p.numel() for p in model.parameters())  # tied weights are listed once


# config.json values of the published checkpoints, written out independently of PRESETS.
_HF_CONFIGS = {
    "llama2-7b": dict(
        family="llama",
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        tie_word_embeddings=False,
    ),
    "llama3-8b": dict(
        family="llama",
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    ),
    "qwen3-8b": dict(
        family="qwen3",
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=False,
    ),
    "mixtral-8x7b": dict(
        family="mixtral",
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        num_local_experts=8,
        num_experts_per_tok=2,
        tie_word_embeddings=False,
    ),
    "qwen3-30b-a3b": dict(
        family="qwen3_moe",
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=6144,
        moe_intermediate_size=768,
        num_hidden_layers=48,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        num_experts=128,
        num_experts_per_tok=8,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        tie_word_embeddings=False,
    ),
    "deepseek-v2-lite": dict(
        family="deepseek_v2",
        vocab_size=102400,
        hidden_size=2048,
        intermediate_size=10944,
        moe_intermediate_size=1408,
        num_hidden_layers=27,
        num_attention_heads=16,
        num_key_value_heads=16,
        n_shared_experts=2,
        n_routed_experts=64,
        num_experts_per_tok=6,
        first_k_dense_replace=1,
        q_lora_rank=None,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        tie_word_embeddings=False,
    ),
    "deepseek-v2": dict(
        family="deepseek_v2",
        vocab_size=102400,
        hidden_size=5120,
        intermediate_size=12288,
        moe_intermediate_size=1536,
        num_hidden_layers=60,
        num_attention_heads=128,
        num_key_value_heads=128,
        n_shared_experts=2,
        n_routed_experts=160,
        num_experts_per_tok=6,
        first_k_dense_replace=1,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        tie_word_embeddings=False,
    ),
    # The multi-token-prediction module (num_nextn_predict_layers=1) is not built by either.
    "deepseek-v3": dict(
        family="deepseek_v3",
        vocab_size=129280,
        hidden_size=7168,
        intermediate_size=18432,
        moe_intermediate_size=2048,
        num_hidden_layers=61,
        num_attention_heads=128,
        num_key_value_heads=128,
        n_shared_experts=1,
        n_routed_experts=256,
        num_experts_per_tok=8,
        first_k_dense_replace=3,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        n_group=8,
        topk_group=4,
        tie_word_embeddings=False,
    ),
    "gpt-oss-20b": dict(
        family="gpt_oss",
        vocab_size=201088,
        hidden_size=2880,
        intermediate_size=2880,
        num_hidden_layers=24,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=64,
        num_local_experts=32,
        num_experts_per_tok=4,
        attention_bias=True,
        tie_word_embeddings=False,
    ),
    "gpt-oss-120b": dict(
        family="gpt_oss",
        vocab_size=201088,
        hidden_size=2880,
        intermediate_size=2880,
        num_hidden_layers=36,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=64,
        num_local_experts=128,
        num_experts_per_tok=4,
        attention_bias=True,
        tie_word_embeddings=False,
    ),
    "llama4-scout-17b-16e": dict(
        family="llama4",
        vocab_size=202048,
        hidden_size=5120,
        intermediate_size=8192,
        intermediate_size_mlp=16384,
        num_hidden_layers=48,
        num_attention_heads=40,
        num_key_value_heads=8,
        head_dim=128,
        num_local_experts=16,
        num_experts_per_tok=1,
        interleave_moe_layer_step=1,
        use_qk_norm=True,
        tie_word_embeddings=False,
    ),
    "llama4-maverick-17b-128e": dict(
        family="llama4",
        vocab_size=202048,
        hidden_size=5120,
        intermediate_size=8192,
        intermediate_size_mlp=16384,
        num_hidden_layers=48,
        num_attention_heads=40,
        num_key_value_heads=8,
        head_dim=128,
        num_local_experts=128,
        num_experts_per_tok=1,
        interleave_moe_layer_step=2,
        use_qk_norm=False,
        tie_word_embeddings=False,
    ),
}


@pytest.mark.parametrize("name", sorted(_HF_CONFIGS))
def test_published_counts_match_transformers(name: str) -> None:
    assert _hf_param_count(**_HF_CONFIGS[name]) == PUBLISHED_PARAMS[name]


def test_every_preset_counts_like_transformers() -> None:
    # Biases, qk-norm weights and tied embeddings are counted as transformers builds them.
    for name in sorted(PRESETS):
        spec = model_spec(name)
        if spec.family == "grok":  # no Grok in transformers: tests/test_grok_parity.py counts
            continue  # it against xAI's reference shapes
        if spec.block_pattern:  # state-space families: tests/test_ssm_model.py
            continue
        hf_config = dict(
            vocab_size=spec.vocab_size,
            hidden_size=spec.hidden_size,
            intermediate_size=spec.intermediate_size,
            num_hidden_layers=spec.num_layers,
            num_attention_heads=spec.num_heads,
            num_key_value_heads=spec.num_kv_heads,
            head_dim=spec.head_dim,
            tie_word_embeddings=spec.tie_embeddings,
        )
        if spec.family == "gpt3":  # GPT-2's names, and its learned position table
            hf_config = dict(
                vocab_size=spec.vocab_size,
                n_embd=spec.hidden_size,
                n_inner=spec.intermediate_size,
                n_layer=spec.num_layers,
                n_head=spec.num_heads,
                n_positions=spec.learned_positions,
                tie_word_embeddings=spec.tie_embeddings,
            )
        count = _hf_param_count(spec.family, **{**hf_config, **_hf_moe_config(spec)})
        assert count == spec.num_params(), name


def _hf_moe_config(spec: ModelSpec) -> dict:
    """The transformers expert keys of a mixture-of-experts spec ({} when dense)."""
    if spec.family == "mixtral":
        return dict(
            num_local_experts=spec.num_experts,
            intermediate_size=spec.moe_intermediate_size,
            num_experts_per_tok=spec.num_experts_per_tok,
        )
    if spec.family in ("deepseek_v2", "deepseek_v3"):
        return dict(
            n_routed_experts=spec.num_experts,
            n_shared_experts=spec.moe_shared_experts,
            moe_intermediate_size=spec.moe_intermediate_size,
            num_experts_per_tok=spec.num_experts_per_tok,
            first_k_dense_replace=spec.num_dense_layers,
            q_lora_rank=spec.q_lora_rank or None,
            kv_lora_rank=spec.kv_lora_rank,
            qk_nope_head_dim=spec.qk_nope_head_dim,
            qk_rope_head_dim=spec.qk_rope_head_dim,
            v_head_dim=spec.v_head_dim,
        )
    if spec.family == "gpt_oss":
        return dict(
            num_local_experts=spec.num_experts,
            intermediate_size=spec.intermediate_size,
            num_experts_per_tok=spec.num_experts_per_tok,
            attention_bias=spec.qkv_bias,
        )
    if spec.family == "llama4":
        return dict(
            num_local_experts=spec.num_experts,
            intermediate_size=spec.moe_intermediate_size,
            intermediate_size_mlp=spec.intermediate_size,
            num_experts_per_tok=spec.num_experts_per_tok,
            interleave_moe_layer_step=spec.moe_layer_step,
        )
    if spec.family == "qwen3_moe":
        return dict(
            num_experts=spec.num_experts,
            moe_intermediate_size=spec.moe_intermediate_size,
            num_experts_per_tok=spec.num_experts_per_tok,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        )
    return {}


def test_active_parameter_counts() -> None:
    # Model cards: Mixtral 8x7B 12.9B active, Qwen3-30B-A3B 3.3B, Qwen3-235B-A22B 22B.
    assert round(model_spec("mixtral-8x7b").num_active_params() / 1e9, 1) == 12.9
    assert 3.3e9 < model_spec("qwen3-30b-a3b").num_active_params() < 3.4e9
    assert round(model_spec("qwen3-235b-a22b").num_active_params() / 1e9) == 22

    # DeepSeek's activated figures leave out the input embedding: V2-Lite 2.4B, V2 21B, V3 37B.
    def activated(name: str) -> float:
        spec = model_spec(name)
        return (spec.num_active_params() - spec.vocab_size * spec.hidden_size) / 1e9

    assert 2.4 <= activated("deepseek-v2-lite") < 2.5
    assert round(activated("deepseek-v2")) == 21
    assert round(activated("deepseek-v3")) == 37
    # gpt-oss's model card (embedding left out): 20b 3.6B of 20.9B, 120b 5.1B of 116.8B.
    assert round(activated("gpt-oss-20b"), 1) == 3.6
    assert round(activated("gpt-oss-120b"), 1) == 5.1
    assert round(PUBLISHED_PARAMS["gpt-oss-20b"] / 1e9, 1) == 20.9
    assert round(PUBLISHED_PARAMS["gpt-oss-120b"] / 1e9, 1) == 116.8
    # Llama 4: 17B active (embedding counted) for both; Maverick's text model alone is 400B.
    for name in ("llama4-scout-17b-16e", "llama4-maverick-17b-128e"):
        assert round(model_spec(name).num_active_params() / 1e9) == 17, name
    assert 400e9 < PUBLISHED_PARAMS["llama4-maverick-17b-128e"] < 401e9
    dense = model_spec("llama3-8b")
    assert dense.num_active_params() == dense.num_params()


def test_unknown_override_key_is_named() -> None:
    cfg = load_py_config(str(CONFIGS / "base.py"))
    with pytest.raises(ConfigError, match="'train.stepz'"):
        apply_overrides(cfg, ["--config.train.stepz=5"])
    with pytest.raises(ConfigError, match="'trian'"):
        apply_overrides(cfg, ["--config.trian.steps=5"])
    with pytest.raises(ConfigError, match="'model.num_layerz'"):
        load_config(str(CONFIGS / "llama2_7b.py"), {"model.num_layerz": 2})


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        (
            {"model.num_heads": 4, "model.num_kv_heads": 3},
            ("model.num_heads", "model.num_kv_heads"),
        ),
        (
            {"train.global_batch_size": 8, "train.micro_batch_size": 3},
            ("train.global_batch_size", "train.micro_batch_size"),
        ),
        ({"train.seq_len": 1024, "model.max_seq_len": 512}, ("train.seq_len", "model.max_seq_len")),
        ({"data.kind": "datatrove", "data.paths": ""}, ("data.paths",)),
        ({"data.kind": "datatrove", "data.paths": "/nonexistent/shards"}, ("data.paths",)),
    ],
    ids=["heads", "micro-batch", "seq-len", "no-data-path", "missing-data-path"],
)
def test_invalid_combinations_name_the_key(overrides: dict, keys: tuple[str, ...]) -> None:
    cfg = load_config(str(CONFIGS / "base.py"), overrides)
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    for key in keys:
        assert key in str(error.value)


def test_a_batch_the_processes_cannot_share_is_refused_at_setup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checked once, before any data is read: every process reads an equal share of a batch."""
    from jaxtrain import run

    cfg = load_config(str(CONFIGS / "base.py"), {"train.global_batch_size": 6})
    devices = jax.devices()[:2]
    monkeypatch.setattr(jax, "process_count", lambda: 4)
    with pytest.raises(ConfigError, match="train.global_batch_size=6 is not divisible by the 4"):
        run.setup(cfg, devices, check_data=False)


def test_pretrain_config_without_data_path_is_rejected() -> None:
    with pytest.raises(ConfigError, match="data.paths"):
        validate(load_py_config(str(CONFIGS / "llama3_1_8b.py")))


def test_one_coercion_for_command_line_text_and_typed_values():
    """`--config.a.b=TEXT`, a notebook mapping and another stack's typed values all go through
    `config.coerce` (adapters once turned the text "false" into True with bool())."""
    from jaxtrain.compat.common.target import build
    from jaxtrain.config.loader import coerce

    assert coerce("false", True, "k") is False and coerce("on", False, "k") is True
    assert coerce(False, True, "k") is False and coerce(0, True, "k") is False
    assert build({"train.progress": "false"}, "x").train.progress is False
    assert coerce("3", 1, "k") == 3 and coerce(4.0, 1, "k") == 4
    assert isinstance(coerce(1, 0.5, "k"), float) and coerce("1e-3", 0.5, "k") == 1e-3
    assert coerce(None, "x", "k") == "" and coerce(7, "x", "k") == "7"
    assert coerce("(1, 2)", (0,), "k") == (1, 2) and coerce([3], (0,), "k") == (3,)
    for value, current, expected in (
        ("maybe", True, "true or false"),
        (2.5, 1, "an integer"),
        (True, 1, "an integer"),
        ("x", 0.5, "a number"),
    ):
        with pytest.raises(ConfigError, match=f"--config.k={value!r}: expected {expected}"):
            coerce(value, current, "k")
