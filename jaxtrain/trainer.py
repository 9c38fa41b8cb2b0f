"""The training loop: the same object drives the CLI and a notebook.

    trainer = Trainer(config)      # mesh, sharded state (fresh or resumed), data, checkpoints
    trainer.run(steps=100)         # train; returns the last metrics
    trainer.evaluate()             # validation loss / perplexity
    trainer.model()                # an nnx model holding the current parameters

Everything with side effects (logging, NaN guard, checkpoints, signals) lives here; the step
itself is the pure function in `jaxtrain.train.step`. Metrics are read one step late so the host
never waits for the device before dispatching the next step.
"""

from __future__ import annotations

import collections
import math
import time
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from ml_collections import ConfigDict

from jaxtrain import run as run_lib
from jaxtrain.checkpoint import init_from as init_from_lib
from jaxtrain.checkpoint import resume as resume_lib
from jaxtrain.checkpoint.manager import (
    Checkpointer,
    check_writable,
    committed_steps,
    describe_dtype_changes,
)
from jaxtrain.config import loader as config_lib
from jaxtrain.data import pipeline
from jaxtrain.data import resume as data_resume
from jaxtrain.errors import ConfigError, JaxtrainError
from jaxtrain.evaluation.during_training import HarnessDuringTraining
from jaxtrain.hardware import compile_cache
from jaxtrain.parallel import distributed, sharding
from jaxtrain.planning import memory as memory_plan
from jaxtrain.rundir import goodput, wandb_sink
from jaxtrain.rundir.disk_full import disk_full_error, is_disk_full
from jaxtrain.rundir.lock import RunLock
from jaxtrain.rundir.metrics import MetricsWriter
from jaxtrain.rundir.profile import StepProfiler
from jaxtrain.train import buffers, throughput
from jaxtrain.train import state as state_lib
from jaxtrain.train.hang_watch import HangWatch
from jaxtrain.train.step_timer import StepTimer
from jaxtrain.train.stop import StopRequests
from jaxtrain.train.straggler_watch import StragglerWatch

# Steps of metrics a Trainer keeps in memory (a long run would otherwise grow without bound).
HISTORY = 10_000


class TrainingError(JaxtrainError, RuntimeError):
    """Training cannot go on (e.g. a non-finite loss); the last checkpoint is kept intact."""


class StoppedBeforeTraining(Exception):
    """A signal came while the Trainer was being built: its message is the run's last line."""


