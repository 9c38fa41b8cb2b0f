"""Golden step-to-loss values of the tiny Llama on synthetic data: any change to the model, the
initialisation, the optimizer or the data order that moves the numbers shows up here.

Regenerate (after a deliberate change) with:  python tests/test_golden.py
"""

import json
import sys
from pathlib import Path

import jax
import numpy as np

from jaxtrain.config import loader as config_lib
from jaxtrain.trainer import Trainer

GOLDEN = Path(__file__).parent / "golden" / "llama_debug_synthetic.json"
REPO = Path(__file__).resolve().parent.parent


def losses(run_dir: Path) -> list[float]:
    cfg = config_lib.load_config(
        str(REPO / "configs" / "llama_debug.py"),
        {
            "run.dir": str(run_dir),
            "train.steps": 6,
            "train.seq_len": 32,
            "train.global_batch_size": 8,
            "optim.lr": 1e-2,
            "optim.warmup_steps": 2,
            "train.progress": False,
            "checkpoint.every": 0,
        },
    )
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    try:
        trainer.run()
        return [h["loss"] for h in trainer.history]
    finally:
        trainer.close()


def test_losses_match_golden_values(tmp_path):
    expected = json.loads(GOLDEN.read_text())["losses"]
    np.testing.assert_allclose(losses(tmp_path), expected, rtol=2e-4)


if __name__ == "__main__":
    import os
    import tempfile

    os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
    with tempfile.TemporaryDirectory() as tmp:
        values = losses(Path(tmp))
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(
        json.dumps({"config": "configs/llama_debug.py (see losses())", "losses": values}, indent=2)
        + "\n"
    )
    print(values, file=sys.stderr)
