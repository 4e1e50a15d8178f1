"""Benchmark: request-level token accounting of the demo set under the nine policies, no model forward.

Every demo trajectory (25) under ``interp.accounting.tokens.DEFAULT_POLICIES``
(full, iclr, iclr_step_only, delete_all, delete_latest, keep_latest, random
r = 0.1, sliding_window k = 5, keep_last_k_reasoning k = 5) with the tiny
model's tokenizer (the accounting renders every request twice: its prompt
and the prompt with its output). ICLR's decisions come from a seeded
synthetic block-entropy table (online and step_only rows): reading a table
is what the accounting does with a real ``interp entropy`` CSV, so the time
is the same. Reported: wall and CPU seconds in total and per policy, and
requests accounted; the machine's load is printed beside the numbers.

Run: python benchmarks/bench_tokens.py [--tokenizer tiny-qwen3.5] [--limit N]
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import pandas as pd

from _util import load_average, machine_note, markdown_table

ROOT = Path(__file__).resolve().parents[1]


def synthetic_entropy(trajs: list) -> pd.DataFrame:
    """One seeded score per reasoning block, in online and step_only rows."""
    rng = random.Random(0)
    rows = [{"task_id": t.task_id, "context": context, "step": s, "block": b, "mean_entropy_bits": rng.random()}
            for t in trajs for s, step in enumerate(t.steps, start=1) for b in range(len(step.blocks))
            for context in ("online", "step_only")]
    return pd.DataFrame(rows)


def main() -> None:
    from interp.accounting.tokens import DEFAULT_POLICIES, account, parse_policy
    from interp.data.trajectory import load_trajectories
    from interp.sensor.models import load_tokenizer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default="tiny-qwen3.5")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    tok = load_tokenizer(args.tokenizer)
    trajs = load_trajectories(ROOT / "data" / "demo" / "trajectories.jsonl")[:args.limit]
    table = synthetic_entropy(trajs)
    print(machine_note(1), "tokenizer", args.tokenizer)
    rows, wall0, cpu0 = [], time.perf_counter(), time.process_time()
    for spec in DEFAULT_POLICIES:
        w, c = time.perf_counter(), time.process_time()
        frame, skipped = account(trajs, [parse_policy(spec)], tok, entropy=table)
        assert not skipped, skipped
        rows.append([spec, len(frame), f"{time.perf_counter() - w:.1f}", f"{time.process_time() - c:.1f}"])
    rows.append(["all nine", sum(r[1] for r in rows), f"{time.perf_counter() - wall0:.1f}",
                 f"{time.process_time() - cpu0:.1f}"])
    print(markdown_table(["policy", "requests", "wall s", "CPU s"], rows))
    print("load after:", load_average())


if __name__ == "__main__":
    main()
