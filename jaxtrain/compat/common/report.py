"""What became of every key of a foreign config: mapped (to which jaxtrain key), ignored (and
why it has no meaning here) or unsupported (and why training would differ).

An adapter walks the source keys it understands and records each; `KeyReport.finish` then
classifies the rest with the adapter's ignore rules, so no source key goes unreported.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jaxtrain.errors import ConfigError

MAPPED, IGNORED, UNSUPPORTED = "mapped", "ignored", "unsupported"
_MISSING = object()


@dataclasses.dataclass
class KeyEntry:
    """One source key: its value, what became of it, and where the value came from."""

    key: str
    value: Any
    status: str
    target: str = ""  # jaxtrain key(s) it set; for unsupported keys, the key(s) that replace it
    reason: str = ""
    origin: str = ""  # the file (or "default", "command line") that gave the value

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the entry."""
        value = (
            self.value
            if isinstance(self.value, (str, int, float, bool, type(None), list, dict))
            else repr(self.value)
        )
        return {
            "key": self.key,
            "value": value,
            "status": self.status,
            "target": self.target,
            "reason": self.reason,
            "origin": self.origin,
        }


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists and empty mappings are leaves."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def is_off(value: Any) -> bool:
    """Values that switch a feature off or leave it unset: None, False, 0, "", [] and {}."""
    if isinstance(value, str):
        return value.strip().lower() in ("", "none", "null", "false")
    return (
        value is None
        or value is False
        or (isinstance(value, (int, float)) and value == 0)
        or value == []
        or value == {}
    )


class DevicesNotDivisible(ConfigError):
    """The launch's devices cannot hold the file's parallel sizes; `hosts` of `per_host`
    devices (`need` in all, or a multiple) would. `config` plans for those instead."""

    def __init__(self, message: str, *, need: int, hosts: int, per_host: int, report: Any):
        super().__init__(message)
        self.need, self.hosts, self.per_host = need, hosts, per_host
        self.world_size, self.world_source = report.world_size, report.world_source
        self.nodes_key = report.nodes_key


