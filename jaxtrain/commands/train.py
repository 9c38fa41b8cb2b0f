"""`python -m jaxtrain train --config FILE` (or without `train`: it is the default command).

Trains from a config, resuming from the run's latest checkpoint. With several processes, each is
started with the same command line; the job comes from the options below or from a launcher's
environment (`jaxtrain.parallel.distributed`). `train(cfg)` is the whole run around the
`Trainer` loop: signals from the start, data preparation, a finished run left as it is, the final
validation and the sample.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import jax
import numpy as np
from absl import flags
from jax.experimental import multihost_utils
from ml_collections import ConfigDict

from jaxtrain.commands.options import add_config_argument, add_foreign_options, load_run_config
from jaxtrain.config import loader as config_lib
from jaxtrain.data.prepare import prepare_data
from jaxtrain.errors import ConfigError
from jaxtrain.models.generation import print_sample
from jaxtrain.parallel import distributed
from jaxtrain.rundir.disk_full import quiet_writer_logs
from jaxtrain.rundir.metrics import read_jsonl
from jaxtrain.rundir.step_folders import latest_committed_step
from jaxtrain.train.stop import StopRequests
from jaxtrain.trainer import StoppedBeforeTraining, Trainer

# A job script sets this to tell a run stopped early (requeue it) from a finished one (done);
# 75 is EX_TEMPFAIL, "try again later". Unset, a stopped run exits 0 like a finished one.
STOPPED_EXIT_ENV = "JAXTRAIN_STOPPED_EXIT_CODE"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `train`: the config, a foreign file's options and the process layout."""
    add_config_argument(parser, required=True)
    add_foreign_options(parser)
    group = parser.add_argument_group(
        "several processes (without these, a launcher's environment is read: Slurm, torchrun, "
        "NNODES/NODE_RANK, OpenMPI; docs/parallelism.md)"
    )
    group.add_argument(
        "--coordinator",
        default=None,
        metavar="HOST:PORT",
        help="process 0's address (env JAXTRAIN_COORDINATOR)",
    )
    group.add_argument(
        "--num-processes",
        type=int,
        default=None,
        help="processes in the job (env JAXTRAIN_NUM_PROCESSES)",
    )
    group.add_argument(
        "--process-id",
        type=int,
        default=None,
        help="this process, 0..N-1 (env JAXTRAIN_PROCESS_ID)",
    )
    group.add_argument(
        "--init-timeout",
        type=int,
        default=None,
        metavar="SECONDS",
        help="how long to wait for every process (env JAXTRAIN_INIT_TIMEOUT)",
    )


def join_job(args: argparse.Namespace) -> ConfigDict:
    """Reads the run's config and joins the job's processes (the options of `add_arguments`);
    `train` and `preflight` start alike, so that preflight checks the hosts training gets."""
    cfg = load_run_config(args.config, args)
    # grain's multiprocessing prefetch reads absl flags; mark them parsed.
    flags.FLAGS(sys.argv[:1], known_only=True)
    distributed.initialize_from_env(
        args.init_timeout,
        coordinator=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
    )
    return cfg


def handle(args: argparse.Namespace) -> int:
    """Reads the config, joins the job's processes and trains; returns the exit status."""
    cfg = join_job(args)
    stopped_status = _stopped_exit_code()
    train(cfg)
    distributed.stop_watching()  # the work is done: the peers may see this process leave
    latest = latest_committed_step(config_lib.checkpoint_dir(cfg))
    # Every run that reaches train.steps saves it; anything less was stopped by a signal.
    return stopped_status if latest is None or latest < cfg.train.steps else 0


def _stopped_exit_code() -> int:
    """The exit status of a run stopped before train.steps (`JAXTRAIN_STOPPED_EXIT_CODE`)."""
    value = os.environ.get(STOPPED_EXIT_ENV, "").strip() or "0"
    if not value.isdigit() or not 0 <= int(value) <= 255:
        raise ConfigError(
            f"JAXTRAIN_STOPPED_EXIT_CODE={value!r} is not an exit status: set it to 0..255 (75, "
            "EX_TEMPFAIL, is what tools/launch_slurm.sbatch uses), or unset it."
        )
    return int(value)


