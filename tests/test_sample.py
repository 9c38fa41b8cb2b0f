"""Sampling with the KV cache, from a model and from a trained run's checkpoint on the CLI."""

import jax
import jax.numpy as jnp
import numpy as np
from conftest import REPO

from jaxtrain.cli import main
from jaxtrain.config import loader as config_lib
from jaxtrain.models import ModelSpec, build_model
from jaxtrain.models.generation import generate
from jaxtrain.trainer import Trainer

SPEC = ModelSpec(
    vocab_size=101,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    max_seq_len=64,
)


def test_greedy_generation_equals_repeated_full_forward():
    model = build_model(SPEC, seed=3)
    prompt = [5, 17, 42]
    generated = generate(model, prompt, max_new_tokens=6)
    tokens = list(prompt)
    for _ in range(6):
        tokens.append(int(jnp.argmax(model(jnp.asarray([tokens]))[0, -1])))
    assert generated == tokens[3:]


def test_top_k_sampling_stays_in_the_top_k():
    model = build_model(SPEC, seed=3)
    prompt = [1, 2, 3]
    logits = np.asarray(model(jnp.asarray([prompt]))[0, -1])
    top3 = set(np.argsort(logits)[-3:].tolist())
    firsts = {
        generate(model, prompt, max_new_tokens=1, temperature=1.0, top_k=3, seed=s)[0]
        for s in range(12)
    }
    assert firsts <= top3
    assert len(firsts) > 1  # it samples, not argmax


def test_sample_command_continues_a_prompt_from_a_checkpoint(tmp_path, datatrove_corpus, capsys):
    cfg = config_lib.load_config(
        str(REPO / "configs" / "llama_debug.py"),
        {
            "run.dir": str(tmp_path / "run"),
            "data.kind": "datatrove",
            "data.paths": str(datatrove_corpus.folder),
            "data.tokenizer": str(datatrove_corpus.tokenizer),
            "train.seq_len": 32,
            "train.global_batch_size": 4,
            "train.steps": 2,
            "optim.warmup_steps": 1,
            "train.progress": False,
        },
    )
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    trainer.run()
    trainer.close()
    capsys.readouterr()
    code = main(
        [
            "sample",
            "--run",
            str(tmp_path / "run"),
            "--prompt",
            "the quick brown",
            "--max-new-tokens",
            "5",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("[step 2] the quick brown")
    assert len(out.strip()) > len("[step 2] the quick brown")
    assert main(["sample", "--run", str(tmp_path / "run"), "--prompt", "x", "--step", "7"]) == 2
    assert "no checkpoint at step 7" in capsys.readouterr().err
