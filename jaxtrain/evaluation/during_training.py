"""lm-evaluation-harness tasks on the live parameters, every `eval.harness_every` steps.

The trainer calls `HarnessDuringTraining(step, params)` after each step it reads; on a due
step it runs the tasks of `eval.harness_tasks` on the current parameters (in their shardings,
on the run's mesh; every process runs every request) and returns the metrics to log with the
step: `harness/<task>/<metric>` and `<metric>_stderr`, plus `harness/seconds`, the time the
evaluation took (training is paused meanwhile). A task that fails (its data not reachable
offline, a broken YAML) is reported once and left out of later evaluations; an evaluation never
stops training.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ml_collections import ConfigDict

from jaxtrain.data.tokenizer_check import check_tokenizer_folder
from jaxtrain.errors import ConfigError
from jaxtrain.evaluation import tasks as tasks_lib
from jaxtrain.evaluation.scoring import Scorer
from jaxtrain.run import RunSetup


class HarnessDuringTraining:
    """Called after each step: the harness metrics of a due step, {} otherwise."""

    def __init__(
        self,
        cfg: ConfigDict,
        setup: RunSetup,
        log: Callable[[str], None],
        paused: Callable[[], None] = lambda: None,
    ):
        """`log` prints a line of the run's log; `paused` tells the step timer that the host
        was busy (the evaluation's time is not a training step's)."""
        settings = cfg.get("eval", ConfigDict())
        specs = tasks_lib.parse_task_list(settings.get("harness_tasks", ""))
        self.every = int(settings.get("harness_every", 0)) if specs else 0
        self.log, self.paused = log, paused
        if not self.every:
            return
        tasks_lib.import_harness("eval.harness_tasks")
        if not cfg.data.tokenizer:
            raise ConfigError(
                "eval.harness_tasks needs the run's tokenizer to encode the tasks' text, but "
                "data.tokenizer is empty; set data.tokenizer to a tokenizer folder."
            )
        check_tokenizer_folder(
            cfg.data.tokenizer, "data.tokenizer", "Point it at a folder holding tokenizer.json."
        )
        self.tasks = tasks_lib.resolve_tasks(specs)
        self.limit = int(settings.get("harness_limit", 0)) or None
        fewshot = int(settings.get("harness_fewshot", -1))
        self.fewshot = fewshot if fewshot >= 0 else None
        self._setup, self._tokenizer_dir = setup, cfg.data.tokenizer
        self._lm: Any = None  # built at the first evaluation, then reused: one compile

    def due(self, step: int) -> bool:
        """Whether `step` is an evaluation step with tasks left to run."""
        return bool(self.every) and step % self.every == 0 and bool(self.tasks)

    def __call__(self, step: int, params: Any) -> dict[str, float]:
        """The metrics of the tasks on `params` at a due step ({} otherwise)."""
        if not self.due(step):
            return {}
        start = time.perf_counter()
        lm = self._model(params)
        results, failed = tasks_lib.run_tasks(
            lm, self.tasks, limit=self.limit, fewshot=self.fewshot, report=self.log
        )
        self.tasks = [t for t in self.tasks if tasks_lib.task_label(t) not in failed]
        metrics = tasks_lib.flat_metrics(results)
        seconds = time.perf_counter() - start
        metrics[f"{tasks_lib.PREFIX}/seconds"] = seconds
        self.log(f"harness at step {step} ({seconds:.1f}s): {summary(metrics)}")
        self.paused()
        return metrics

    def _model(self, params: Any) -> Any:
        from jaxtrain.evaluation.harness_model import JaxtrainLM
        from jaxtrain.models.generation import load_tokenizer

        if self._lm is None:
            s = self._setup
            scorer = Scorer(s.layout.graphdef, params, s.spec, setup=s)
            self._lm = JaxtrainLM(scorer, load_tokenizer(self._tokenizer_dir))
        self._lm.scorer.params = params
        return self._lm


def summary(metrics: dict[str, float]) -> str:
    """`task metric=value ...` for the metrics without their stderr (one log line)."""
    parts = []
    for key, value in metrics.items():
        _, _, rest = key.partition("/")
        if "/" in rest and "_stderr" not in rest:
            task, metric = rest.split("/", 1)
            parts.append(f"{task} {metric}={value:.4g}")
    return ", ".join(parts) or "no task gave results"
