"""Shared helpers of the extraction benchmarks: worker subprocesses, peak-RSS sampling, Markdown tables.

Memory is measured per method in its *own* subprocess (so one method's peak
cannot mask another's): a background thread samples the process's resident
set size (``/proc/self/statm``; ``psutil`` elsewhere) every 2 ms while the
method runs; the reported figure is ``peak - RSS just before the call``, i.e.
what the method itself added on top of the loaded model.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # runnable from a checkout, installed or not

MB = 1024 * 1024
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """Current resident set size of this process."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except OSError:
        import psutil

        return psutil.Process().memory_info().rss


def anon_rss_bytes() -> int:
    """Anonymous resident memory of this process (``RssAnon``): excludes file-backed pages such as mmapped weights."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return rss_bytes()


class PeakRSS:
    """Context manager: ``base`` (at entry) and ``peak`` (max sampled inside the block) of ``reader``, in bytes.

    ``reader`` defaults to :func:`rss_bytes`; :func:`anon_rss_bytes` counts only memory the process allocated.
    """

    def __init__(self, interval_s: float = 0.002, reader: Callable[[], int] = rss_bytes) -> None:
        self.interval_s = interval_s
        self.reader = reader
        self.base = self.peak = 0
        self._stop = threading.Event()

    def __enter__(self) -> PeakRSS:
        self.base = self.peak = self.reader()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.reader())
            time.sleep(self.interval_s)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.reader())

    @property
    def delta_mb(self) -> float:
        """Peak minus entry RSS, in MiB."""
        return (self.peak - self.base) / MB


def run_worker(script: Path, args: list[str], timeout_s: float = 3600) -> dict[str, Any]:
    """Run ``python script --worker ...`` in a fresh process; its last stdout line is a JSON result."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env,
                          timeout=timeout_s)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-15:]
        return {"error": f"worker exited {proc.returncode}: " + " | ".join(tail)}
    lines = [line for line in proc.stdout.strip().splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": "worker printed no result"}


def emit(result: dict[str, Any]) -> None:
    """Worker side: print the result as the last stdout line."""
    print(json.dumps(result), flush=True)


def markdown_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A GitHub Markdown table (cells formatted with str)."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def machine_note(threads: int) -> str:
    """One line about where the numbers come from (CPU, torch threads, load from other processes)."""
    import torch

    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
            f"{threads} torch threads; load average at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
            f"(1/5/15 min; > {os.cpu_count()} means other processes shared the CPUs)")


def load_average() -> float:
    """1-minute load average (NaN where unknown)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