class KeyReport:
    """The per-key account of one foreign config file, built by its adapter."""

    def __init__(
        self,
        source: str,
        family: str,
        values: Mapping[str, Any],
        origins: Mapping[str, str] | None = None,
    ):
        self.source = source
        self.family = family
        self.values = dict(values)
        self.origins = dict(origins or {})
        self.entries: dict[str, KeyEntry] = {}
        self.notes: list[str] = []
        self.world_size = 1  # devices the source assumed (for batch and mesh arithmetic)
        self.num_hosts = 1
        self.world_source = "default"  # where they came from: "NNODES=2, GPUS_PER_NODE=8", ...
        self.nodes_key = "NNODES"  # the variable that gives the node count
        # What named world_size when the file's launcher settings or the launcher's environment
        # did ("" when it is a launcher default): `config` then plans for it, not this host.
        self.launch = ""
        self.default_origins: tuple[str, ...] = ()  # origins that are framework defaults

    # ----------------------------------------------------------------------------- reading
    def get(self, key: str, default: Any = None) -> Any:
        """The source value of a dotted key (None when absent)."""
        return self.values.get(key, default)

    def has(self, key: str) -> bool:
        """Whether the source (or its resolved defaults) holds the key."""
        return key in self.values

    def under(self, prefix: str) -> list[str]:
        """Source keys below a section, e.g. under("training") -> ["training.steps", ...]."""
        return [k for k in self.values if k.startswith(prefix + ".")]

    # ----------------------------------------------------------------------------- recording
    def _put(self, key: str, status: str, target: str, reason: str, value: Any) -> None:
        if value is _MISSING:
            value = self.values.get(key)
        self.entries[key] = KeyEntry(key, value, status, target, reason, self.origins.get(key, ""))

    def mapped(self, key: str, target: str, reason: str = "", value: Any = _MISSING) -> None:
        """`key` set jaxtrain's `target` (comma-separated when several); reason notes caveats."""
        self._put(key, MAPPED, target, reason, value)

    def ignored(self, key: str, reason: str, value: Any = _MISSING) -> None:
        """`key` has no meaning for jaxtrain; reason says why it does not change training."""
        self._put(key, IGNORED, "", reason, value)

    def unsupported(self, key: str, reason: str, target: str = "", value: Any = _MISSING) -> None:
        """`key` asks for something jaxtrain cannot do; `target` names what would replace it."""
        self._put(key, UNSUPPORTED, target, reason, value)

    def note(self, text: str) -> None:
        """A remark about the whole file (offline tables used, assumed device count, ...)."""
        if text not in self.notes:
            self.notes.append(text)

    def devices_not_divisible(self, *groups: Mapping[str, int]) -> DevicesNotDivisible:
        """The error for parallel sizes whose products do not divide the assumed devices.

        Each group is a set of sizes whose product must divide the device count (Megatron's
        tensor x pipeline x context, and its expert x expert-tensor x pipeline), so the count
        must be a multiple of their least common multiple. The message says where the count
        came from and that the launch's host count sets it, so a user sees which variable to
        change (a Primus file read without NNODES assumes 1 host).
        """
        products = [math.prod(g.values()) for g in groups]
        need = math.lcm(*products)
        per_host = max(self.world_size // max(self.num_hosts, 1), 1)
        hosts = need // math.gcd(need, per_host)
        layout = " and ".join(
            " x ".join(f"{name} {size}" for name, size in g.items()) + f" = {product}"
            for g, product in zip(groups, products)
        )
        key = self.nodes_key
        message = (
            f"{self.source}: {self.world_size} devices are not divisible by {layout}. "
            f"They are {self.num_hosts} host(s) x {per_host} devices per host "
            f"({self.world_source}); the number of hosts is the launch's node count (srun "
            f"--nodes, torchrun --nnodes), read from {key} as Primus' launcher exports it "
            f"(elsewhere set {key} to it, or WORLD_SIZE to the device count), and the run needs "
            f"hosts x devices per host to be a multiple of {need}: e.g. {key}={hosts} with "
            f"{per_host} devices per host. Set {key} as the launch will, or lower the parallel "
            "sizes."
        )
        return DevicesNotDivisible(message, need=need, hosts=hosts, per_host=per_host, report=self)

    def handled(self, key: str) -> bool:
        """Whether the key already has an entry."""
        return key in self.entries

    # ----------------------------------------------------------------------------- finishing
    def finish(
        self,
        rules: Sequence[tuple[str, str]],
        default_origin: Iterable[str] = (),
        unknown: str = "",
    ) -> None:
        """Classifies every key without an entry.

        `rules` are (fnmatch pattern, reason) pairs for keys with no meaning here; then values
        that are off/unset are ignored, then keys whose value came from a framework default
        (an origin starting with one of `default_origin`). Anything left was set on purpose
        and is not understood: unsupported, with `unknown` (or a generic reason).
        """
        defaults = tuple(default_origin)
        for key in sorted(self.values):
            if key in self.entries:
                continue
            leaf = key.rsplit(".", 1)[-1]
            reason = next(
                (
                    r
                    for pattern, r in rules
                    if fnmatch.fnmatchcase(key, pattern) or fnmatch.fnmatchcase(leaf, pattern)
                ),
                "",
            )
            if reason:
                self.ignored(key, reason)
            elif is_off(self.values[key]):
                self.ignored(key, "unset/off: asks for nothing")
            elif defaults and self.origins.get(key, "").startswith(defaults):
                self.ignored(key, f"{self.family} default with no jaxtrain counterpart; not read")
            else:
                self.unsupported(
                    key,
                    unknown
                    or f"not recognised by jaxtrain's {self.family} "
                    "adapter, so its effect cannot be reproduced",
                )

    def supersede(self, overridden: Iterable[str]) -> None:
        """Unsupported keys whose replacement the user set directly become ignored."""
        given = set(overridden)
        for entry in self.entries.values():
            targets = {t.strip() for t in entry.target.split(",") if t.strip()}
            if entry.status == UNSUPPORTED and targets and targets <= given:
                entry.status = IGNORED
                entry.reason = f"replaced by --config.{', --config.'.join(sorted(targets))}"

    # ----------------------------------------------------------------------------- output
    def by_status(self, status: str) -> list[KeyEntry]:
        """Entries with the given status, in key order."""
        return [e for k, e in sorted(self.entries.items()) if e.status == status]

    def check(self, allow_unsupported: bool = False) -> None:
        """ConfigError listing the unsupported keys, unless they are allowed."""
        bad = self.by_status(UNSUPPORTED)
        if bad and not allow_unsupported:
            lines = "; ".join(f"{e.key}={e.value!r}: {e.reason}" for e in bad[:12])
            more = f" (and {len(bad) - 12} more)" if len(bad) > 12 else ""
            raise ConfigError(
                f"{self.source}: {len(bad)} unsupported key(s): {lines}{more}. Run "
                "`python -m jaxtrain config FILE` for the full report, or pass "
                "--allow-unsupported to train without them."
            )

    def summary(self) -> str:
        """One line: counts per status."""
        counts = {s: len(self.by_status(s)) for s in (MAPPED, IGNORED, UNSUPPORTED)}
        return (
            f"{self.source} ({self.family}): {counts[MAPPED]} mapped, {counts[IGNORED]} "
            f"ignored, {counts[UNSUPPORTED]} unsupported"
        )

    def table(self) -> str:
        """Every key with its status and target or reason, one per line."""
        width = min(48, max((len(k) for k in self.entries), default=10))
        lines = [f"# key report: {self.summary()}"]
        lines += [f"# note: {n}" for n in self.notes]
        for status in (UNSUPPORTED, MAPPED, IGNORED):
            for e in self.by_status(status):
                value = repr(e.value)
                value = value if len(value) <= 40 else value[:37] + "..."
                detail = f"-> {e.target}" if e.target and status == MAPPED else ""
                if e.reason:
                    detail = f"{detail}  ({e.reason})" if detail else e.reason
                lines.append(f"{status:<11} {e.key:<{width}} = {value}  {detail}".rstrip())
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The report as one JSON-ready dict."""
        return {
            "source": self.source,
            "family": self.family,
            "notes": list(self.notes),
            "world_size": self.world_size,
            "summary": {s: len(self.by_status(s)) for s in (MAPPED, IGNORED, UNSUPPORTED)},
            "keys": [e.to_json() for _, e in sorted(self.entries.items())],
        }
