"""Weights & Biases as one more metric sink (`metrics.wandb_project`; `pip install wandb`).

Every record the run writes to metrics.jsonl (training lines, validation) is logged to a wandb
run at the same step under the same keys, with the resolved config and the run's figures
(parameters, MFU peak, mesh) as its config.

One wandb run per run directory: its id is kept in `<run dir>/wandb_id`, so a resumed run
continues the same wandb run. A run resumed from checkpoint step C recomputes the steps after
C, so it opens the wandb run with `resume_from="<id>?_step=C"` (wandb's rewind): the server
drops what the run logged after C and the recomputed steps take their place instead of being
logged twice. Offline (`WANDB_MODE=offline`), each start writes a run folder of its own under
`<wandb dir>/wandb/`, all with the same id, the later ones holding the rewind point; `wandb
sync` uploads them in order and the server applies it then. Where the server refuses a rewind
(not enabled for the account, or the run never reached it), the run is resumed with
`resume="allow"` instead: wandb then ignores steps at or below the last one it holds, so
nothing is duplicated, but the steps lost after C keep their first values.

Nothing here may slow or stop training: `wandb.init`, each `log` and `finish` run on a
background thread fed by a queue, any failure of wandb (not installed, no network, a refused
login) is one warning, after which the run goes on without it; metrics.jsonl keeps every record.
"""

from __future__ import annotations

import queue
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ID_FILE = "wandb_id"
# Records held while wandb is slow; a service that falls further behind loses the newest ones.
QUEUE_RECORDS = 100_000
# Seconds `close` waits for wandb to finish uploading before leaving it to `wandb sync`.
CLOSE_TIMEOUT_S = 120.0


def run_id(run_dir: Path) -> tuple[str, bool]:
    """(the wandb run id of this run directory, whether it existed before): read from
    `wandb_id`, or a new one written there."""
    path = run_dir / ID_FILE
    if path.is_file() and (existing := path.read_text().strip()):
        return existing, True
    new = uuid.uuid4().hex[:8]
    run_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(new + "\n")
    return new, False


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


class WandbSink:
    """A metric sink that logs to wandb from a background thread."""

    def __init__(
        self,
        run_dir: Path,
        settings: dict[str, Any],
        config: dict[str, Any],
        resumed_step: int | None,
        warn: Callable[[str], None] = _warn,
    ):
        """`settings`: the config's `metrics` section; `config`: what the wandb run's config
        shows; `resumed_step`: the checkpoint step this start resumed from (None: step 0)."""
        self._warn = warn
        self.id, existed = run_id(run_dir)
        tags = [t.strip() for t in str(settings.get("wandb_tags", "")).split(",") if t.strip()]
        self._init = dict(
            project=settings["wandb_project"],
            entity=settings.get("wandb_entity") or None,
            name=settings.get("wandb_name") or None,
            tags=tags or None,
            group=settings.get("wandb_group") or None,
            mode=settings.get("wandb_mode") or None,
            dir=str(settings.get("wandb_dir") or run_dir),
            config=config,
            id=self.id,
        )
        # A start after an earlier one recomputes the steps after its checkpoint: rewind there.
        self._rewind_to = (resumed_step or 0) if existed else None
        self._queue: queue.Queue[tuple[int, dict[str, Any]] | None] = queue.Queue(QUEUE_RECORDS)
        self._failed = False
        self._dropped = False
        self._thread = threading.Thread(target=self._work, name="jaxtrain-wandb", daemon=True)
        self._thread.start()

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        """Queues one record; never waits."""
        if self._failed:
            return
        try:
            self._queue.put_nowait((step, dict(metrics)))
        except queue.Full:
            if not self._dropped:
                self._dropped = True
                self._warn(
                    f"wandb has fallen {QUEUE_RECORDS} records behind; newer records are not "
                    "sent to it (metrics.jsonl records everything)"
                )

    def close(self) -> None:
        """Finishes the wandb run, waiting at most CLOSE_TIMEOUT_S for it."""
        self._queue.put(None)
        self._thread.join(CLOSE_TIMEOUT_S)
        if self._thread.is_alive():
            self._warn(
                f"wandb did not finish within {CLOSE_TIMEOUT_S:.0f}s; what it has not uploaded "
                f"is under {self._init['dir']}/wandb (`wandb sync` uploads it)"
            )

    # ------------------------------------------------------------------ background thread
    def _work(self) -> None:
        run = self._open()
        while (item := self._queue.get()) is not None:
            if run is None:
                continue  # wandb failed: drain the queue so that close() returns
            step, metrics = item
            try:
                run.log(metrics, step=step)
            except Exception as e:  # a tracker never fails the run
                self._fail(e)
                run = None
        if run is not None:
            try:
                run.finish()
            except Exception as e:
                self._fail(e)

    def _open(self) -> Any:
        try:
            import wandb

            Path(self._init["dir"]).mkdir(parents=True, exist_ok=True)
            settings = wandb.Settings(console="off")  # the run's console stays ours
            if self._rewind_to is None:
                return wandb.init(**self._init, settings=settings)
            try:
                return wandb.init(
                    **self._init,
                    settings=settings,
                    resume_from=f"{self.id}?_step={self._rewind_to}",
                )
            except Exception:  # rewind refused: continue the run without it
                return wandb.init(**self._init, settings=settings, resume="allow")
        except Exception as e:
            self._fail(e)
            return None

    def _fail(self, error: Exception) -> None:
        self._failed = True
        reason = (str(error).strip().splitlines() or [""])[0]  # one line: wandb's run on
        self._warn(
            f"Weights & Biases is unavailable ({type(error).__name__}: {reason}); the run goes "
            "on without it, metrics.jsonl records everything"
        )


def opener(
    cfg: Any, run_dir: Path, resumed_step: int | None, num_params: int, throughput: Any, mesh: Any
) -> Callable[[], WandbSink] | None:
    """What opens the wandb sink at the run's first record, or None without a wandb project.
    The wandb run's config is the resolved config plus the run's figures: parameters, the MFU
    peak (`jaxtrain.train.throughput.Throughput`) and the mesh's axis sizes."""
    settings = dict(cfg.get("metrics", {}))
    if not settings.get("wandb_project"):
        return None
    figures = {
        "parameters": num_params,
        "peak_flops_per_s": throughput.peak_flops,
        "peak_source": throughput.peak_source,
        "flops_per_token": throughput.flops_per_token,
        "mesh": {name: int(size) for name, size in mesh.shape.items()},
        "devices": int(mesh.devices.size),
    }
    config = {**cfg.to_dict(), "figures": figures}
    return lambda: WandbSink(run_dir, settings, config, resumed_step)
