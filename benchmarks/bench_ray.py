"""Ray vs local executor: scheduling overhead per unit, and the projected GPU-hours of the reference study.

Part 1 (measured, CPU): a local Ray (``ray.init(num_cpus=2)``, 2 actors) against the in-process executor on

- ``noop``: N units that each write one small JSON file (pure scheduling: submit, run, return, write);
- ``extract``: the tiny model's extraction of the first K demo trajectories x {full, delete_all_reasoning}
  (layers 0,3,7, ``last``), the stores checked byte-identical. Ray's start (``ray.init``) and its actors'
  model loads are timed apart from the units.

Part 2 (projected, no GPU): GPU-hours of the full reference study (31 tasks, 265 boundaries, 2 conditions,
32 layers, KL Repair on all boundaries) on N H200s. Units are scheduled longest first to the least-loaded
worker (``interp.io.balanced_shards``, the rule ``--shard`` and the Ray driver use); wall = model load +
the largest worker's summed unit costs + the measured Ray overhead per unit. A unit's cost is FLOPs /
(MFU x peak): forward FLOPs of n tokens = 2 P n + 2 L_full d_attn n^2 (the full-attention layers' causal
QK and AV). Study shape: trajectory lengths are the demo set's final-render lengths (tiny-qwen3.5
tokenizer = the Qwen3.5 tokenizer) cycled to 31 tasks and scaled to ``--context`` mean tokens; boundaries
(265) spread over tasks like the demo's steps, boundary b of n at b/n of its trajectory's length.
Extraction: one forward per (trajectory, condition) (prefix sharing: every boundary's render is a prefix of
the last one for both conditions), deleted renders at ``--deleted-fraction`` of full; KL Repair (fast, all
32 layers + final) costs ``--repair-forwards`` forwards of the boundary's full render (7.5/4.3 = 1.74 and
31.4/19.1 = 1.64 measured in RESULTS.md, KL Repair section), one unit per trajectory.

Run: python benchmarks/bench_ray.py [--n-noop 200] [--limit 12] [--context 30000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from _util import ROOT, load_average, machine_note, markdown_table

from interp.io import Work, atomic_write_json, balanced_shards, run_work

STUDY_TASKS, STUDY_BOUNDARIES, STUDY_CONDITIONS, STUDY_LAYERS = 31, 265, 2, 32


def _noop(folder: str, _ctx: object, key: str) -> None:
    atomic_write_json(Path(folder) / f"{key}.json", {"key": key})


def bench_noop(n: int, tmp: Path, ray_executor: object) -> dict[str, float]:
    """Seconds per unit of N trivial units, in process and on Ray."""
    out = {}
    for name, run in (("local", lambda w: run_work(w, progress=False)),
                      ("ray", lambda w: ray_executor.run(w, progress=False))):
        folder = tmp / f"noop-{name}"
        folder.mkdir()
        work = Work("noop", [f"u{i}" for i in range(n)], lambda: None, partial(_noop, str(folder)),
                    lambda k, f=folder: (f / f"{k}.json").exists())
        started = time.perf_counter()
        run(work)
        out[name] = (time.perf_counter() - started) / n
    return out


def bench_extract(limit: int, tmp: Path, ray_executor: object) -> dict[str, float]:
    """Extraction of ``limit`` demo trajectories x 2 conditions, local vs Ray (stores compared)."""
    from interp.data.trajectory import load_trajectories
    from interp.extraction.batch import extract_to_store
    from interp.extraction.extract import ExtractConfig
    from interp.pipelines import stages

    trajs = load_trajectories(ROOT / "data" / "demo" / "trajectories.jsonl")[:limit]
    sensor = stages.sensor("tiny-qwen3.5")
    config = ExtractConfig(layers=[0, 3, 7], poolings=["last"])
    out: dict[str, float] = {"units": 2 * len(trajs)}
    for name, executor in (("local", None), ("ray", ray_executor)):
        started = time.perf_counter()
        counts = extract_to_store(sensor, trajs, ["full", "delete_all_reasoning"], config, tmp / name, progress=False,
                                  executor=executor, load=partial(stages.sensor, "tiny-qwen3.5") if executor else None)
        out[name] = time.perf_counter() - started
        out["tokens"] = counts["tokens"]
    files = [{str(p.relative_to(tmp / n)): p.read_bytes() for p in (tmp / n).rglob("*") if p.is_file()}
             for n in ("local", "ray")]
    out["identical"] = files[0] == files[1]
    return out


def ray_startup(workers: int) -> tuple[float, float]:
    """Seconds of ``ray.init`` and of starting ``workers`` actors that each load the tiny model."""
    import ray

    from interp.pipelines import stages

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # a local cluster: report nothing outside
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    init = time.perf_counter() - started

    @ray.remote(num_cpus=1)
    class Loader:
        def __init__(self) -> None:
            self.sensor = stages.sensor("tiny-qwen3.5")

    started = time.perf_counter()
    actors = [Loader.remote() for _ in range(workers)]
    ray.get([a.__ray_ready__.remote() for a in actors])
    load = time.perf_counter() - started
    for actor in actors:
        ray.kill(actor)
    return init, load


def study_units(context: float, deleted_fraction: float) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Token lengths of the study's extraction units and of each task's boundary renders (see module docstring)."""
    from interp.data.render import render
    from interp.data.trajectory import load_trajectories
    from interp.sensor.models import load_tokenizer

    demo = load_trajectories(ROOT / "data" / "demo" / "trajectories.jsonl")
    tok = load_tokenizer("tiny-qwen3.5")
    lengths = [render(t, t.n_steps, tok).n_tokens for t in demo]
    steps = [t.n_steps for t in demo]
    tasks = [(lengths[i % len(demo)], steps[i % len(demo)]) for i in range(STUDY_TASKS)]
    scale = context / (sum(n for n, _ in tasks) / STUDY_TASKS)
    total_steps = sum(s for _, s in tasks)
    counts = [max(1, round(s * STUDY_BOUNDARIES / total_steps)) for _, s in tasks]
    counts[counts.index(max(counts))] += STUDY_BOUNDARIES - sum(counts)
    extraction, boundaries = {}, {}
    for i, ((n, _), k) in enumerate(zip(tasks, counts)):
        full = n * scale
        extraction[f"t{i}__full"] = full
        extraction[f"t{i}__delete_all_reasoning"] = full * deleted_fraction
        boundaries[f"t{i}"] = [full * b / k for b in range(1, k + 1)]
    return extraction, boundaries


