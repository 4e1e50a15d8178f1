"""Benchmark: online ICLR with prefix reuse (now and before #40) vs the naive per-step loop, over the demo set.

All run the ``iclr`` condition (rho = 0.8) on every demo trajectory at its
last boundary with an online ``EntropyScorer``: ``reuse=True`` continues each
step's forward from the previous step's input at their longest shared prefix
(an attention-only cache cut back there, a hybrid's snapshot at the latest
block start before it); "before #40" is the rule it replaced (snapshots only
where each step's reasoning starts and where its input ends, never a cut
cache); ``reuse=False`` re-runs every step's input (the compressed history up
to the end of that step's reasoning) from scratch. All must make the same
drop decisions (checked). Reported: wall and CPU time, tokens run through the
model, and the ratio to the current rule. One thread unless ``--threads``;
the machine's load is printed beside the numbers.

Run: python benchmarks/bench_iclr.py [--models tiny-qwen3.5,smollm2-135m] [--limit N] [--threads 1] [--no-naive]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from _util import load_average, machine_note, markdown_table

ROOT = Path(__file__).resolve().parents[1]


def _before_40(sensor: Any) -> Any:
    """An online scorer with the reuse rule before #40: snapshots at the step's reasoning start and input end."""
    from interp.extraction.entropy import EntropyScorer, Plan, entropy_positions
    from interp.sensor.prefix import Resume

    class Before(EntropyScorer):
        def _forward(self, task_id: str, ids: list[int], spans: list[Any]) -> dict[int, float]:
            plan = Plan(entropy=entropy_positions([s for s in spans if s.start >= 1]))
            self.forwards += 1
            if self._resume is None:
                self._resume = Resume(self.sensor, cut=False)
            before = self._resume.tokens_run
            out = self._resume.run(ids, plan, {min(s.start for s in spans), len(ids)}, context=task_id)
            self.tokens_run += self._resume.tokens_run - before
            return out.entropy

    return Before(sensor)


def run(model: str, limit: int | None, naive: bool) -> list[list[object]]:
    """Time online ICLR now, before #40 and (``naive``) without prefix reuse on ``model``; one row per method."""
    from interp.data.conditions import apply_condition
    from interp.data.trajectory import load_trajectories
    from interp.extraction.entropy import EntropyScorer
    from interp.sensor.models import SPECS, load_model

    if SPECS[model].fetch and not SPECS[model].available():
        SPECS[model].fetch()
    sensor = load_model(model)
    trajs = load_trajectories(ROOT / "data" / "demo" / "trajectories.jsonl")[:limit]
    methods = {"online, prefix reuse": lambda: EntropyScorer(sensor),
               "online, prefix reuse before #40": lambda: _before_40(sensor),
               "naive per-step loop": lambda: EntropyScorer(sensor, reuse=False)}
    rows, edits, cpu_s = [], {}, {}
    for name, make in list(methods.items())[:3 if naive else 2]:
        scorer = make()
        wall, cpu = time.perf_counter(), time.process_time()
        edits[name] = [apply_condition("iclr", t, t.n_steps, scorer=scorer)[0] for t in trajs]
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        cpu_s[name] = cpu
        rows.append([model, name, len(trajs), sum(t.n_steps for t in trajs), scorer.forwards, scorer.tokens_run,
                     f"{wall:.1f}", f"{cpu:.1f}"])
    assert all(e == edits["online, prefix reuse"] for e in edits.values()), "a reuse rule changed a drop decision"
    for row in rows:
        row.append(f"{cpu_s[str(row[1])] / cpu_s['online, prefix reuse']:.2f}x")
    return rows


def main() -> None:
    """Parse arguments, run each model, print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="tiny-qwen3.5,smollm2-135m")
    parser.add_argument("--limit", type=int, default=None, help="first N demo trajectories only")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-naive", action="store_true", help="skip the from-scratch loop (slow on a real model)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_note(args.threads), f"load average at start {load_average():.2f}")
    rows = [row for model in args.models.split(",") for row in run(model.strip(), args.limit, not args.no_naive)]
    print(markdown_table(["model", "method", "trajectories", "steps", "forwards", "tokens run", "wall s", "CPU s",
                          "CPU / current rule"], rows))
    print(f"load average at end {load_average():.2f}")


if __name__ == "__main__":
    main()
