"""`jaxtrain export`: a trained run's checkpoint as a Hugging Face folder that transformers
loads and that reproduces jaxtrain's logits, for every dense family."""

from __future__ import annotations

import stat

import jax
import numpy as np
import pytest
from checkpoint_fixtures import small_config

from jaxtrain.cli import main
from jaxtrain.commands.export import export_hf
from jaxtrain.trainer import Trainer

torch = pytest.importorskip(
    "torch",
    reason="torch (CPU) is the transformers reference; "
    "install the `test` extra to run parity tests.",
)
transformers = pytest.importorskip("transformers")

# Longer than the mistral-debug sliding window (32), so the window shows in the logits.
SEQ = 48
FAMILIES = {
    "llama": "llama_debug.py",
    "qwen2": "qwen2_debug.py",
    "qwen3": "qwen3_debug.py",
    "mistral": "mistral_debug.py",
}


def _trained(run_dir, config: str, **overrides) -> np.ndarray:
    """Trains 2 steps on one device; returns jaxtrain's logits for fixed tokens."""
    trainer = Trainer(
        small_config(run_dir, config, **overrides), devices=jax.devices()[:1], console=False
    )
    trainer.run(2)
    logits = np.asarray(trainer.model()(_tokens(trainer.spec.vocab_size)))
    trainer.close()
    return logits


def _tokens(vocab: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, vocab, (2, SEQ), dtype=np.int32)


def _hf_logits(folder, vocab: int) -> np.ndarray:
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        return model(torch.from_numpy(_tokens(vocab).astype(np.int64))).logits.numpy()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_exported_run_reproduces_jaxtrain_logits_in_transformers(tmp_path, family):
    ours = _trained(tmp_path / "run", FAMILIES[family])
    out = export_hf(tmp_path / "run", tmp_path / "hf")
    ref = _hf_logits(out, ours.shape[-1])
    assert ref.shape == ours.shape
    np.testing.assert_allclose(ref, ours, atol=1e-4, rtol=0)


def test_export_command_writes_weights_config_and_tokenizer(tmp_path, tiny_tokenizer, capsys):
    ours = _trained(tmp_path / "run", "llama_debug.py", **{"data.tokenizer": str(tiny_tokenizer)})
    run, out = str(tmp_path / "run"), tmp_path / "hf"
    capsys.readouterr()
    assert main(["export", "--run", run, "--step", "3", "--to", "hf", str(out)]) == 2
    assert "no checkpoint at step 3; saved steps: [2]" in capsys.readouterr().err
    assert not out.exists()

    assert main(["export", "--run", run, "--step", "2", "--to", "hf", str(out)]) == 0
    assert f"exported step 2 of {run}" in capsys.readouterr().out
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    # The weights are readable like the other files (safetensors writes them 0600).
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes["model.safetensors"] == modes["config.json"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer.eos_token == "<|endoftext|>"
    np.testing.assert_allclose(_hf_logits(out, ours.shape[-1]), ours, atol=1e-4, rtol=0)