def project(args: argparse.Namespace, overhead_s: float) -> tuple[list[list[object]], dict[str, float]]:
    """GPU-hours of the study on N H200s (rows) and the per-forward assumptions used."""
    def seconds(n_tokens: float) -> float:
        flops = 2 * args.params * n_tokens + 2 * args.full_layers * args.d_attn * n_tokens ** 2
        return flops / (args.mfu * args.peak_tflops * 1e12)

    extraction, boundaries = study_units(args.context, args.deleted_fraction)
    costs = {"extract": {k: seconds(n) for k, n in extraction.items()},
             "kl_repair": {k: sum(args.repair_forwards * seconds(n) for n in ns) for k, ns in boundaries.items()}}
    rows = []
    for n_gpus in args.gpus:
        for stage, unit_costs in costs.items():
            int_costs = {k: int(v * 1e6) for k, v in unit_costs.items()}
            loads = [sum(unit_costs[k] for k in shard) for shard in balanced_shards(int_costs, n_gpus)]
            wall = args.load_s + max(loads) + overhead_s * len(unit_costs) / n_gpus
            rows.append([stage, n_gpus, len(unit_costs), f"{sum(unit_costs.values()) / 3600:.3f}",
                         f"{wall / 60:.1f}", f"{n_gpus * wall / 3600:.2f}",
                         f"{sum(unit_costs.values()) / (n_gpus * max(loads)):.0%}"])
    info = {"forward_30k_s": seconds(30_000), "tokens_extract": sum(extraction.values()),
            "tokens_repair": sum(sum(v) for v in boundaries.values())}
    return rows, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-noop", type=int, default=200)
    parser.add_argument("--limit", type=int, default=12, help="demo trajectories extracted (x 2 conditions)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--context", type=float, default=30_000, help="mean final context of a study task, tokens")
    parser.add_argument("--deleted-fraction", type=float, default=122 / 160,
                        help="delete_all_reasoning render / full render (issue #17: 122K vs 160K tokens)")
    parser.add_argument("--repair-forwards", type=float, default=1.74, help="KL Repair cost in forwards per boundary")
    parser.add_argument("--params", type=float, default=9e9)
    parser.add_argument("--full-layers", type=int, default=8, help="full-attention layers of the 9B hybrid")
    parser.add_argument("--d-attn", type=int, default=4096, help="query heads x head dim of a full-attention layer")
    parser.add_argument("--peak-tflops", type=float, default=989, help="H200 dense bf16 peak")
    parser.add_argument("--mfu", type=float, default=0.4, help="assumed model FLOPs utilisation of a long prefill")
    parser.add_argument("--load-s", type=float, default=60, help="assumed 9B bf16 load per worker, seconds")
    parser.add_argument("--gpus", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8, 16])
    parser.add_argument("--skip-measure", action="store_true", help="projection only (overhead from --overhead-s)")
    parser.add_argument("--overhead-s", type=float, default=0.0)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    print(machine_note(1))
    overhead = args.overhead_s
    if not args.skip_measure:
        import ray

        from interp.pipelines.executors import RayExecutor

        tmp = Path(tempfile.mkdtemp(prefix="bench_ray."))
        try:
            init, load = ray_startup(args.workers)
            executor = RayExecutor(workers=args.workers)
            noop = bench_noop(args.n_noop, tmp, executor)
            ext = bench_extract(args.limit, tmp, executor)
            ray.shutdown()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        overhead = max(noop["ray"] - noop["local"], 0.0)
        print(markdown_table(["measurement", "local", "ray (2 actors)", "ray / local"], [
            [f"noop: s per unit ({args.n_noop} units)", f"{noop['local'] * 1e3:.2f} ms",
             f"{noop['ray'] * 1e3:.2f} ms", f"{noop['ray'] / noop['local']:.1f}x"],
            [f"extract: {int(ext['units'])} units, {int(ext['tokens'])} tokens (wall s, actors loaded in the run)",
             f"{ext['local']:.1f}", f"{ext['ray']:.1f}", f"{ext['ray'] / ext['local']:.2f}x"],
            ["ray.init / 2 actors loading the tiny model (s)", "-", f"{init:.1f} / {load:.1f}", "-"],
        ]))
        print(f"stores identical (bytes): {ext['identical']}; load average at end {load_average():.2f}")
    rows, info = project(args, overhead)
    print(f"\nprojection: forward of 30K tokens = {info['forward_30k_s']:.2f} s (assumed MFU {args.mfu}, "
          f"peak {args.peak_tflops} TFLOP/s); extraction {info['tokens_extract'] / 1e6:.2f}M tokens, "
          f"KL Repair {info['tokens_repair'] / 1e6:.2f}M boundary tokens x {args.repair_forwards} forwards; "
          f"Ray overhead {overhead * 1e3:.2f} ms/unit; load {args.load_s:.0f} s per worker")
    print(markdown_table(["stage", "H200s", "units", "GPU-h of compute", "wall min", "GPU-h held",
                          "balance (mean/max load)"], rows))
    json.dump({"overhead_s": overhead, **info}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
