"""What `python -m jaxtrain config FILE` reports: the config as it resolves, the figures worth
checking before a run (parameters, tokens per step, accumulation, the mesh, the train state per
device) and, for a config of another stack, what became of every source key.

Nothing is compiled or allocated: the figures come from the model spec, the mesh sizes and the
state layout's partition specs, so a 64-device plan can be checked on a laptop (`--devices 64
--hosts 8`). A foreign file is planned for the launch it was written for, even when that is not
the launch at hand: `train` refuses parallel sizes this launch cannot hold, `config` plans for
the hosts they need and says what this launch has.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from ml_collections import ConfigDict

from jaxtrain import compat, run
from jaxtrain.commands.options import add_config_argument, add_foreign_options
from jaxtrain.compat.common.report import KeyReport
from jaxtrain.config import loader as config_lib
from jaxtrain.config import mesh_check
from jaxtrain.parallel import sharding
from jaxtrain.planning import memory as memory_plan
from jaxtrain.planning.devices import mesh_shape, plan_devices, resolve_for_devices


def derived(cfg: ConfigDict, devices: int, hosts: int = 1, config_path: str = "") -> dict[str, Any]:
    """Figures worth checking before a run, on `devices` devices over `hosts` hosts."""
    spec = run.validate(cfg, check_data=False)
    figures: dict[str, Any] = {
        "num_params": spec.num_params(),
        "num_active_params": spec.num_active_params(),  # top-k experts only (all when dense)
        "tokens_per_step": cfg.train.global_batch_size * cfg.train.seq_len,
        "grad_accumulation_steps": cfg.train.global_batch_size // config_lib.micro_batch_size(cfg),
        "flops_per_token": spec.flops_per_token(cfg.train.seq_len),
        "devices": devices,
        "hosts": hosts,
    }
    try:
        figures["mesh"] = mesh_shape(cfg, devices, hosts)
    except ValueError as e:
        figures["mesh"] = f"does not fit: {e}"
        return figures
    if figures["mesh"]["pipeline"] > 1:
        figures["pipeline"] = mesh_check.pipeline_summary(
            spec,
            figures["mesh"],
            dict(sharding.RULE_PRESETS.get(cfg.mesh.rules, ())),
            micro_batch=config_lib.micro_batch_size(cfg),
            schedule=mesh_check.pipeline_schedule(cfg),
            mesh_cfg=cfg.mesh,
        )
    plan, axis_sizes = memory_plan.plan_for_mesh(cfg, devices, hosts)
    figures["memory_per_device"] = memory_plan.describe_state(plan, axis_sizes, config_path, hosts)
    figures["state_bytes_per_device"] = {
        "parameters": plan.params,
        "optimizer_state": plan.optimizer,
        "gradients": plan.params,
        "batch": plan.batch,
    }
    return figures


@dataclasses.dataclass
class ConfigReport:
    """A resolved config, its derived figures and (foreign files) the key report."""

    cfg: ConfigDict
    derived: dict[str, Any]
    keys: KeyReport | None = None

    @property
    def unsupported(self) -> list[Any]:
        """The source keys training would refuse."""
        return self.keys.by_status("unsupported") if self.keys is not None else []

    def to_json(self) -> dict[str, Any]:
        """One JSON object: config, derived, unsupported and, for a foreign file, report."""
        payload = {
            "config": self.cfg.to_dict(),
            "derived": self.derived,
            "unsupported": [e.to_json() for e in self.unsupported],
        }
        if self.keys is not None:
            payload["report"] = self.keys.to_json()
        return payload

    def text(self) -> str:
        """The config, then `# key: value` lines, then the key table."""
        lines = [str(self.cfg).rstrip()]
        for key, value in self.derived.items():
            shown = (
                f"{value:,}"
                if isinstance(value, int)
                else (f"{value:.4g}" if isinstance(value, float) else value)
            )
            lines.append(f"# {key}: {shown}")
        if self.keys is not None:
            lines.append(self.keys.table())
        if self.unsupported:
            lines.append(
                f"# {len(self.unsupported)} unsupported key(s) (listed first above): "
                "training refuses this config unless --allow-unsupported."
            )
        return "\n".join(lines)


def build(
    path: str,
    overrides: Sequence[str] = (),
    native: Sequence[str] = (),
    *,
    devices: int | None = None,
    hosts: int | None = None,
    primus_root: str | None = None,
    maxtext_root: str | None = None,
) -> ConfigReport:
    """The report of one config file, planned for `devices` over `hosts` when given, else for
    the layout a foreign file's launch names, else for this host (see `device_plan`)."""
    keys, short = None, None
    if compat.is_foreign(path):
        cfg, keys, short = resolve_for_devices(
            path,
            overrides,
            native,
            devices=devices,
            hosts=hosts,
            primus_root=primus_root,
            maxtext_root=maxtext_root,
        )
    else:
        cfg = compat.load_config_file(path, list(overrides), native_overrides=list(native))
    # --devices/--hosts, else the launch the file names (grown to what its parallel sizes
    # need), else this host's devices.
    plan = plan_devices(devices, hosts, keys, short)
    figures = derived(cfg, plan.devices, plan.hosts, path)
    return ConfigReport(cfg, {**figures, **plan.figures(cfg)}, keys)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `config`: the file, JSON output, the device plan, the shipped list."""
    parser.add_argument("file", nargs="?", help="the config (as --config FILE)")
    add_config_argument(parser, required=False)
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object: config, derived, unsupported (a list of "
        "{key, value, reason, ...}) and, for a foreign file, report",
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=None,
        help="plan for this many devices in all (default: this host's, or what a "
        "foreign file's launcher settings give)",
    )
    parser.add_argument(
        "--hosts",
        type=int,
        default=None,
        help="hosts (processes) the devices are spread over (dcn_* axes)",
    )
    parser.add_argument("--list", action="store_true", help="list the configs jaxtrain ships")
    add_foreign_options(parser)


def handle(args: argparse.Namespace) -> int:
    """Prints the report of the named config (or the shipped configs); returns the exit status."""
    if args.list:
        print("\n".join(config_lib.preset_names()))
        return 0
    path = args.file or args.config
    if not path:
        raise config_lib.ConfigError("config: name a config file (or --list the shipped ones).")
    report = build(
        path,
        args.overrides,
        args.native,
        devices=args.devices,
        hosts=args.hosts,
        primus_root=args.primus_root,
        maxtext_root=args.maxtext_root,
    )
    print(json.dumps(report.to_json(), indent=2, default=str) if args.json else report.text())
    return 0
