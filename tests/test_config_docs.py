"""docs/configuration.md is generated from configs/base.py and must stay in step with it."""

import re

from conftest import REPO, load_tool
from jaxtrain.configs import base


def _generator():
    return load_tool("gen_config_docs")


def _flat_keys(cfg, prefix=""):
    for key, value in cfg.items():
        if hasattr(value, "items"):
            yield from _flat_keys(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def test_configuration_doc_is_up_to_date():
    expected = _generator().generate()
    actual = (REPO / "docs" / "configuration.md").read_text()
    assert actual == expected, (
        "docs/configuration.md is out of date with configs/base.py: run "
        "python tools/gen_config_docs.py"
    )


def test_every_base_key_is_documented_with_its_default():
    doc = (REPO / "docs" / "configuration.md").read_text()
    rows = dict(re.findall(r"^\| `([\w.]+)` \| (`.*?`) \|", doc, re.M))
    keys = list(_flat_keys(base.get_config()))
    assert sorted(rows) == sorted(keys)
    undocumented = re.findall(r"^\| `([\w.]+)` \| `.*?` \|  \|$", doc, re.M)
    assert undocumented == [], (
        f"{undocumented}: give each a trailing comment in "
        "configs/base.py (or its ModelSpec field), then rerun "
        "python tools/gen_config_docs.py"
    )


def test_loop_keys_notes_and_continuations_are_parsed():
    source = """
def get_config():
    c = ConfigDict()
    c.a = ConfigDict()
    c.a.x = 1  # first line
    #            continued here
    # A note between keys.
    for axis in ("p", "q"):
        c.a[f"n_{axis}"] = 2  # per axis
"""
    items = _generator().parse_base(source)
    assert items == [
        ("section", "a", ""),
        ("key", ("a", "x"), "first line continued here"),
        ("note", "A note between keys."),
        ("key", ("a", "n_p"), "per axis"),
        ("key", ("a", "n_q"), "per axis"),
    ]
