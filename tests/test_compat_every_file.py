"""Every MaxText config file of the vendored snapshot either resolves or is refused in one line,
and the Primus model presets that list `bases:` resolve as Primus and Megatron build them.

A model file given directly has no `base_config`, so MaxText's defaults come from jaxtrain's
offline copy of base.yml: it must give the same model as `base.yml model_name=<name>`.
"""

import pytest
from conftest import COMPAT_SAMPLES

from jaxtrain import compat
from jaxtrain.compat.common.report import DevicesNotDivisible
from jaxtrain.errors import JaxtrainError
from jaxtrain.models.presets.registry import model_spec
from jaxtrain.models.spec.hyperparameters import ModelSpec

CONFIGS = COMPAT_SAMPLES / "maxtext/src/maxtext/configs"
MAXTEXT_FILES = sorted(p.relative_to(CONFIGS).as_posix() for p in CONFIGS.rglob("*.yml"))
MEGATRON = "Primus/examples/megatron/configs/{}.yaml"


def _outcome(path, native=()):
    """("resolves", spec) or ("refused", message); anything else raised fails the test."""
    try:
        cfg, _ = compat.load_foreign(
            path, env={}, native_overrides=list(native), allow_unsupported=True
        )
    except JaxtrainError as e:
        return "refused", str(e)
    return "resolves", ModelSpec.from_config(cfg.model)


def test_the_snapshot_holds_maxtexts_whole_configs_folder():
    # The walk below is only as good as the copy: MaxText's configs/ at the pinned commit has
    # 120 YAML files, 78 of them model files.
    assert len(MAXTEXT_FILES) == 120
    assert sum(name.startswith("models/") for name in MAXTEXT_FILES) == 78


@pytest.mark.parametrize("name", MAXTEXT_FILES)
def test_every_maxtext_file_resolves_or_is_refused_in_one_line(name):
    kind, what = _outcome(CONFIGS / name)
    if kind == "refused":
        assert "\n" not in what and name in what
    else:
        assert what.num_params() > 0


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONFIGS / "models").glob("*.yml")))
def test_a_model_file_given_directly_builds_what_base_yml_with_its_name_builds(name):
    direct = _outcome(CONFIGS / "models" / f"{name}.yml")
    named = _outcome(CONFIGS / "base.yml", [f"model_name={name}"])
    assert direct[0] == named[0]
    if direct[0] == "resolves":
        assert direct[1].num_params() == named[1].num_params()
        assert direct[1].num_active_params() == named[1].num_active_params()


@pytest.mark.parametrize(
    "name, preset",
    [("deepseek2-16b", "deepseek-v2-lite"), ("deepseek3-671b", "deepseek-v3")],
)
def test_maxtext_deepseek_files_given_directly_read_yarn_from_base_yml_defaults(name, preset):
    # Their rope_type yarn leaves beta_fast / beta_slow to base.yml.
    kind, spec = _outcome(CONFIGS / "models" / f"{name}.yml")
    assert kind == "resolves"
    assert (spec.rope_scaling, spec.rope_beta_fast, spec.rope_beta_slow) == ("yarn", 32.0, 1.0)
    assert spec.num_params() == model_spec(preset).num_params()


@pytest.mark.parametrize("machine", ["MI300X", "MI355X"])
def test_primus_mamba_370m_ties_its_embeddings_as_megatron_does(compat_samples, machine):
    # `bases: mamba_base.yaml` is not read by Primus (only `extends:`), and nothing else sets
    # untie_embeddings_and_output_weights: Megatron's default shares embedding and output.
    path = compat_samples / MEGATRON.format(f"{machine}/mamba_370M-pretrain")
    cfg, report = compat.load_foreign(path, env={})
    spec = ModelSpec.from_config(cfg.model)
    assert spec.tie_embeddings and spec.vocab_size == 50304
    assert spec.num_params() == pytest.approx(368e6, rel=0.002)
    assert report.entries["bases"].status == "ignored"
    assert "only `extends:`" in report.entries["bases"].reason
    assert any("Megatron's default shares" in note for note in report.notes)


@pytest.mark.parametrize(
    "name, untied",
    [
        ("MI300X/zebra_llama_1B-pretrain", False),
        ("MI300X/zebra_llama_3B-pretrain", False),
        ("MI300X/zebra_llama_8B-pretrain", False),
        ("MI355X/minimax_m2.5-FP8-pretrain", True),  # its model file sets it
    ],
)
def test_presets_listing_bases_keep_megatrons_tying_default(compat_samples, name, untied):
    try:
        cfg, _ = compat.load_foreign(
            compat_samples / MEGATRON.format(name), env={}, allow_unsupported=True
        )
    except DevicesNotDivisible as short:
        cfg, _ = compat.load_foreign(
            compat_samples / MEGATRON.format(name),
            env={short.nodes_key: str(short.hosts)},
            allow_unsupported=True,
        )
    assert cfg.model.tie_embeddings is (not untied)


@pytest.mark.parametrize("name", ["gemma2-27b", "gemma3-4b", "gemma3-27b"])
def test_maxtext_gemma_blocks_resolve_as_maxtext_builds_them(name):
    cfg, report = compat.load_foreign(
        CONFIGS / "base.yml",
        env={},
        native_overrides=[f"model_name={name}"],
        allow_unsupported=True,
    )
    # base.yml reads TFDS data, which jaxtrain cannot; nothing of the model is unsupported.
    assert [e.key for e in report.by_status("unsupported")] == ["dataset_type"]
    spec = ModelSpec.from_config(cfg.model)
    published = model_spec(name)
    assert spec.num_params() == pytest.approx(published.num_params(), rel=2e-4)
    assert (spec.mlp_activation, spec.norm_zero_centered, spec.tie_embeddings) == (
        "geglu",
        True,
        True,
    )
    assert spec.embed_multiplier == pytest.approx(spec.hidden_size**0.5)
    assert report.entries["normalize_embedding_logits"].status == "mapped"
    # base.yml's ~/jax_cache is not written to unasked; the reason names the key that asks.
    assert report.entries["jax_cache_dir"].status == "ignored"
    assert "backend.compile_cache" in report.entries["jax_cache_dir"].reason
    if name.startswith("gemma2"):
        # 23 MaxText layers of a sliding and a global block each.
        assert (spec.num_layers, spec.global_layer_step, spec.sliding_window) == (46, 2, 4096)
        assert (spec.attn_logit_softcap, spec.final_logit_softcap) == (50.0, 30.0)
        assert spec.query_pre_attn_scalar == 128  # MaxText scales by head_dim^-0.5
    else:
        assert (spec.global_layer_step, spec.sliding_window, spec.qk_norm) == (6, 1024, True)
        assert (spec.rope_theta, spec.rope_local_theta) == (1e6, 1e4)
        assert (spec.rope_scaling, spec.rope_factor) == ("linear", 8.0)
        assert spec.query_pre_attn_scalar == (168 if name == "gemma3-27b" else 256)
