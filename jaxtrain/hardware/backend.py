"""Hardware choices in one place: the model states the math, this module picks how it runs.

A `Backend` describes the target (platform, vendor, device kind, CPU instruction sets) and the
choices that follow from it:

- `bf16_products`: bfloat16 products with float32 results read bfloat16 operands (GPUs, TPUs,
  CPUs with AVX512-BF16 or AMX), or operands widened to float32 first (CPUs without bfloat16
  dot instructions, where XNNPACK's bfloat16 kernel is the slower one; widening is exact). See
  `jaxtrain.models.layers.products`.
- `rounds_narrow_products` (follows from the two above): on CPUs with bfloat16 products, every
  bfloat16 product asks for a float32 result and rounds it, because XLA:CPU runs a product with
  a bfloat16 result as a float32 one behind conversions, away from the bfloat16 kernel.
- `cudnn_attention`: `jax.nn.dot_product_attention(implementation="cudnn")` is available
  (NVIDIA GPUs); elsewhere blockwise attention in plain XLA.
- `attention_block`: queries per block of the blockwise kernel, short and long sequences: 64 on
  CPUs up to 1024 tokens (faster there, and no faster at 2048 while compiling twice as long),
  128 on accelerators (larger tiles for their matrix units).
- `keep_attention_probabilities`: CPUs keep each attention block's softmax numerator for the
  backward pass instead of recomputing it (faster there); accelerators recompute, trading
  matmuls they have plenty of for memory.
- `grouped_matmul`: how the experts' grouped matmul runs (`jaxtrain.models.layers.grouped_matmul`):
  "ragged", the platform's `jax.lax.ragged_dot` (GPUs, TPUs), or "tiles" on CPUs, whose
  `ragged_dot` multiplies every row by every group's weights.
- `rounds_by_bits`: float32 values are rounded to bfloat16 by integer operations on the bit
  pattern (CPUs: XLA:CPU's own conversion vectorises at half width inside a fusion), bit for bit
  the same rounding; elsewhere by the device's conversion (`jaxtrain.models.layers.rounding`).
- `fp8_formats`: the float8 types of `model.quantization="fp8"` (`jaxtrain.models.layers.fp8`): "ocp"
  (`float8_e4m3fn` / `float8_e5m2`, the OCP standard of NVIDIA Hopper/Ada/Blackwell and AMD
  MI350X/MI355X) or "fnuz" (`float8_e4m3fnuz` / `float8_e5m2fnuz`, the only ones the matrix
  cores of AMD MI300X/MI325X take: MaxText's `nanoo_fp8`). `fp8_native` says whether the device
  multiplies them in hardware; elsewhere (CPUs, older GPUs) XLA emulates the types by widening
  the operands, so the same program runs with the same rounding, only without the speed-up.

`current()` is the backend of this process's devices unless the config names another
(`backend.target`, e.g. to compile a GPU's program on a CPU host with tools/compile_plan.py) or
overrides a choice (`backend.bf16_products`, `backend.fp8_formats`, `backend.grouped_matmul`,
`backend.bf16_rounding`). `backend.xla_options` adds XLA compiler options to the run's programs
(`jaxtrain.hardware.xla_options`). The trainer installs it
once at start, prints `describe()` and records it in the run's config.json. The figures behind
each choice, with the CPU they were measured on, are in docs/performance.md#hardware-choices.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import platform
from collections.abc import Iterator, Mapping
from typing import Any

import jax

from jaxtrain import trace_context
from jaxtrain.errors import ConfigError
from jaxtrain.hardware import xla_options as xla_options_lib

# CPU instruction sets that multiply bfloat16 with float32 accumulation in hardware.
BF16_DOT_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
# Device names (upper case, spaces removed) of GPUs with float8 matrix units: NVIDIA Ada,
# Hopper and Blackwell; AMD CDNA 3 (MI300 series, gfx942) and CDNA 4 (MI350 series, gfx950).
FP8_NVIDIA = (
    "H100",
    "H200",
    "H800",
    "H20",
    "GH200",
    "L4",
    "L40",
    "RTX40",
    "ADAGENERATION",
    "B100",
    "B200",
    "B300",
    "GB200",
    "GB300",
)
FP8_AMD = ("MI300", "MI325", "MI350", "MI355", "GFX942", "GFX950")
# Of those, the ones whose float8 types are the FNUZ variants (CDNA 3).
FNUZ_AMD = ("MI300", "MI325", "GFX942")
FP8_FORMAT_CHOICES = ("auto", "ocp", "fnuz")


@dataclasses.dataclass(frozen=True)
class Backend:
    """A target and the choices made for it."""

    platform: str  # "cpu" | "gpu" | "tpu"
    vendor: str  # "nvidia" | "amd" | "intel" | "google" | "unknown"
    kind: str  # the device kind, or the CPU's model name
    cpu_flags: frozenset[str] = frozenset()  # instruction sets (CPUs only)
    bf16_products: bool = True  # narrow products read narrow operands (else widened to f32)
    cudnn_attention: bool = False
    attention_block: tuple[int, int] = (128, 128)  # queries per block: <= 1024 tokens, longer
    keep_attention_probabilities: bool = False
    grouped_matmul: str = "ragged"  # "ragged" (jax.lax.ragged_dot) | "tiles" (loops over row tiles)
    fp8_formats: str = "ocp"  # "ocp" (e4m3fn / e5m2) | "fnuz" (e4m3fnuz / e5m2fnuz)
    fp8_native: bool = False  # float8 products run on the device's matrix units
    rounds_by_bits: bool = False  # float32 -> bfloat16 by integer ops (layers/rounding.py)
    xla_options: tuple[tuple[str, Any], ...] = ()  # compiler options of the run's programs

    @property
    def compiler_options(self) -> dict[str, Any] | None:
        """`xla_options` as `jax.jit`'s `compiler_options` (None when there are none)."""
        return dict(self.xla_options) or None

    @property
    def rounds_narrow_products(self) -> bool:
        """bfloat16 products take a float32 result, rounded after (`products.accumulation_dtype`):
        CPUs with bfloat16 products, where XLA:CPU widens a product with a bfloat16 result."""
        return self.platform == "cpu" and self.bf16_products

    def block_for(self, length: int) -> int:
        """Queries per attention block at this sequence length."""
        short, long = self.attention_block
        return short if length <= 1024 else long

    def describe(self) -> str:
        """One line for the run's log: the target and every choice."""
        isa = sorted(self.cpu_flags & (BF16_DOT_FLAGS | {"avx2", "avx512f", "amx_tile"}))
        target = f"{self.platform} {self.vendor} {self.kind}".strip()
        if isa:
            target += f" ({', '.join(isa)})"
        products = "bfloat16" if self.bf16_products else "widened to float32"
        if self.rounds_narrow_products:
            products += " with float32 results, rounded"
        if self.rounds_by_bits:
            products += "; bfloat16 rounding by integer operations"
        attention = (
            "cuDNN"
            if self.cudnn_attention
            else (
                f"blockwise, {self.attention_block[0]}/{self.attention_block[1]} queries per block"
                f"{', probabilities kept' if self.keep_attention_probabilities else ''}"
            )
        )
        fp8 = f"fp8 {self.fp8_formats.upper()} {'native' if self.fp8_native else 'emulated by XLA'}"
        experts = f"experts' grouped matmul {self.grouped_matmul}"
        line = (
            f"backend: {target}; bfloat16 products {products}; attention {attention}; {experts}; "
            f"{fp8}"
        )
        if self.xla_options:
            line += f"; XLA options {xla_options_lib.text_of(dict(self.xla_options))}"
        return line

    def to_dict(self) -> dict[str, Any]:
        """The backend as plain values (config.json, benchmark reports)."""
        out = dataclasses.asdict(self)
        out["cpu_flags"] = sorted(self.cpu_flags & (BF16_DOT_FLAGS | {"avx2", "avx512f"}))
        out["xla_options"] = dict(self.xla_options)
        return out


