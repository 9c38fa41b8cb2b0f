"""examples/quickstart.ipynb runs end to end in a fresh kernel (demo data, train, resume)."""

import os

import pytest
from conftest import REPO

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = REPO / "examples" / "quickstart.ipynb"


def _with_parameters(nb, **values):
    """Papermill-style: a cell after the one tagged `parameters` that sets `values`."""
    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    source = "\n".join(f"{k} = {v!r}" for k, v in values.items())
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source))
    return nb


def _kernel_env() -> dict[str, str]:
    """This process's environment with XLA's defaults (one CPU device), as a notebook user has.

    The suite's 8 fake devices and unoptimised compiles make the 30 training steps about twice
    as slow; the compilation cache of conftest is kept.
    """
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    return env


@pytest.mark.slow
def test_quickstart_notebook_executes(tmp_path):
    nb = _with_parameters(
        nbformat.read(NOTEBOOK, as_version=4), RUN_DIR=str(tmp_path / "quickstart")
    )
    # kernel_name "python3" is ipykernel's own spec: the Python running this test.
    client = nbclient.NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(REPO / "examples")}},
    )
    client.execute(env=_kernel_env())
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert "compiled train step" in text and "resumed at step 30" in text
    assert (tmp_path / "quickstart" / "plots" / "loss.png").is_file()
    assert any("image/png" in o.get("data", {}) for o in outputs)
