"""What model code reads while it is traced, held in one place: the mesh and its logical-axis
rules, the hardware backend, and the pipeline schedule.

The run setup puts them in force around tracing (`sharding.use_mesh`, `backend.use`,
`pipeline.use` each replace one field for the length of a `with` block); model code asks
`current()` instead of taking them as arguments through every layer. The state is a
`contextvars.ContextVar`, so a thread or task that traces sees only what it put in force.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from typing import Any


@dataclasses.dataclass(frozen=True)
class TraceContext:
    """The settings in force while tracing; None where nothing was put in force (the readers
    then use their defaults: no sharding constraints, the detected backend, the default
    schedule)."""

    mesh: Any = None  # jax.sharding.Mesh
    rules: dict[str, Any] | None = None  # logical axis -> mesh axes
    backend: Any = None  # hardware.backend.Backend
    pipeline_schedule: Any = None  # models.assembly.pipeline.Schedule


_NOTHING_IN_FORCE = TraceContext()
_CURRENT: contextvars.ContextVar[TraceContext] = contextvars.ContextVar("jaxtrain_trace_context")


def current() -> TraceContext:
    """The settings in force here."""
    return _CURRENT.get(_NOTHING_IN_FORCE)


@contextlib.contextmanager
def use(**fields: Any) -> Iterator[TraceContext]:
    """Puts `fields` in force for the block, keeping the other fields as they are."""
    token = _CURRENT.set(dataclasses.replace(current(), **fields))
    try:
        yield current()
    finally:
        _CURRENT.reset(token)
