"""KL Repair: fast shared-prefix path vs the one-forward-per-site reference, smollm2-135m on CPU.

1. One boundary, all 31 sites (resid_pre of 30 layers + final resid_post), at
   contexts of ~1K and ~4K tokens: time of the fast path vs the reference path
   (ratio; ceiling ~ number of sites).
2. One demo trajectory, all boundaries x all sites: shared (one forward per
   condition + one boundary token per (boundary, site)) vs naive (one forward
   per boundary per site). The naive time is measured on ``--naive-sites``
   sites and scaled linearly to all sites (each site is an identical forward);
   the script says so in its output.

Prints a Markdown table; no asserts. Usage:
    python benchmarks/bench_patching.py [--sizes 1024,4096] [--naive-sites 3]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import torch

from interp.models import SPECS, load_model
from interp.trajectory import load_trajectories
from patching.kl_repair import default_sites, kl_repair_trajectory

DEMO = "data/demo/trajectories.jsonl"


def _long_trajectory(traj, target_tokens: int, tokenizer):
    """The demo trajectory with its steps repeated until the render at the last step reaches ~target tokens."""
    from interp.render import render

    steps = list(traj.steps)
    while render(replace(traj, steps=tuple(steps)), len(steps), tokenizer).n_tokens < target_tokens:
        steps += list(traj.steps)
    lo, hi = 1, len(steps)
    while lo < hi:  # shortest prefix of steps reaching the target
        mid = (lo + hi) // 2
        if render(replace(traj, steps=tuple(steps[:mid])), mid, tokenizer).n_tokens >= target_tokens:
            hi = mid
        else:
            lo = mid + 1
    return replace(traj, steps=tuple(steps[:lo]), annotations=())


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,4096")
    parser.add_argument("--naive-sites", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    SPECS["smollm2-135m"].fetch()
    sensor = load_model("smollm2-135m")
    sites = default_sites(sensor.n_layers)
    trajs = load_trajectories(DEMO)
    rows = ["| measurement | tokens | fast (s) | reference / naive (s) | ratio | max abs Repair diff |",
            "|---|---|---|---|---|---|"]
    for size in [int(s) for s in args.sizes.split(",")]:
        traj = _long_trajectory(trajs[0], size, sensor.tokenizer)
        b = traj.n_steps
        t_fast, fast = _timed(lambda: kl_repair_trajectory(sensor, traj, "delete_all_reasoning", sites, [b]))
        t_ref, ref = _timed(lambda: kl_repair_trajectory(sensor, traj, "delete_all_reasoning", sites, [b],
                                                         method="reference"))
        diff = max(abs(x - y) for x, y in zip(fast[0].repair, ref[0].repair))
        rows.append(f"| 1 boundary x {len(sites)} sites | {fast[0].n_tokens_full} | {t_fast:.1f} | {t_ref:.1f} | "
                    f"{t_ref / t_fast:.1f}x | {diff:.1e} |")
        print(rows[-1], flush=True)
    traj = max(trajs, key=lambda t: t.n_steps if t.n_steps <= 8 else 0)
    t_shared, shared = _timed(lambda: kl_repair_trajectory(sensor, traj, "delete_all_reasoning", sites))
    few = sites[:: max(1, len(sites) // args.naive_sites)][: args.naive_sites]
    t_naive_few, _ = _timed(lambda: [kl_repair_trajectory(sensor, traj, "delete_all_reasoning", few, [b],
                                                          method="reference")
                                     for b in range(1, traj.n_steps + 1)])
    t_naive = t_naive_few * len(sites) / len(few)
    rows.append(f"| {traj.task_id}: {traj.n_steps} boundaries x {len(sites)} sites | up to "
                f"{max(r.n_tokens_full for r in shared)} | {t_shared:.1f} | {t_naive:.1f} (measured on "
                f"{len(few)} sites, scaled to {len(sites)}) | {t_naive / t_shared:.1f}x | |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
