"""The machine a benchmark ran on, printed at the top of every benchmark's output."""

from __future__ import annotations

import os
import platform


def cpu() -> str:
    """CPU model and core count (the model name from /proc/cpuinfo where there is one)."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        name = names[0] if names else name
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


def describe() -> str:
    """CPU, cores, JAX version and the device JAX computes on."""
    import jax

    dev = jax.devices()[0]
    return f"{cpu()}; jax {jax.__version__} on {dev.platform} ({getattr(dev, 'device_kind', dev.platform)})"


def script_main(run, doc: str, quick_help: str, argv=None) -> int:
    """The command line of a benchmark part: ``--quick`` or not, then ``run(quick=...)``."""
    import argparse

    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help=quick_help)
    run(quick=p.parse_args(argv).quick)
    return 0
