"""KL Repair: the fast path vs the TransformerLens reference and vs naive per-site plain forwards (smollm2-135m, CPU).

1. One boundary, all 31 sites (resid_pre of 30 layers + final resid_post), at
   contexts of ~1K and ~4K tokens, ``delete_all_reasoning``:
   - ``fast``: ``kl_repair_trajectory`` (shared prefix, batched variants, sdpa);
   - ``reference``: ``method="reference"``, the plain TransformerLens way
     (bridge ``run_with_hooks``, eager attention): one forward of the full
     render, one unpatched and one patched forward of the deleted render per
     site. With ``--ref-sites k < 31`` it runs on k sites and adds
     ``31 - k`` times one timed bridge forward of the deleted render (each
     site is an identical forward); the row says so;
   - ``naive sdpa``: the same count of forwards at plain sdpa speed, the
     strongest per-site baseline: one full + 32 deleted plain forwards
     (each kind timed once). With full and deleted forward times F and D,
     a fast path that ran both whole would be bounded by (F + 32 D) / (F + D),
     ~16x when D ~ F; ours starts the deleted forward from the full run's
     cache where the renders agree, so it may exceed that.
2. One demo trajectory, all boundaries x 31 sites, for ``delete_all_reasoning``
   and ``delete_latest_reasoning``: shared (``fast`` over all boundaries) vs
   naive (per boundary one full and 32 deleted plain sdpa forwards, each
   render's forward timed once).

Prints Markdown rows as they finish; no asserts. Usage:
    python benchmarks/bench_patching.py [--sizes 1024,4096] [--ref-sites 31] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from interp.sensor.forward import Plan, run_plan
from interp.sensor.models import SPECS, load_model
from interp.data.render import render
from interp.data.trajectory import Trajectory, load_trajectories
from patching.config import PatchConfig
from patching.kl_repair import boundary_renders, default_sites, kl_repair_trajectory

RULE = PatchConfig().noise_rule  # the study's KL noise rule: PatchConfig's defaults

DEMO = "data/demo/trajectories.jsonl"


def _long_trajectory(traj: Trajectory, target_tokens: int, tokenizer: Any) -> Trajectory:
    """The demo trajectory with its steps repeated until the render at the last step reaches ~target tokens."""
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


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def _plain_forward(sensor: Any, ids: list[int]) -> float:
    """Seconds of one plain sdpa forward with the last position's log-probs (what one naive site costs)."""
    return _timed(lambda: run_plan(sensor, ids, Plan(logprobs=[len(ids) - 1])))[0]


def _bridge_forward(sensor: Any, ids: list[int]) -> float:
    """Seconds of one bridge forward (what one reference site costs)."""
    with torch.inference_mode():
        return _timed(lambda: sensor.bridge.run_with_hooks(torch.tensor([ids]), fwd_hooks=[]))[0]


def one_boundary(sensor: Any, traj: Trajectory, sites: list[tuple[str, int]], ref_sites: int) -> list[str]:
    """Rows of part 1 for one long trajectory (its last boundary)."""
    b, cond = traj.n_steps, "delete_all_reasoning"
    full, deleted = boundary_renders(sensor, traj, cond, [b])
    full_ids, del_ids = full[b].input_ids, deleted[b].input_ids
    t_fast, fast = _timed(lambda: kl_repair_trajectory(sensor, traj, cond, sites, [b], rule=RULE))
    some = sites[:: max(1, len(sites) // ref_sites)][:ref_sites] if ref_sites < len(sites) else sites
    t_ref, ref = _timed(lambda: kl_repair_trajectory(sensor, traj, cond, some, [b], method="reference", rule=RULE))
    how = "all sites"
    if len(some) < len(sites):
        t_site = _bridge_forward(sensor, del_ids)
        t_ref += (len(sites) - len(some)) * t_site
        how = f"{len(some)} sites + {len(sites) - len(some)} x {t_site:.1f} s"
    index = [sites.index(s) for s in some]
    diff = max(abs(fast[0].repair[i] - y) for i, y in zip(index, ref[0].repair))
    t_f, t_d = _plain_forward(sensor, full_ids), _plain_forward(sensor, del_ids)
    t_naive = t_f + (len(sites) + 1) * t_d
    tokens = f"{len(full_ids)} / {len(del_ids)}"
    return [f"| 1 boundary x {len(sites)} sites | {tokens} | {t_fast:.1f} | reference (TL bridge, {how}) | "
            f"{t_ref:.1f} | **{t_ref / t_fast:.1f}x** | {diff:.1e} |",
            f"| 1 boundary x {len(sites)} sites | {tokens} | {t_fast:.1f} | naive sdpa (F {t_f:.1f} s + "
            f"{len(sites) + 1} x D {t_d:.1f} s) | {t_naive:.1f} | **{t_naive / t_fast:.1f}x** | |"]


def per_trajectory(sensor: Any, traj: Trajectory, sites: list[tuple[str, int]]) -> list[str]:
    """Rows of part 2: all boundaries x all sites, shared vs naive plain forwards."""
    rows, boundaries, t_full = [], list(range(1, traj.n_steps + 1)), {}
    for cond in ("delete_all_reasoning", "delete_latest_reasoning"):
        full, deleted = boundary_renders(sensor, traj, cond, boundaries)
        t_full = t_full or {b: _plain_forward(sensor, full[b].input_ids) for b in boundaries}
        t_shared, out = _timed(lambda: kl_repair_trajectory(sensor, traj, cond, sites, rule=RULE))
        t_naive = sum(t_full[b] + (len(sites) + 1) * _plain_forward(sensor, deleted[b].input_ids) for b in boundaries)
        rows.append(f"| {traj.task_id}: {traj.n_steps} boundaries x {len(sites)} sites, {cond} | up to "
                    f"{max(r.n_tokens_full for r in out)} | {t_shared:.1f} | naive sdpa (per boundary F + "
                    f"{len(sites) + 1} x D) | {t_naive:.1f} | **{t_naive / t_shared:.1f}x** | |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,4096", help="context sizes of part 1 ('' to skip)")
    parser.add_argument("--ref-sites", type=int, default=31, help="sites the reference runs on (rest timed once)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-trajectory", action="store_true", help="skip part 2")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    SPECS["smollm2-135m"].fetch()
    sensor = load_model("smollm2-135m")
    sites = default_sites(sensor.n_layers)
    trajs = load_trajectories(DEMO)
    print("| measurement | tokens (full / deleted) | fast (s) | baseline | baseline (s) | ratio | max abs Repair diff |")
    print("|---|---|---|---|---|---|---|", flush=True)
    for size in [int(s) for s in args.sizes.split(",") if s]:
        print("\n".join(one_boundary(sensor, _long_trajectory(trajs[0], size, sensor.tokenizer), sites,
                                     args.ref_sites)), flush=True)
    if not args.skip_trajectory:
        traj = max(trajs, key=lambda t: t.n_steps if t.n_steps <= 8 else 0)
        print("\n".join(per_trajectory(sensor, traj, sites)), flush=True)


if __name__ == "__main__":
    main()
