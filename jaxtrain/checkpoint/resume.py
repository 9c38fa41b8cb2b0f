"""Which checkpoint a run starts from: one rule for every config, whatever stack it came from.

- `checkpoint.resume=true` (the default): the latest complete checkpoint in the checkpoint
  folder (or the one `checkpoint.resume_step` names); an empty folder starts the run afresh.
- `checkpoint.resume=false`: a fresh start, in a folder that holds no checkpoint yet.

A checkpoint is never overwritten. Starting over in a folder that already holds checkpoints, or
resuming from a step older than the folder's latest, would write over them at the first
overlapping step; both are refused before anything is built, naming the folder and the ways
forward.
"""

from __future__ import annotations

from pathlib import Path

from jaxtrain.checkpoint.manager import CheckpointError

LATEST = -1  # checkpoint.resume_step: the newest complete step


def _steps(steps: list[int], limit: int = 6) -> str:
    shown = ", ".join(str(s) for s in steps[:limit])
    return shown + (f", ... {steps[-1]}" if len(steps) > limit else "")


def start_step(
    directory: Path, steps: list[int], resume: bool, resume_step: int = LATEST
) -> int | None:
    """The step to restore (None: initialise afresh), given the folder's complete `steps`.

    Raises CheckpointError when following the settings would overwrite a checkpoint, or when
    `resume_step` names a step the folder does not hold.
    """
    steps = sorted(steps)
    if not resume:
        if steps:
            raise CheckpointError(
                f"checkpoint.resume=false asks to start over, but {directory} already holds "
                f"checkpoints of this run (steps {_steps(steps)}), which a new run would "
                f"overwrite. To resume from step {steps[-1]}, run with "
                "checkpoint.resume=true (the default); to start over, point checkpoint.dir (or "
                f"run.dir) at another folder, or move the old one away: mv {directory} "
                f"{directory}.old"
            )
        return None
    if resume_step == LATEST:
        return steps[-1] if steps else None
    if resume_step not in steps:
        held = f"its complete steps are {_steps(steps)}" if steps else "it holds none"
        raise CheckpointError(
            f"checkpoint.resume_step={resume_step}: {directory} holds no complete checkpoint "
            f"of step {resume_step} ({held}). Name one of its steps, or "
            "checkpoint.resume_step=-1 for the latest."
        )
    later = [s for s in steps if s > resume_step]
    if later:
        raise CheckpointError(
            f"checkpoint.resume_step={resume_step}: {directory} also holds later checkpoints "
            f"(steps {_steps(later)}), which training on from step {resume_step} would "
            f"overwrite. Resume from the latest (checkpoint.resume_step=-1: step {later[-1]}), "
            f"or move the later step folders out of {directory} first."
        )
    return resume_step
