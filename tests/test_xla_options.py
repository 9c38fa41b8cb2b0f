"""`backend.xla_options`: XLA compiler options read from the config, checked against this XLA
before a run builds anything, and compiled into the run's train and eval steps."""

from __future__ import annotations

import jax
import pytest
from conftest import REPO

from jaxtrain import run as run_lib
from jaxtrain.config import loader as config_lib
from jaxtrain.errors import ConfigError
from jaxtrain.hardware import backend, xla_options


def test_options_read_as_xla_flags_write_them_with_their_types():
    text = "--xla_gpu_enable_latency_hiding_scheduler=true, xla_gpu_autotune_level=4\n" \
           "xla_gpu_memory_limit_slop_factor=0.5 xla_dump_to=/tmp/dumps xla_gpu_autotune_level=2"  # fmt: skip
    assert xla_options.parse(text) == {
        "xla_gpu_enable_latency_hiding_scheduler": True,
        "xla_gpu_autotune_level": 2,  # the last of a repeated name, as in XLA_FLAGS
        "xla_gpu_memory_limit_slop_factor": 0.5,
        "xla_dump_to": "/tmp/dumps",
    }
    assert xla_options.parse("") == {} and xla_options.parse("  ") == {}
    # A list option keeps its commas: one ends an item only where NAME= follows.
    assert xla_options.parse(
        "xla_gpu_enable_command_buffer=FUSION,CUBLAS,xla_gpu_autotune_level=4"
    ) == {
        "xla_gpu_enable_command_buffer": "FUSION,CUBLAS",
        "xla_gpu_autotune_level": 4,
    }
    options = xla_options.parse(text)
    assert xla_options.parse(xla_options.text_of(options)) == options


@pytest.mark.parametrize("item", ["xla_gpu_autotune_level", "=4", "4xla=1", "xla-gpu=1"])
def test_an_item_that_is_not_name_equals_value_is_named(item):
    with pytest.raises(ConfigError, match=rf"backend.xla_options: '{item}' is not NAME=VALUE"):
        xla_options.parse(f"{item},xla_cpu_prefer_vector_width=512")


@pytest.mark.parametrize(
    ("text", "xla_says"),
    [
        ("xla_cpu_no_such_option=1", "No such compile option: 'xla_cpu_no_such_option'"),
        ("xla_cpu_prefer_vector_width=wide", "is not a valid int32 value"),
        # XLA_FLAGS' short enum names are not the compile options' ones: the message says so.
        ("xla_cpu_experimental_xnn_fusion_type=dot", "LIBRARY_FUSION_TYPE_DOT, where XLA_FLAGS"),
    ],
)
def test_options_this_xla_refuses_are_named_with_the_fix(text, xla_says):
    with pytest.raises(ConfigError) as error:
        xla_options.check(xla_options.parse(text))
    message = str(error.value)
    assert message.startswith(f"backend.xla_options={text!r}: XLA refused it")
    assert xla_says in message and "--config.backend.xla_options=" in message


def test_the_backend_carries_describes_and_records_them():
    chosen = backend.from_config({"xla_options": "xla_cpu_prefer_vector_width=512"})
    assert chosen.compiler_options == {"xla_cpu_prefer_vector_width": 512}
    assert chosen.describe().endswith("; XLA options xla_cpu_prefer_vector_width=512")
    assert chosen.to_dict()["xla_options"] == {"xla_cpu_prefer_vector_width": 512}
    plain = backend.from_config({})
    assert plain.compiler_options is None and "XLA options" not in plain.describe()
    # Options of another platform are XLA's too: a GPU's can be planned on a CPU host. Enum
    # lists take the values' full names.
    xla_options.check(xla_options.parse(
        "xla_gpu_enable_latency_hiding_scheduler=true xla_gpu_enable_command_buffer=FUSION,CUBLAS "
        "xla_cpu_experimental_xnn_fusion_type=LIBRARY_FUSION_TYPE_DOT,LIBRARY_FUSION_TYPE_REDUCE"
    ))  # fmt: skip


def _config(tmp_path, options: str):
    return config_lib.load_config(
        str(REPO / "configs" / "llama_debug.py"),
        {"run.dir": str(tmp_path / "run"), "train.seq_len": 32, "backend.xla_options": options},
    )


def test_the_train_and_eval_steps_compile_with_them(tmp_path):
    dumps = tmp_path / "dumps"  # xla_dump_to leaves a trace of every program compiled with it
    setup = run_lib.setup(_config(tmp_path, f"xla_dump_to={dumps}"), jax.devices()[:1],
                          check_data=False)  # fmt: skip
    setup.compile_train_step()
    with setup.mesh_context():
        params = setup.layout.abstract["params"]
        setup.eval_step.lower(params, setup.abstract_batch()).compile()
    names = {path.name for path in dumps.iterdir()}
    assert any("train_step" in name for name in names), sorted(names)[:5]
    assert any("eval_step" in name for name in names), sorted(names)[:5]


def test_a_run_with_options_xla_refuses_stops_at_setup(tmp_path):
    with pytest.raises(ConfigError, match="No such compile option: 'xla_no_such'"):
        run_lib.setup(_config(tmp_path, "xla_no_such=1"), jax.devices()[:1], check_data=False)
