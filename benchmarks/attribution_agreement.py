"""Attribution vs exact on the demo subset (smollm2-135m, CPU): per-boundary Spearman and MAE, printed as each
boundary finishes (a long run on a shared machine still leaves its rows).

For each boundary of the demo's KL Repair subset (the shortest trajectories; ``--task-ids``): the first-order KL
change of the boundary tail at every layer vs exact KL Repair's, ``--exact-sites`` history sites vs their exact
patch, and first-order vs exact DRSR singleton harm (``patching.attribution.attribution_trajectory``, the stage's
own function). Prints Markdown rows; no asserts. Usage:
    python benchmarks/attribution_agreement.py [--task-ids code-003,code-007,office-001,office-002] [--exact-sites 8]
"""

from __future__ import annotations

import argparse
import os

import torch

from _util import ROOT
from interp.data.trajectory import load_trajectories
from interp.sensor.models import SPECS, load_model
from patching.attribution import attribution_trajectory
from patching.config import PatchConfig
from patching.kl_repair import default_sites


def _cell(a: dict) -> str:
    rho = "-" if a["spearman"] is None else f"{a['spearman']:.3f}"
    return f"{rho} / {'-' if a['mae'] is None else format(a['mae'], '.2e')} ({a['n']})"


def main() -> None:
    """Run the boundaries and print one row each."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--task-ids", default="code-003,code-007,office-001,office-002")
    ap.add_argument("--exact-sites", type=int, default=8)
    ap.add_argument("--condition", default="delete_all_reasoning")
    args = ap.parse_args()
    torch.set_num_threads(1)
    SPECS["smollm2-135m"].fetch()
    sensor = load_model("smollm2-135m")
    trajs = {t.task_id: t for t in load_trajectories(ROOT / "data" / "demo" / "trajectories.jsonl")}
    sites = default_sites(sensor.n_layers)
    print(f"smollm2-135m float32, CPU, 1 thread, {args.condition}, load average at start {os.getloadavg()[0]:.1f}")
    print("| boundary | tokens full / deleted | d (nats) | tail: Spearman / MAE nats (sites) | history: Spearman / MAE "
          "nats (sites) | harm: Spearman / MAE nats/token (units) | load |")
    print("|---|---|---|---|---|---|---|")
    for task in args.task_ids.split(","):
        for b in range(1, trajs[task].n_steps + 1):
            (row,), _, _ = attribution_trajectory(sensor, trajs[task], args.condition, sites, [b],
                                                  exact_sites=args.exact_sites, rule=PatchConfig().noise_rule)
            a = row["agreement"]
            print(f"| {task}@{b} | {row['n_tokens_full']} / {row['n_tokens_deleted']} | {row['d']:.3g} | "
                  f"{_cell(a['tail'])} | {_cell(a['history'])} | {_cell(a['harm'])} | {os.getloadavg()[0]:.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()
