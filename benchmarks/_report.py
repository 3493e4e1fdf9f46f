"""Shared by the benchmark scripts: write a report section into a markdown file in place, and
measure how fast the machine is at the moment (this 2-core machine is shared with other jobs:
the same fit's CPU time has varied by 1.6x within minutes, so every report says how fast
the machine was before and after its runs)."""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path
from typing import Callable


def replace_section(path: Path, section: str, body: str, *, new_file: str = "") -> None:
    """Put ``body`` between the markers ``<!-- section:start -->`` and ``<!-- section:end -->`` of
    ``path``: replaced in place, so the prose around it stays; appended the first time (to
    ``new_file`` when ``path`` does not exist yet).  Written atomically (temporary file, then rename)."""
    start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
    text = path.read_text() if path.exists() else new_file
    block = f"{start}\n{body}\n{end}"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def machine_speed(seconds: float = 0.3) -> dict[str, float]:
    """Three short probes, about ``seconds`` each: float32 GEMM throughput (1024 x 1024 products,
    numpy's BLAS with its default threads) in GFLOP/s, memory bandwidth (copies of a 64 MiB array)
    in GB/s, and a pure-Python loop in million iterations per second (one thread).  Not a
    benchmark of the machine: a reading of its speed at the moment, to compare runs made at
    different times."""
    import numpy as np

    def rate(step, work: float) -> float:
        step()  # warm
        done, t0 = 0, time.perf_counter()
        while True:
            step()
            done += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds:
                return done * work / elapsed

    a = np.random.default_rng(0).random((1024, 1024), dtype=np.float32)
    src = np.ones(8 << 20)  # 64 MiB
    dst = np.empty_like(src)

    def loop():
        x = 0
        for i in range(100_000):
            x += i

    return {"gemm_gflops": rate(lambda: a @ a, 2.0 * 1024**3 / 1e9),
            "copy_gbps": rate(lambda: np.copyto(dst, src), 2.0 * src.nbytes / 1e9),
            "python_mops": rate(loop, 0.1)}


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``), else what :mod:`platform` knows: runs on
    another kind of processor are not comparable by their times or speed readings."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def speed_text(reading: dict[str, float] | None) -> str:
    """A reading of :func:`machine_speed` in words."""
    if not reading:
        return "not measured"
    return (f"float32 GEMM {reading['gemm_gflops']:.0f} GFLOP/s, copy {reading['copy_gbps']:.1f} GB/s, "
            f"Python loop {reading['python_mops']:.1f} M iterations/s")


def count_argument(noun: str) -> Callable[[str], int]:
    """An argparse ``type`` for a count of ``noun`` (a whole number >= 1): argparse names the
    argument on a refusal, before any measurement starts."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"expected a number of {noun} >= 1, got {text!r}")
        return value

    return parse
