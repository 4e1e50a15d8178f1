"""Benchmark: set-level harm with the sets of one departure point as padded batches vs one forward per set.

Two measurements, both interleaving the two paths in one process (after a warm-up of each), so their ratio comes
from one run under one machine load:

"Batched" is the default path (``nest=True``: sets ride on the forward of a set they share tokens with past
their departure point, then the rest leaving at one point as padded batches within ``DEFAULT_BATCH_BYTES``);
"one per set" is ``batch_bytes=0, nest=False`` (one suffix forward per set from the shared prefix's snapshot).

- ``sets``: ``patching.harm.set_harms`` at one demo boundary with about ``--units`` candidate units (harm's default
  kinds: reasoning, observation, tool exchange; the first boundary of the demo trajectories with exactly that many,
  else the nearest), every singleton plus ``--budget`` sampled sets per size 2..3 and the pairs inside sampled
  triples. Prints sets/s (sets / median wall) and the CPU time per call.
- ``drsr``: the demo's DRSR stage on its CPU subset only (``DemoConfig``: after step ``harm_after_step`` of the
  ``harm_boundaries`` shortest trajectories, units of every kind, sets up to 3, ``harm_budget`` per size):
  ``patching.drsr.boundary_record`` per boundary, batched vs not; prints the mean wall and CPU time per boundary.

Both paths compute the same harms (checked here: the largest difference of any set's harm is printed;
``tests/patching/test_harm_batch.py`` is the parity test). No asserts on time. The machine's load is printed
at start and end (``/proc/loadavg``): other processes share the CPUs, so compare the two columns of one run.

Run: python benchmarks/bench_harm_batch.py [--model smollm2-135m] [--threads 1] [--units 8 32] [--budget 4]
     [--repeats 3] [--drsr] [--drsr-boundaries N] [--no-sets] [--no-warmup]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from _util import load_average, machine_note, markdown_table


def _loadavg() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


def _timed(calls: dict[str, Callable[[], Any]], repeats: int,
           warmup: bool = True) -> tuple[dict[str, tuple[float, float]], dict[str, Any]]:
    """Median (wall s, CPU s) of each call, interleaved ``repeats`` times after one warm-up each; last results."""
    last = {name: call() for name, call in calls.items()} if warmup else {}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            wall, cpu = time.perf_counter(), time.process_time()
            last[name] = call()
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    return {name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
            for name, t in times.items()}, last


def _sets(sensor: Any, trajs: list[Any], n_units: int, budget: int, repeats: int, warmup: bool) -> list[list[Any]]:
    from interp.data.deletions import DRSR_UNIT_KINDS, history_units
    from interp.data.render import render
    from interp.sensor.prefix import DEFAULT_BATCH_BYTES
    from patching.harm import candidate_sets, set_harms

    pairs = [(t, b) for t in trajs for b in range(1, t.n_steps)]
    traj, b = min(pairs, key=lambda tb: abs(len(history_units(tb[0], tb[1], DRSR_UNIT_KINDS)) - n_units))
    units = len(history_units(traj, b, DRSR_UNIT_KINDS))
    sets = candidate_sets(traj, b, max_k=3, budget=budget, seed=0)
    tokens = render(traj, b + 1, sensor.tokenizer).n_tokens
    med, last = _timed({"one per set": lambda: set_harms(sensor, traj, b, sets, batch_bytes=0, nest=False),
                        "batched": lambda: set_harms(sensor, traj, b, sets, batch_bytes=DEFAULT_BATCH_BYTES)},
                       repeats, warmup)
    diff = max(abs(a.harm - c.harm) for a, c in zip(last["one per set"][1], last["batched"][1], strict=True))
    (w0, c0), (w1, c1) = med["one per set"], med["batched"]
    return [[f"{traj.task_id}@{b}", units, len(sets), tokens, f"{len(sets) / w0:.3f}", f"{len(sets) / w1:.3f}",
             f"{w0 / w1:.2f}", f"{c0:.1f}", f"{c1:.1f}", f"{c0 / c1:.2f}", f"{diff:.1e}"]]


def _drsr(sensor: Any, trajs: list[Any], repeats: int, warmup: bool, limit: int | None) -> list[list[Any]]:
    from interp.data.deletions import UNIT_KINDS
    from interp.pipelines.demo import DemoConfig
    from interp.sensor.prefix import DEFAULT_BATCH_BYTES
    from patching.drsr import boundary_record

    config = DemoConfig()
    b = config.harm_after_step
    chosen = [t for t in sorted(trajs, key=lambda t: t.n_steps) if t.n_steps > b][: config.harm_boundaries][:limit]

    def run(batch_bytes: int, nest: bool) -> list[dict[str, Any]]:
        return [boundary_record(sensor, t, b, 3, config.harm_budget, 0, UNIT_KINDS, batch_bytes=batch_bytes,
                                nest=nest) for t in chosen]

    med, last = _timed({"one per set": lambda: run(0, False), "batched": lambda: run(DEFAULT_BATCH_BYTES, True)},
                       repeats, warmup)
    diff = max(abs(a["harm"] - c["harm"]) for r0, r1 in zip(last["one per set"], last["batched"], strict=True)
               for a, c in zip(r0["sets"], r1["sets"], strict=True))
    n = len(chosen)
    (w0, c0), (w1, c1) = med["one per set"], med["batched"]
    n_sets = sum(len(r["sets"]) for r in last["batched"])
    return [[f"{n} boundaries after step {b} ({', '.join(t.task_id for t in chosen)})", n_sets, f"{w0 / n:.2f}",
             f"{w1 / n:.2f}", f"{w0 / w1:.2f}",
             f"{c0 / n:.2f}", f"{c1 / n:.2f}", f"{c0 / c1:.2f}", f"{diff:.1e}"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="default: smollm2-135m when its weights are cached, else "
                                                      "tiny-qwen3.5")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--units", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--budget", type=int, default=4, help="sampled sets per size 2..3")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--drsr", action="store_true", help="also the demo's DRSR subset, per boundary")
    parser.add_argument("--no-sets", action="store_true", help="skip the sets/s measurement")
    parser.add_argument("--drsr-boundaries", type=int, default=None,
                        help="only the first N of the subset's boundaries (default: all of them)")
    parser.add_argument("--no-warmup", action="store_true", help="time the first calls too (long forwards)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from interp.data.trajectory import load_trajectories
    from interp.pipelines.demo import DEMO_TRAJECTORIES
    from interp.sensor.models import SPECS, load_model

    model = args.model or ("smollm2-135m" if SPECS["smollm2-135m"].available() else "tiny-qwen3.5")
    sensor = load_model(model)
    trajs = load_trajectories(DEMO_TRAJECTORIES)
    load0, start = load_average(), _loadavg()
    print(f"{model}, {machine_note(args.threads)}; /proc/loadavg at start {start}")
    if not args.no_sets:
        rows = [row for n in args.units
                for row in _sets(sensor, trajs, n, args.budget, args.repeats, not args.no_warmup)]
        print(f"\nsets/s, median of {args.repeats} interleaved calls (max_k 3, budget {args.budget}):")
        print(markdown_table(["boundary", "units", "sets", "tokens at b+1", "sets/s one per set", "sets/s batched",
                              "wall ratio", "CPU s one per set", "CPU s batched", "CPU ratio", "max |harm diff|"],
                             rows))
    if args.drsr:
        print(f"\nthe demo's DRSR subset, per boundary, median of {args.repeats} interleaved runs:")
        print(markdown_table(["subset", "sets", "wall s/boundary one per set", "wall s/boundary batched",
                              "wall ratio", "CPU s/boundary one per set", "CPU s/boundary batched", "CPU ratio",
                              "max |harm diff|"], _drsr(sensor, trajs, args.repeats, not args.no_warmup,
                                                     args.drsr_boundaries)))
    print(f"\n/proc/loadavg at end {_loadavg()} (1-min at start {load0:.2f})")


if __name__ == "__main__":
    main()