def cpu_flags() -> frozenset[str]:
    """The CPU's instruction-set flags (Linux's /proc/cpuinfo; empty elsewhere)."""
    return frozenset(_read_cpuinfo().get("flags", "").split())


def cpu_model() -> str:
    """The CPU's model name, for figures that must say what they were measured on."""
    return _read_cpuinfo().get("model name") or platform.processor() or platform.machine()


@functools.cache
def _read_cpuinfo() -> dict[str, str]:
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
                if not line.strip():
                    break  # the first processor says it for all
    except OSError:
        pass
    return fields


def for_cpu(flags: frozenset[str], kind: str = "") -> Backend:
    """The choices for a CPU with these instruction sets."""
    return Backend(
        platform="cpu",
        vendor=_cpu_vendor(kind),
        kind=kind,
        cpu_flags=flags,
        bf16_products=bool(flags & BF16_DOT_FLAGS),
        cudnn_attention=False,
        attention_block=(64, 128),
        keep_attention_probabilities=True,
        grouped_matmul="tiles",
        rounds_by_bits=True,
    )


def for_gpu(vendor: str, kind: str) -> Backend:
    """The choices for a GPU of `vendor` ("nvidia" or "amd")."""
    name = kind.upper().replace(" ", "")
    fp8_names = FP8_NVIDIA if vendor == "nvidia" else FP8_AMD
    fnuz = vendor == "amd" and any(n in name for n in FNUZ_AMD)
    return Backend(
        platform="gpu",
        vendor=vendor,
        kind=kind,
        bf16_products=True,
        cudnn_attention=vendor == "nvidia",
        attention_block=(128, 128),
        keep_attention_probabilities=False,
        fp8_formats="fnuz" if fnuz else "ocp",
        fp8_native=any(n in name for n in fp8_names),
    )


def _cpu_vendor(kind: str) -> str:
    lowered = kind.lower()
    return "amd" if "amd" in lowered else "intel" if "intel" in lowered else "unknown"


