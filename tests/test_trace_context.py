"""The one context that model code reads while tracing: nested blocks restore what they replaced,
and another thread sees none of it."""

import threading

import jax

from jaxtrain import trace_context
from jaxtrain.hardware import backend
from jaxtrain.models.assembly import pipeline
from jaxtrain.parallel import sharding


def test_nested_blocks_replace_one_field_and_restore_it():
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    rules = (("batch", "data"), ("embed", None))
    chosen = backend.detect()
    assert sharding.active_mesh() is None and pipeline.current() == pipeline.Schedule()
    with sharding.use_mesh(mesh, rules), backend.use(chosen):
        assert sharding.active_mesh() == (mesh, dict(rules))
        assert sharding.axis_size("data") == jax.device_count()
        schedule = pipeline.Schedule(microbatches=2)
        with pipeline.use(schedule):
            context = trace_context.current()
            assert (context.mesh, context.backend, context.pipeline_schedule) == (
                mesh,
                chosen,
                schedule,
            )
            with sharding.use_mesh(mesh, (("batch", None),)):
                assert sharding.active_mesh()[1] == {"batch": None}
                assert pipeline.current() is schedule  # the other fields stay in force
            assert sharding.active_mesh()[1] == dict(rules)
        assert pipeline.current() == pipeline.Schedule()
    assert trace_context.current() == trace_context.TraceContext()


def test_another_thread_does_not_see_this_threads_settings():
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    seen = []
    with sharding.use_mesh(mesh, (("batch", "data"),)):
        worker = threading.Thread(target=lambda: seen.append(sharding.active_mesh()))
        worker.start()
        worker.join()
        assert sharding.active_mesh() is not None
    assert seen == [None]