def _final_eval_missing(trainer: Trainer) -> bool:
    """Whether metrics.jsonl lacks the validation of the last step (a run stopped between its
    final checkpoint and its final evaluation). Process 0 reads the file and decides for all."""
    missing = False
    if trainer.make_eval_iter is not None and trainer.is_primary:
        path = trainer.run_dir / "metrics.jsonl"
        records = read_jsonl(path) if path.is_file() else []
        missing = not any(r.get("step") == trainer.step and "val_loss" in r for r in records)
    if jax.process_count() > 1:
        missing = bool(multihost_utils.broadcast_one_to_all(np.asarray(missing)))
    return missing


def _finished(trainer: Trainer) -> dict[str, Any]:
    """A rerun of a finished run: writes nothing (unless its final validation never was)."""
    final_eval = trainer.evaluate() if _final_eval_missing(trainer) else {}
    if final_eval:
        trainer.metrics.write(trainer.step, final_eval)
    trainer.log(
        f"run {trainer.run_dir} is finished at step {trainer.step} "
        f"(train.steps={trainer.cfg.train.steps}); its checkpoints are in "
        f"{trainer.checkpointer.directory}. Nothing to train"
        + (
            "; the final validation, missing from metrics.jsonl, was recorded."
            if final_eval
            else ", nothing changed."
        )
    )
    return final_eval


def _log(message: str) -> None:
    """A line of the run's log, printed by process 0."""
    if jax.process_index() == 0:
        print(message, flush=True)


def train(cfg: ConfigDict) -> dict[str, Any]:
    """Trains to train.steps (resuming if possible) and returns the final metrics.

    SIGTERM and SIGINT are handled from here on, before the data is prepared or the step is
    compiled (`jaxtrain.train.stop`): a signal before the first step stops the run with one
    line and nothing trained; during training it stops after a checkpointed step.
    """
    quiet_writer_logs()  # a full disk is reported once, as one line, not by each writer thread
    stops = StopRequests(_log)
    with stops.handling():
        if jax.process_index() == 0:
            prepare_data(cfg, progress=print)  # data.prepare: build missing demo shards first
        if jax.process_count() > 1:  # the others wait until the shards exist
            multihost_utils.sync_global_devices("jaxtrain prepare_data")
        try:
            trainer = Trainer(cfg, stops=stops)
        except StoppedBeforeTraining as stopped:
            _log(str(stopped))
            return {}
        try:
            return _train(trainer)
        finally:
            if not trainer.aborted:
                trainer.close()
            else:  # aborted: no waiting for saves, but the run directory is free again
                trainer.run_lock.release()


def _train(trainer: Trainer) -> dict[str, Any]:
    """`train` once the Trainer is built: the steps, the final validation and the sample."""
    cfg = trainer.cfg
    if trainer.step >= cfg.train.steps:
        return _finished(trainer)
    last = trainer.run()
    if trainer.stopped_by_signal:
        return last  # preempted: the grace period is for the checkpoint, not evaluation
    already = trainer.history and "val_loss" in trainer.history[-1]
    final_eval = {} if already else trainer.evaluate()
    if final_eval:
        trainer.metrics.write(trainer.step, final_eval)
        last = {**last, **final_eval}
    if cfg.sample.prompt and trainer.is_primary:
        if trainer.stops.signal is not None:  # came after the last step: the run is complete
            trainer.log(
                f"stopped by {trainer.stops.reason} after the last step: the run is complete "
                f"(checkpoint step {trainer.step} in {trainer.checkpointer.directory}); the "
                "sample was skipped."
            )
        else:
            print_sample(trainer.model(), cfg, trainer.step)
    return last
