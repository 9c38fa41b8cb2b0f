"""jaxtrain.notebook: configs from files or presets, the parameter table, peeking at batches
without consuming them, sampling from a Trainer."""

import numpy as np
import pytest
from conftest import REPO

from jaxtrain import notebook as jt
from jaxtrain.errors import ConfigError
from jaxtrain.trainer import Trainer


def test_load_config_from_a_preset_or_a_file_with_both_override_styles():
    cfg = jt.load_config("qwen3-debug", {"train.steps": 7}, train__seq_len=64, optim__lr="1e-3")
    assert cfg.model.preset == "qwen3-debug" and cfg.model.qk_norm
    assert (cfg.run.name, cfg.train.steps, cfg.train.seq_len, cfg.optim.lr) == (
        "qwen3-debug",
        7,
        64,
        1e-3,
    )
    cfg = jt.load_config(REPO / "configs" / "demo.py", train__steps=5)
    assert cfg.run.name == "demo" and cfg.train.steps == 5
    with pytest.raises(ConfigError, match="train.stepz"):
        jt.load_config("llama-debug", train__stepz=3)
    with pytest.raises(ConfigError, match="does not exist"):
        jt.load_config("no-such-preset")


@pytest.fixture
def trainer(tmp_path, datatrove_corpus):
    cfg = jt.load_config(
        "llama-debug",
        {
            "run.dir": str(tmp_path / "run"),
            "data.kind": "datatrove",
            "data.paths": str(datatrove_corpus.folder),
            "data.tokenizer": str(datatrove_corpus.tokenizer),
            "train.seq_len": 32,
            "train.global_batch_size": 8,
            "train.steps": 2,
            "train.progress": False,
            "checkpoint.every": 0,
        },
    )
    trainer = Trainer(cfg, console=False)
    yield trainer
    trainer.close()


def test_param_table_peek_and_sample(trainer):
    table = jt.param_table(trainer)
    assert table.total == trainer.num_params
    embed = next(r for r in table.rows if r.path == "embed/embedding")
    assert embed.axes == ("vocab", "embed") and "fsdp" in embed.spec
    assert (
        embed.count == 512 * 64
        and str(table).splitlines()[-1].split()[-1] == f"{trainer.num_params:,}"
    )
    assert "<table>" in table._repr_html_()
    assert jt.param_table(trainer.model()).total == trainer.num_params

    peeked = jt.peek_batch(trainer, rows=2)
    assert len(peeked["text"]) == 2 and all(isinstance(t, str) and t for t in peeked["text"])
    assert peeked["inputs"].shape == (8, 32)
    # The training stream still starts with the peeked batch.
    np.testing.assert_array_equal(next(trainer.train_iter)["inputs"], peeked["inputs"])

    text = jt.sample(trainer, "the quick", max_new_tokens=3)
    assert isinstance(text, str)