# Named targets for compiling another machine's program (tools/compile_plan.py --target).
TARGETS: dict[str, Backend] = {
    "cpu-avx2": for_cpu(frozenset({"avx2", "fma"}), "x86 CPU with AVX2"),
    "cpu-avx512-bf16": for_cpu(
        frozenset({"avx2", "avx512f", "avx512_bf16"}), "x86 CPU with AVX512-BF16"
    ),
    "cpu-amx": for_cpu(
        frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}), "x86 CPU with AMX"
    ),
    "nvidia-h100": for_gpu("nvidia", "NVIDIA H100"),
    "nvidia-h200": for_gpu("nvidia", "NVIDIA H200"),
    "amd-mi300x": for_gpu("amd", "AMD Instinct MI300X"),
    "amd-mi325x": for_gpu("amd", "AMD Instinct MI325X"),
    "amd-mi355x": for_gpu("amd", "AMD Instinct MI355X"),
}


def detect(device: Any = None) -> Backend:
    """The backend of this process's first device."""
    device = device or jax.devices()[0]
    if device.platform == "cpu":
        return for_cpu(cpu_flags(), cpu_model())
    kind = getattr(device, "device_kind", "")
    if device.platform == "gpu":
        lowered = kind.lower()
        vendor = (
            "amd" if ("amd" in lowered or "instinct" in lowered or "mi3" in lowered) else "nvidia"
        )
        return for_gpu(vendor, kind)
    return Backend(
        platform=device.platform,
        vendor="google" if device.platform == "tpu" else "unknown",
        kind=kind,
    )


BF16_PRODUCT_CHOICES = ("auto", "native", "widened")
GROUPED_MATMUL_CHOICES = ("auto", "ragged", "tiles")
BF16_ROUNDING_CHOICES = ("auto", "bits", "convert")


def from_config(section: Mapping[str, Any] | None) -> Backend:
    """The backend a config's `backend` section asks for (`target`, `bf16_products`,
    `fp8_formats`, `grouped_matmul`, `bf16_rounding`, `xla_options`)."""
    section = dict(section or {})
    target = section.get("target", "") or ""
    if target and target not in TARGETS:
        raise ConfigError(
            f"backend.target={target!r} is not one of {sorted(TARGETS)} (or '' for this machine)."
        )
    chosen = TARGETS[target] if target else detect()
    if chosen.cudnn_attention and jax.default_backend() != "gpu":
        # Planning an NVIDIA GPU's program on another host: cuDNN kernels compile only for a
        # GPU, so attention stays blockwise (its scores are materialised block by block).
        chosen = dataclasses.replace(chosen, cudnn_attention=False)
    products = section.get("bf16_products", "auto") or "auto"
    if products not in BF16_PRODUCT_CHOICES:
        raise ConfigError(
            f"backend.bf16_products={products!r} is not one of {BF16_PRODUCT_CHOICES}."
        )
    if products != "auto":
        chosen = dataclasses.replace(chosen, bf16_products=products == "native")
    formats = section.get("fp8_formats", "auto") or "auto"
    if formats not in FP8_FORMAT_CHOICES:
        raise ConfigError(
            f"backend.fp8_formats={formats!r} is not one of "
            f"{FP8_FORMAT_CHOICES}: 'ocp' for NVIDIA GPUs and AMD MI350X/MI355X, "
            "'fnuz' for AMD MI300X/MI325X, 'auto' to take the device's."
        )
    if formats != "auto":
        chosen = dataclasses.replace(chosen, fp8_formats=formats)
    grouped = section.get("grouped_matmul", "auto") or "auto"
    if grouped not in GROUPED_MATMUL_CHOICES:
        raise ConfigError(
            f"backend.grouped_matmul={grouped!r} is not one of {GROUPED_MATMUL_CHOICES}: "
            "'ragged' for jax.lax.ragged_dot, 'tiles' for loops over row tiles (CPUs), 'auto' "
            "to take the hardware's."
        )
    if grouped != "auto":
        chosen = dataclasses.replace(chosen, grouped_matmul=grouped)
    rounding = section.get("bf16_rounding", "auto") or "auto"
    if rounding not in BF16_ROUNDING_CHOICES:
        raise ConfigError(
            f"backend.bf16_rounding={rounding!r} is not one of {BF16_ROUNDING_CHOICES}: 'bits' "
            "for integer operations, 'convert' for XLA's convert, 'auto' to take the hardware's."
        )
    if rounding != "auto":
        chosen = dataclasses.replace(chosen, rounds_by_bits=rounding == "bits")
    options = xla_options_lib.parse(section.get("xla_options", "") or "")
    if options:
        chosen = dataclasses.replace(chosen, xla_options=tuple(options.items()))
    return chosen


def current() -> Backend:
    """The backend model code traces for: the one `use` put in force, else this machine's."""
    return trace_context.current().backend or _detected()


@functools.cache
def _detected() -> Backend:
    return detect()


@contextlib.contextmanager
def use(backend: Backend) -> Iterator[Backend]:
    """Makes `current()` return `backend` while tracing inside the block."""
    with trace_context.use(backend=backend):
        yield backend
