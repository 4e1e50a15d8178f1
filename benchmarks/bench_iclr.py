"""Benchmark: online ICLR with prefix reuse vs the naive per-step loop, over the demo set.

Both run the ``iclr`` condition (rho = 0.8) on every demo trajectory at its
last boundary with an online ``EntropyScorer``: ``reuse=True`` continues each
step's forward from a cache snapshot of the longest prefix shared with the
previous step's input; ``reuse=False`` re-runs every step's input (the
compressed history up to the end of that step's reasoning) from scratch.
Both must make the same drop decisions (checked). Reported: wall and CPU
time, tokens run through the model, and the ratio naive / reuse. One thread
unless ``--threads``; the machine's load is printed beside the numbers.

Run: python benchmarks/bench_iclr.py [--models tiny-qwen3.5,smollm2-135m] [--limit N] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from _util import load_average, machine_note, markdown_table

ROOT = Path(__file__).resolve().parents[1]


def run(model: str, limit: int | None) -> list[list[object]]:
    """Time online ICLR with and without prefix reuse on ``model``; one table row per method."""
    from interp.data.conditions import apply_condition
    from interp.data.trajectory import load_trajectories
    from interp.extraction.entropy import EntropyScorer
    from interp.sensor.models import SPECS, load_model

    if SPECS[model].fetch and not SPECS[model].available():
        SPECS[model].fetch()
    sensor = load_model(model)
    trajs = load_trajectories(ROOT / "data" / "demo" / "trajectories.jsonl")[:limit]
    rows, edits, seconds = [], {}, {}
    for reuse in (True, False):
        scorer = EntropyScorer(sensor, reuse=reuse)
        wall, cpu = time.perf_counter(), time.process_time()
        edits[reuse] = [apply_condition("iclr", t, t.n_steps, scorer=scorer)[0] for t in trajs]
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        seconds[reuse] = wall
        rows.append([model, "online, prefix reuse" if reuse else "naive per-step loop", len(trajs),
                     sum(t.n_steps for t in trajs), scorer.forwards, scorer.tokens_run, f"{wall:.1f}", f"{cpu:.1f}"])
    assert edits[True] == edits[False], "prefix reuse changed a drop decision"
    rows[1].append(f"{seconds[False] / seconds[True]:.2f}x")
    rows[0].append("1.00x")
    return rows


def main() -> None:
    """Parse arguments, run each model, print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="tiny-qwen3.5,smollm2-135m")
    parser.add_argument("--limit", type=int, default=None, help="first N demo trajectories only")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_note(args.threads), f"load average at start {load_average():.2f}")
    rows = [row for model in args.models.split(",") for row in run(model.strip(), args.limit)]
    print(markdown_table(["model", "method", "trajectories", "steps", "forwards", "tokens run", "wall s", "CPU s",
                          "naive / reuse (wall)"], rows))
    print(f"load average at end {load_average():.2f}")


if __name__ == "__main__":
    main()