class Trainer:
    """Owns the mesh, the train state, the data iterators, checkpoints and metric sinks."""

    def __init__(
        self,
        cfg: ConfigDict,
        *,
        devices: list[Any] | None = None,
        console: bool = True,
        stops: StopRequests | None = None,
    ):
        """`stops`: the stop requests whose handlers are already installed (the train command
        installs them before building, so that a signal while compiling stops the run before
        its first step: `StoppedBeforeTraining`); by default each `run` installs its own."""
        self.is_primary = jax.process_index() == 0
        self.stops = stops if stops is not None else StopRequests(self.log)
        # Taken once the config is validated, before anything reads or writes the run
        # directory, and held until close(); released here if building fails.
        self.run_lock = RunLock(config_lib.run_dir(cfg))
        try:
            self._build(cfg, devices, console)
        except BaseException:
            self.run_lock.release()
            raise

    def _build(self, cfg: ConfigDict, devices: list[Any] | None, console: bool) -> None:
        self.cfg = cfg
        self.console = console
        self.setup = run_lib.setup(cfg, devices)
        self.spec, self.mesh, self.rules = self.setup.spec, self.setup.mesh, self.setup.rules
        self.tx, self.schedule = self.setup.tx, self.setup.schedule
        self.num_micro, self.layout = self.setup.num_micro, self.setup.layout
        self.batch_sharding = self.setup.batch_sharding
        # Weights only: fp8 amax histories are state, not parameters.
        self.num_params = state_lib.count_params(
            buffers.weights(self.layout.graphdef, self.layout.abstract["params"])
        )
        self.run_dir = config_lib.run_dir(cfg)
        self._timer = StepTimer()
        self.harness = HarnessDuringTraining(cfg, self.setup, self.log, self._timer.interrupted)
        if self.is_primary:  # only process 0 writes run-directory files
            self.run_lock.acquire(self.log)

        self.train_iter = pipeline.make_train_iterator(
            cfg,
            self.spec.vocab_size,
            process_index=jax.process_index(),
            process_count=jax.process_count(),
        )
        self.make_eval_iter = pipeline.make_eval_batches(
            cfg,
            self.spec.vocab_size,
            process_index=jax.process_index(),
            process_count=jax.process_count(),
        )

        # A start that would overwrite a checkpoint is refused before the (long) compile too,
        # and so are initial weights that cannot be loaded.
        start = resume_lib.start_step(
            config_lib.checkpoint_dir(cfg),
            committed_steps(config_lib.checkpoint_dir(cfg)),
            cfg.checkpoint.resume,
            cfg.checkpoint.get("resume_step", -1),
        )
        if start is None and cfg.checkpoint.init_from:
            init_from_lib.check_source(cfg.checkpoint.init_from, self.spec)
        # A folder the checkpoints cannot be written to is refused before the compile too.
        check_writable(config_lib.checkpoint_dir(cfg))
        self._stop_if_signalled(start)
        # Compiled before anything is allocated or written, so a step that cannot fit is refused
        # with the figures instead of failing to allocate (see jaxtrain/planning/memory.py).
        self._compile_functions()
        self._stop_if_signalled(start)  # a signal while compiling: no restore to wait for
        self.checkpointer = Checkpointer(
            config_lib.checkpoint_dir(cfg),
            keep=cfg.checkpoint.keep,
            keep_every=cfg.checkpoint.keep_every,
            compression=cfg.checkpoint.get("compression", "none"),
        )
        self._compile_s: float | None = self.compile_s  # reported with the first step's metrics
        self.state = self._restore_or_init()
        # Tracked on the host so that asking for it never waits for the device.
        self._host_step = int(jax.device_get(self.state["step"]))
        self.throughput = throughput.for_run(
            cfg, self.spec, self.setup.backend.bf16_products, self.mesh.devices.size
        )
        self.metrics = MetricsWriter(
            self.run_dir,
            cfg.train.steps,
            is_primary=self.is_primary,
            progress=cfg.train.progress,
            console=console,
            tracker=wandb_sink.opener(
                cfg, self.run_dir, self._restored_step, self.num_params, self.throughput, self.mesh
            ),
        )
        # The recent steps' metrics, for notebooks and tests; metrics.jsonl keeps every step.
        self.history: collections.deque[dict[str, Any]] = collections.deque(maxlen=HISTORY)
        self._first_step = self._host_step  # where this Trainer started: nothing trained yet
        self.events = goodput.EventLog(self.run_dir, enabled=self.is_primary)
        self.profiler = StepProfiler(
            self.run_dir,
            cfg.train.profile_start,
            cfg.train.profile_steps,
            python=cfg.train.profile_python,
            program=(lambda: self.compiled_step.as_text()) if self.is_primary else None,
        )
        self.hang_watch = HangWatch(cfg.train.hang_timeout, self.checkpointer.directory)
        self.stragglers = StragglerWatch(
            cfg.train.straggler_every,
            cfg.train.straggler_patience,
            cfg.train.straggler_fraction,
            self.log,
        )
        self._saved_step: int | None = None
        self._last_save_time = time.monotonic()
        distributed.report_checkpoints_in(self.checkpointer.directory)

    # ----------------------------------------------------------------------------- setup
    def _stop_if_signalled(self, start: int | None) -> None:
        """StoppedBeforeTraining when a signal came while building (one process; with several,
        the stop is agreed at the start of `run`)."""
        if self.stops.signal is not None and not self.stops.coordinated:
            raise StoppedBeforeTraining(
                self.stops.before_training(start, config_lib.checkpoint_dir(self.cfg))
            )

    def _restore_or_init(self) -> dict[str, Any]:
        self._restored_step: int | None = None
        # Orbax's own list of complete steps decides (checked against the disk in _build).
        latest = resume_lib.start_step(
            self.checkpointer.directory,
            self.checkpointer.all_steps(),
            self.cfg.checkpoint.resume,
            self.cfg.checkpoint.get("resume_step", -1),
        )
        for path in self.checkpointer.unfinished:
            self.log(
                f"warning: ignoring {path}: a save that never completed (the process "
                "writing it stopped); "
                + (
                    f"resuming from step {latest}, the latest complete checkpoint"
                    if latest is not None
                    else "no complete checkpoint to resume from"
                )
            )
        init_from = self.cfg.checkpoint.init_from
        if latest is None and init_from:
            with self.setup.mesh_context():
                params, report = init_from_lib.load_params(
                    init_from, self.cfg.checkpoint.init_step, self.spec, self.layout
                )
                self.log(report)
                return init_from_lib.initial_state(params, self.tx, self.layout)
        if latest is not None and init_from:
            self.log(f"checkpoint.init_from ignored: the run resumes from its own step {latest}")
        if latest is None:
            with self.setup.mesh_context():
                return state_lib.init_state(self.spec, self.tx, self.layout, self.cfg.run.seed)
        data_changes = self._data_changes(latest)
        self._status(f"restoring checkpoint step {latest} from {self.checkpointer.directory}...")
        restore_start = time.perf_counter()
        cast = self.checkpointer.dtype_changes(latest, self.layout.abstract)
        state, data_state, _ = self.checkpointer.restore(latest, self.layout.abstract)
        self._restored_step = latest
        if cast:
            self.log(
                f"checkpoint step {latest} holds other dtypes than this run "
                f"(model.param_dtype={self.cfg.model.param_dtype}); cast after checking "
                f"their checksums: {describe_dtype_changes(cast)}"
            )
        if data_changes:
            self.log(
                f"data.reset=true: the data settings changed since checkpoint step "
                f"{latest} ({'; '.join(data_changes)}); reading the new data from its "
                "first batch, with the model and optimizer state of that step"
            )
        elif data_state:
            self.train_iter.set_state(data_state)
        self.log(
            f"resumed from step {latest} in {self.checkpointer.directory} "
            f"({time.perf_counter() - restore_start:.1f}s)"
        )
        return state

    def _data_changes(self, step: int) -> list[str]:
        """The batch-order settings changed since checkpoint `step`: ConfigError unless
        data.reset allows starting the new data afresh (see jaxtrain.data.resume)."""
        try:
            saved = self.checkpointer.restore_config(step)
        except Exception:  # unreadable: the restore that follows reports the damage
            return []
        changes = data_resume.data_changes(saved, self.cfg)
        if changes and not self.cfg.data.reset:
            raise ConfigError(data_resume.refusal(step, self.checkpointer.directory, changes))
        if self.cfg.data.reset and not changes:
            self.log(
                f"data.reset=true ignored: the data settings are those of checkpoint step "
                f"{step}, so the data stream continues where it stopped"
            )
        return changes

    def _compile_functions(self) -> None:
        """Compiles the run's train step (`RunSetup.train_step`), checking its memory.

        Sets `compiled_step` (called as `compiled_step(state, batch)`, the state donated), the
        `lowered_step` it came from, `compile_s`, `compile_cached` (loaded from the persistent
        compilation cache that `backend.compile_cache` installs) and `memory` (per-device
        bytes). The eval step (`RunSetup.eval_step`) compiles on its first call.
        """
        cfg = self.cfg
        batch = self.setup.abstract_batch()
        axis_sizes = self.setup.axis_sizes
        check = cfg.train.get("check_memory", True)
        capacity, source = memory_plan.device_capacity(list(self.mesh.devices.flat))
        self.memory = memory_plan.plan_state(self.layout.abstract, batch, axis_sizes)
        if check:  # the state alone may already be too large: say so without compiling
            memory_plan.check_fits(self.memory, capacity, source, cfg, axis_sizes)
        self._status(self.setup.backend.describe())
        cache_folder = compile_cache.install(cfg.backend.get("compile_cache", ""))
        self._status("compiling train step...")
        start = time.perf_counter()
        with compile_cache.watch(cache_folder) as cached:
            self.lowered_step, self.compiled_step = self.setup.compile_train_step()
        self.compile_s = time.perf_counter() - start
        self.compile_cached = cached.hits > 0
        self._status(compile_cache.outcome_line("train step", self.compile_s, cached, cache_folder))
        for line in compile_cache.mend(cache_folder, cached):
            self.log(line)
        self.memory = memory_plan.add_compiled(self.memory, self.compiled_step)
        if check:
            memory_plan.check_fits(self.memory, capacity, source, cfg, axis_sizes)

    # ----------------------------------------------------------------------------- helpers
    def _status(self, message: str) -> None:
        """What a long operation is doing, on the console only (quiet when console=False)."""
        if self.console and jax.process_index() == 0:
            print(message, flush=True)

    def log(self, message: str) -> None:
        """A line of the run's log (what it trains, restores, skips), printed by process 0."""
        if self.is_primary:
            print(message, flush=True)

    @property
    def step(self) -> int:
        """Optimizer steps taken so far (dispatched; the device may still be computing)."""
        return self._host_step

    def model(self) -> nnx.Module:
        """An nnx model viewing the current parameters (for sampling or inspection)."""
        return nnx.merge(self.layout.graphdef, self.state["params"])

    # ----------------------------------------------------------------------------- public
    def evaluate(self) -> dict[str, float]:
        """Mean validation loss and perplexity over the fixed validation batches."""
        if self.make_eval_iter is None:
            return {}
        ce_sum, tokens = 0.0, 0.0
        with self.setup.mesh_context():
            for local in self.make_eval_iter():
                batch = self.setup.global_batch(local)
                out = jax.device_get(self.setup.eval_step(self.state["params"], batch))
                ce_sum += float(out["ce_sum"])
                tokens += float(out["tokens"])
        loss = ce_sum / max(tokens, 1.0)
        return {"val_loss": loss, "val_ppl": math.exp(min(loss, 50.0))}

    @property
    def aborted(self) -> bool:
        """Whether a second signal aborted the last `run` (nothing is waited for or saved)."""
        return self.stops.aborted

    def save(self, wait: bool = False) -> None:
        """Writes a checkpoint of the current step (asynchronously unless `wait`).

        Only call it once the current step's metrics have been checked (`_after_step`): a
        checkpoint is never written from a step whose loss or gradient norm is not finite.
        """
        if self.step in (self._saved_step, self._restored_step):
            if wait:
                self.checkpointer.wait()
            return
        self._saved_step = self.step
        self._last_save_time = time.monotonic()
        data_state = self.train_iter.get_state()
        with self.events.timing("checkpoint"):
            self.checkpointer.save(self.step, self.state, data_state, self.cfg.to_dict())
            if wait:
                self.checkpointer.wait()
        self._timer.interrupted()

    def _write_run_config(self) -> None:
        if self.is_primary:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            # The directory actually used, so the file says where the run lives.
            saved = ConfigDict(self.cfg.to_dict())
            saved.run.dir = str(self.run_dir)
            saved.backend.used = self.setup.backend.to_dict()  # what the step was compiled for
            try:
                config_lib.saved_config_path(self.run_dir).write_text(
                    saved.to_json_best_effort(indent=2)
                )
            except OSError as e:
                if is_disk_full(e):
                    raise disk_full_error(self.run_dir, "writing config.json") from e
                raise

    def _dispatch(self) -> tuple[int, Any]:
        """Starts the next step on the devices; returns its number and its (future) metrics."""
        with self.events.timing("data_wait", also=self.stragglers.waited_for_data):
            batch = self.setup.global_batch(next(self.train_iter))
        self._timer.dispatched(self._host_step + 1)  # before queueing: see StepTimer
        with self.profiler.step(self._host_step + 1):
            self.state, device_metrics = self.compiled_step(self.state, batch)
        self._host_step += 1
        return self._host_step, device_metrics

    def run(self, steps: int | None = None) -> dict[str, Any]:
        """Trains `steps` more steps (default: up to train.steps); returns the last metrics.

        Metrics are read one step behind the dispatch, so the host never waits for the device
        before queueing the next step. A step that is checkpointed (every `checkpoint.every`, or
        the one every process agreed to stop after) is read first: a checkpoint is written only
        from a step whose loss and gradient norm are finite.
        """
        cfg = self.cfg
        target = cfg.train.steps if steps is None else min(self.step + steps, cfg.train.steps)
        if self.step >= target:
            self.log(f"nothing to do: at step {self.step}, target {target}")
            return self.history[-1] if self.history else {}
        last: dict[str, Any] = {}
        with self.stops.handling(), self.setup.mesh_context(), self.hang_watch:
            self.stops.start(self.step)
            if self.stops.requested and self.step == self._first_step:
                # Stopped before this Trainer's first step: there is nothing new to save.
                self.log(
                    self.stops.before_training(self._restored_step, self.checkpointer.directory)
                )
                return last
            self._write_run_config()
            self.log(
                f"training {self.spec.family} model, {self.num_params:,} parameters, "
                f"mesh {sharding.mesh_shape(self.mesh)}, steps {self.step} -> {target}; run "
                f"directory {self.run_dir}"
            )
            self._timer.started()
            self.events.ready(self.step, self.compile_s, self.compile_cached)
            self.stops.training = True
            try:
                last = self._train_until(target)
            finally:
                self.stops.training = False
                self.events.steps_done(self.step)
            if self.stops.requested:
                self.save(wait=True)
                self.log(
                    f"stopped by {self.stops.reason} at step {self.step}: checkpoint step "
                    f"{self.step} is complete on disk in {self.checkpointer.directory}; run "
                    "the same command to resume."
                )
            elif self.step >= cfg.train.steps or cfg.checkpoint.every:
                self.save(wait=True)
        return last

    def _train_until(self, target: int) -> dict[str, Any]:
        """Dispatches steps up to `target` or a stop, each read one step late; returns the last
        metrics read."""
        pending: tuple[int, Any] | None = None
        last: dict[str, Any] = {}
        while not self.stops.requested and (self.step < target or pending is not None):
            current = self._dispatch() if self.step < target else None
            if pending is not None:
                last = self._after_step(*pending, target)
            pending = current
            if current is None:
                continue
            step_no = current[0]
            stop = self.stops.stop_after(step_no)
            save = not stop and self._save_due(step_no) and step_no < self.cfg.train.steps
            if stop or save or self._evaluation_due(step_no) or self.stragglers.due(step_no):
                # Read this step's metrics before its state is saved, evaluated or donated:
                # read a step late, validation would see the next step's parameters (and the
                # hosts' comparison would time its probe behind the next step).
                last, pending = self._after_step(*current, target), None
                if save:
                    self.save()  # copies to host before returning: donation is safe
        if pending is not None:
            last = self._after_step(*pending, target)
        return last

    @property
    def stopped_by_signal(self) -> bool:
        """Whether the last `run` ended early on SIGTERM/SIGINT (after saving a checkpoint, or
        before its first step)."""
        return self.stops.requested

    def _evaluation_due(self, step_no: int) -> bool:
        """Whether validation or harness tasks run on this step's parameters."""
        every = self.cfg.train.eval_every
        return bool(every) and step_no % every == 0 or self.harness.due(step_no)

    def _save_due(self, step_no: int) -> bool:
        """Whether to checkpoint after this step: every N steps, or N minutes since the last."""
        every, minutes = self.cfg.checkpoint.every, self.cfg.checkpoint.every_minutes
        due = bool(every) and step_no % every == 0
        if minutes > 0 and not due:
            due = time.monotonic() - self._last_save_time >= 60.0 * minutes
            if jax.process_count() > 1:
                # Clocks differ between hosts; every process must save the same steps.
                due = bool(multihost_utils.broadcast_one_to_all(np.asarray(due)))
        return due

    def _check_finite(self, step_no: int, values: dict[str, Any]) -> None:
        """TrainingError when the step's loss or gradient norm is not finite."""
        bad = {
            k: float(values[k])
            for k in ("loss", "grad_norm")
            if k in values and not math.isfinite(float(values[k]))
        }
        if not bad:
            return
        self.checkpointer.wait()  # a pending save of an earlier (finite) step completes
        latest = self.checkpointer.latest_step()
        kept = (
            f"The last checkpoint, step {latest} in {self.checkpointer.directory}, is "
            "finite and intact: a rerun resumes from it"
            if latest is not None
            else "No checkpoint was written yet"
        )
        what = " and ".join(f"{k} is {v}" for k, v in bad.items())
        raise TrainingError(
            f"{what} at step {step_no}; stopping without saving this state. {kept}. Lower "
            "optim.lr (or its warmup), set optim.clip_grad_norm, check the data for "
            "out-of-range tokens, or use float32 compute."
        )

    def _after_step(self, step_no: int, device_metrics: Any, target: int) -> dict[str, Any]:
        """Reads a dispatched step's metrics (waiting for it), checks, logs and evaluates."""
        cfg = self.cfg
        values = self._timer.read(step_no, device_metrics)
        self.hang_watch.completed(step_no)
        self._check_finite(step_no, values)
        record: dict[str, Any] = {k: float(v) for k, v in values.items()}
        record["ppl"] = math.exp(min(record["loss"], 50.0))
        log_now = step_no % max(cfg.train.log_every, 1) == 0 or step_no == target or step_no == 1
        if self._compile_s is not None:
            # The first step is reported apart: its wall time is mostly compiling.
            record["compile_s"], self._compile_s, log_now = self._compile_s, None, True
        if log_now and (window := self._timer.take()):
            record.update(self.throughput.figures(window))
        if cfg.train.eval_every and step_no % cfg.train.eval_every == 0:
            with self.events.timing("eval"):
                record.update(self.evaluate())
            self._timer.interrupted()
        if self.harness.due(step_no):
            with self.events.timing("eval"):  # goodput counts harness tasks as evaluation
                record.update(self.harness(step_no, self.state["params"]))
        if self.stragglers.due(step_no):
            record.update(self._compare_hosts(step_no))
        if log_now or any(k.startswith(("val_", "harness/", "straggler/")) for k in record):
            self.metrics.write(step_no, record)
            self.events.steps_done(step_no)
        self.history.append({"step": step_no, **record})
        return record

    def _compare_hosts(self, step_no: int) -> dict[str, float]:
        """The hosts' figures at this step (`StragglerWatch.check`, a collective); the window
        of the step timer reopens after it, since it is host work."""
        figures = self.stragglers.check(step_no)
        self._timer.interrupted()
        return figures

    def close(self) -> None:
        """Flushes metrics, waits for checkpoints and releases the run directory."""
        try:
            self.profiler.stop()
            self.checkpointer.close()
            self.events.exit(self.step)
        finally:  # after a failed save too: close the metric files, free the run directory
            try:
                self.metrics.close()
            finally:
                self.run_lock.release()
