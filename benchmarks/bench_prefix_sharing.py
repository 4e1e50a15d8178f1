"""Benchmark: prefix sharing in boundary extraction vs one forward per boundary (SmolLM2-135M, CPU).

Every boundary of the longest demo trajectory (by steps; ``web-004``, 13
steps, 0.9K-4.1K tokens with the SmolLM2 tokenizer), 4 layers of
``resid_pre`` with ``last`` pooling plus the boundary attention row at the same
4 layers. Two methods, each in its own subprocess (time, and peak RSS over the
loaded model):

- ``own``: ``extract_trajectory(..., share_prefix=False)``, the reference path:
  one forward per boundary over its whole render;
- ``shared``: ``share_prefix=True``: one forward over the longest render with
  cuts at the boundaries (plus suffix forwards from cache snapshots for
  conditions that edit the latest step).

Prints the speed-up (own / shared, in wall time and in process CPU time: on a
machine shared with other processes the CPU-time ratio is the steadier one, and
2 torch threads on oversubscribed cores inflate short chunked ops most), the tokens each method pushes
through the model, and the largest feature difference between the two
(absolute, and relative to the reference vector's max magnitude), as a
Markdown table. No asserts on time.

Run: python benchmarks/bench_prefix_sharing.py [--conditions full,delete_latest_reasoning] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from _util import PeakRSS, emit, load_average, machine_note, markdown_table, run_worker

SCRIPT = Path(__file__).resolve()
DEFAULT_LAYERS = "0,10,20,29"


def _config(layers: list[int], share: bool):
    from interp.extraction.extract import ExtractConfig

    return ExtractConfig(layers=layers, sites=["resid_pre"], poolings=["last"], attention_layers=layers,
                         share_prefix=share)


def _trajectory(task_id: str | None):
    from interp.data.trajectory import load_trajectories

    trajs = load_trajectories(Path(__file__).resolve().parents[1] / "data" / "demo" / "trajectories.jsonl")
    if task_id:
        return next(t for t in trajs if t.task_id == task_id)
    return max(trajs, key=lambda t: t.n_steps)


def worker(args: argparse.Namespace) -> None:
    """Child process: load the model, warm up, time one extraction, save its features to ``--out``."""
    from interp.extraction.extract import extract_trajectory
    from interp.sensor.models import load_model

    torch.set_num_threads(args.threads)
    sensor = load_model("smollm2-135m")
    traj = _trajectory(args.task)
    layers = [int(x) for x in args.layers.split(",")]
    share = args.worker == "shared"
    extract_trajectory(sensor, traj, args.condition, _config(layers, share), boundaries=[1])  # warm-up
    with PeakRSS() as mem:
        start, cpu = time.perf_counter(), time.process_time()
        rows = extract_trajectory(sensor, traj, args.condition, _config(layers, share))
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    torch.save({r.after_step: {"features": r.features, "attention": r.attention, "entropy": r.boundary_entropy_bits,
                               "forward": r.forward, "n_tokens": r.n_tokens} for r in rows}, args.out)
    emit({"time_s": elapsed, "cpu_s": cpu, "peak_rss_delta_mb": mem.delta_mb, "n_boundaries": len(rows),
          "max_tokens": max(r.n_tokens for r in rows), "load_avg": load_average()})


def _tokens_forwarded(rows: dict) -> int:
    """Tokens that went through the model: whole renders, the shared base once, and suffixes after their LCP."""
    own = sum(r["n_tokens"] for r in rows.values() if r["forward"] == "own")
    shared = max((r["n_tokens"] for r in rows.values() if r["forward"] == "shared"), default=0)
    snaps = [int(r["forward"].removeprefix("suffix@")) for r in rows.values() if r["forward"].startswith("suffix@")]
    suffix = sum(r["n_tokens"] - int(r["forward"].removeprefix("suffix@"))
                 for r in rows.values() if r["forward"].startswith("suffix@"))
    return own + max([shared] + snaps) + suffix


def _diffs(shared: dict, own: dict) -> tuple[float, float, float, float]:
    """(max abs feature diff, max diff relative to the reference vector's max, max attention diff, max entropy diff)."""
    fa = fr = at = en = 0.0
    for b, ref in own.items():
        got = shared[b]
        for key, vec in ref["features"].items():
            d = float((got["features"][key] - vec).abs().max())
            fa, fr = max(fa, d), max(fr, d / max(float(vec.abs().max()), 1e-12))
        for layer, tables in ref["attention"].items():
            at = max(at, float((got["attention"][layer]["per_segment"] - tables["per_segment"]).abs().max()))
        en = max(en, abs(got["entropy"] - ref["entropy"]))
    return fa, fr, at, en


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default=None, help="demo task_id (default: the one with the most steps)")
    parser.add_argument("--conditions", default="full", help="comma list, e.g. full,delete_latest_reasoning")
    parser.add_argument("--layers", default=DEFAULT_LAYERS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--worker", choices=["own", "shared"], help=argparse.SUPPRESS)
    parser.add_argument("--condition", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    traj = _trajectory(args.task)
    print(f"# prefix sharing: smollm2-135m, {traj.task_id} ({traj.n_steps} boundaries), layers {args.layers} "
          f"resid_pre/last + boundary attention rows at those layers")
    print(machine_note(args.threads))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for cond in args.conditions.split(","):
            res, outs = {}, {}
            for method in ("own", "shared"):
                out = Path(tmp) / f"{cond}-{method}.pt"
                res[method] = run_worker(SCRIPT, ["--worker", method, "--condition", cond, "--out", str(out),
                                                  "--layers", args.layers, "--threads", str(args.threads),
                                                  *(["--task", args.task] if args.task else [])])
                if "error" in res[method]:
                    print(f"{cond}/{method}: {res[method]['error']}", file=sys.stderr)
                    break
                outs[method] = torch.load(out)
                r = res[method]
                print(f"  {cond:<24} {method:<6} {r['time_s']:7.1f} s wall {r['cpu_s']:7.1f} s CPU  "
                      f"peak RSS +{res[method]['peak_rss_delta_mb']:.0f} MiB  (load avg {res[method]['load_avg']:.1f})",
                      flush=True)
            if len(outs) < 2:
                continue
            fa, fr, at, en = _diffs(outs["shared"], outs["own"])
            labels = [r["forward"] for r in outs["shared"].values()]
            rows.append([
                cond, len(labels), f"{_tokens_forwarded(outs['own']):,}", f"{_tokens_forwarded(outs['shared']):,}",
                f"{res['own']['time_s']:.1f}", f"{res['shared']['time_s']:.1f}",
                f"**{res['own']['time_s'] / res['shared']['time_s']:.1f}x**",
                f"{res['own']['cpu_s'] / res['shared']['cpu_s']:.1f}x",
                f"{res['own']['peak_rss_delta_mb']:.0f}", f"{res['shared']['peak_rss_delta_mb']:.0f}",
                f"{fa:.2e}", f"{fr:.2e}", f"{at:.1e}", f"{en:.1e}",
                f"{labels.count('shared')} shared, {sum(x.startswith('suffix@') for x in labels)} suffix",
            ])
    print()
    print(markdown_table(
        ["condition", "boundaries", "tokens fwd (own)", "tokens fwd (shared)", "own s", "shared s", "speed-up (wall)",
         "speed-up (CPU s)",
         "own peak RSS +MiB", "shared peak RSS +MiB", "max abs feat diff", "max rel feat diff",
         "max attn diff", "max entropy diff (bits)", "shared path"], rows))
    print(f"\nload average at end {load_average():.2f}")


if __name__ == "__main__":
    main()
