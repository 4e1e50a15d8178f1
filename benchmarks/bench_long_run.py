"""A long real-style run on the tiny model: extraction, KL Repair and harm, wall time and peak RSS per stage.

The run is synthetic: the demo trajectories' steps concatenated (tools
merged) until it has ``--steps`` steps (default 50), every 4th step without
reasoning (as real agents act), observations padded until the render at the
last boundary has at least ``--min-tokens`` tokens (default 20,000) in the
tiny tokenizer. Each stage runs in its own subprocess (``_util.run_worker``),
so one stage's peak cannot mask another's; the figure is the peak RSS
sampled during the stage minus the RSS just before it (model loaded), plus
the absolute peak.

Stages:

- ``extract``: every boundary, conditions ``full`` and ``delete_all_reasoning``,
  all 8 layers, poolings last / mean_reasoning / mean_latest_step, boundary
  attention at the full-attention layers, into a store (``extract_to_store``);
  ``--max-tokens`` applies the over-long rule per boundary (the count skipped
  is reported);
- ``patch``: fast KL Repair, ``delete_all_reasoning``, all 9 default sites, at
  ``--patch-boundaries`` (default 10,20,30,40,50; ``all`` for every boundary);
- ``harm``: set-level harm at ``--harm-boundaries`` (default 49, the
  longest history with a recorded next step) of ``--harm-sets`` candidate sets
  (default 12: singletons of reasoning blocks spread evenly over the history,
  early ones included, whose suffix forwards are the longest, and pairs of
  them), through ``patching.harm.set_harms``. Every singleton of a 49-step
  history (about 100 blocks) would cost about 100 forwards of up to 33K
  tokens; the per-set time and the bounded memory are what this measures.

Usage: ``python benchmarks/bench_long_run.py [--steps 50] [--min-tokens 20000] [--stages extract,patch,harm]
[--patch-boundaries 10,20,30,40,50|all] [--threads 1]``.
Prints a Markdown table; no asserts.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import ROOT, MB, PeakRSS, emit, load_average, machine_note, markdown_table, run_worker  # noqa: E402

DEMO = ROOT / "data" / "demo" / "trajectories.jsonl"
PAD = "\n" + "log line: the service answered 200 OK in 12 ms; cache hit; nothing else to report. " * 4


def long_run(n_steps: int, min_tokens: int, tokenizer: Any):
    """The synthetic ``n_steps``-step run (module docstring) and its token count at the last boundary."""
    from interp.data.render import render
    from interp.data.trajectory import load_trajectories

    demo = load_trajectories(DEMO)
    steps, tools = [], {}
    for traj in demo * (1 + n_steps // 4):
        for step in traj.steps:
            steps.append(step)
        tools.update({t["name"]: t for t in traj.tools})
        if len(steps) >= n_steps:
            break
    steps = [replace(s, reasoning="") if i % 4 == 3 else s for i, s in enumerate(steps[:n_steps])]
    base = replace(demo[0], task_id="long-run", steps=tuple(steps), tools=tuple(tools.values()), annotations=())
    traj, pad = base, 0
    while (n := render(traj, n_steps, tokenizer).n_tokens) < min_tokens:
        pad += 1
        traj = replace(base, steps=tuple(replace(s, observation=s.observation + PAD * pad)
                                         if isinstance(s.observation, str) else s for s in base.steps))
    return traj, n


def worker(args: argparse.Namespace) -> None:
    """One stage in this process; prints its result as JSON."""
    import torch

    torch.set_num_threads(args.threads)
    from interp.sensor.models import load_model

    sensor = load_model("tiny-qwen3.5")
    traj, n_tokens = long_run(args.steps, args.min_tokens, sensor.tokenizer)
    out: dict[str, Any] = {"stage": args.worker, "steps": traj.n_steps, "tokens_last": n_tokens,
                           "no_reasoning_steps": sum(not s.blocks for s in traj.steps)}
    with PeakRSS() as mem:
        started = time.perf_counter()
        if args.worker == "extract":
            from interp.extraction.batch import extract_to_store
            from interp.extraction.extract import ExtractConfig

            config = ExtractConfig(layers=list(range(sensor.n_layers)),
                                   poolings=["last", "mean_reasoning", "mean_latest_step"],
                                   attention_layers=list(sensor.full_attention_layers), max_tokens=args.max_tokens)
            with tempfile.TemporaryDirectory() as tmp:
                counts = extract_to_store(sensor, [traj], ["full", "delete_all_reasoning"], config,
                                          Path(tmp) / "store", progress=False)
            out["detail"] = (f"{counts['samples']} boundary rows, {counts['skipped_long']} skipped over "
                             f"{args.max_tokens} tokens, {counts['tokens']:,} tokens in rows")
        elif args.worker == "patch":
            from patching.config import PatchConfig
            from patching.kl_repair import default_sites, kl_repair_trajectory

            bs = (list(range(1, traj.n_steps + 1)) if args.patch_boundaries == "all"
                  else [int(b) for b in args.patch_boundaries.split(",")])
            rows = kl_repair_trajectory(sensor, traj, "delete_all_reasoning", default_sites(sensor.n_layers), bs,
                                        max_tokens=args.max_tokens, rule=PatchConfig().noise_rule)
            out["detail"] = (f"{len(bs)} boundaries x 9 sites, {sum(bool(r.skipped) for r in rows)} skipped, "
                             f"{sum(r.excluded for r in rows)} excluded (d below threshold)")
        else:
            from interp.data.deletions import history_units
            from patching.harm import set_harms

            n_sets = 0
            for b in (int(x) for x in args.harm_boundaries.split(",")):
                pool = history_units(traj, b, ["reasoning"])
                k = max(1, (2 * args.harm_sets) // 3)
                singles = [pool[round(i * (len(pool) - 1) / max(1, k - 1))] for i in range(k)]
                sets = [(u,) for u in dict.fromkeys(singles)]
                sets += [(sets[i][0], sets[-1 - i][0]) for i in range(args.harm_sets - len(sets))
                         if sets[i][0] != sets[-1 - i][0]]
                set_harms(sensor, traj, b, sets)
                n_sets += len(sets)
            out["detail"] = f"{args.harm_boundaries}: {n_sets} sets (reasoning blocks spread over the history)"
        out["wall_s"] = time.perf_counter() - started
    out["peak_rss_mb"], out["added_rss_mb"] = mem.peak / MB, mem.delta_mb
    emit(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--min-tokens", type=int, default=20_000)
    parser.add_argument("--max-tokens", type=int, default=42_000)
    parser.add_argument("--patch-boundaries", default="10,20,30,40,50")
    parser.add_argument("--harm-boundaries", default="49")
    parser.add_argument("--harm-sets", type=int, default=12)
    parser.add_argument("--stages", default="extract,patch,harm")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", choices=["extract", "patch", "harm"])
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    print(machine_note(args.threads))
    rows = []
    for stage in args.stages.split(","):
        flags = [f"--steps={args.steps}", f"--min-tokens={args.min_tokens}", f"--max-tokens={args.max_tokens}",
                 f"--patch-boundaries={args.patch_boundaries}", f"--harm-boundaries={args.harm_boundaries}",
                 f"--harm-sets={args.harm_sets}",
                 f"--threads={args.threads}", f"--worker={stage}"]
        res = run_worker(Path(__file__), flags)
        print(json.dumps(res), flush=True)
        if "error" in res:
            rows.append([stage, "-", "-", "-", "-", res["error"][:120]])
            continue
        rows.append([stage, f"{res['steps']} ({res['no_reasoning_steps']} without reasoning)",
                     f"{res['tokens_last']:,}", f"{res['wall_s']:.1f}", f"{res['added_rss_mb']:.0f} / "
                     f"{res['peak_rss_mb']:.0f}", res["detail"]])
    print(markdown_table(["stage", "steps", "tokens at b = n", "wall s", "peak RSS MiB (added / total)", "what"],
                         rows))
    print(f"load average at end {load_average():.2f}")


if __name__ == "__main__":
    main()
