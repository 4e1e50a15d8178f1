"""Benchmark: peak memory of the fast ``run_with_cache`` (boundary row, every residual site) vs a plain forward.

SmolLM2-135M on CPU, the demo renders concatenated and cut to length (as in
``bench_extract.py``). Methods, each in its own subprocess after a warm-up
of the same call on 128 tokens:

- ``fast cache``: ``sensor.run_with_cache(ids, names_filter=resid)`` with
  ``resid`` = ``hook_resid_pre`` and ``hook_resid_post`` of every layer
  (60 sites), default positions (the last token): sdpa, rows sliced at
  capture; returns the last token's logits;
- ``plain``: ``sensor.hf_model.model(ids, use_cache=False)`` plus the
  unembedding of the last row: the same forward with no hooks (the ratio's
  denominator);
- ``bridge cache``: ``sensor.bridge.run_with_cache(ids, names_filter=resid)``:
  the TransformerLens bridge (eager attention, a full N x N pattern per
  layer in flight, every position of each site kept). Slow on CPU: measured
  only at the sizes given by ``--bridge-sizes``.

Memory is the peak RSS a call adds over the loaded model (sampled every 2 ms,
``_util.py``); time is wall and process CPU of one call. No asserts.

Run: python benchmarks/bench_api.py [--sizes 8192] [--bridge-sizes 1024,2048] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from _util import PeakRSS, emit, load_average, machine_note, markdown_table, run_worker
from bench_extract import _ids

SCRIPT = Path(__file__).resolve()
METHODS = ["fast cache", "plain", "bridge cache"]


def _resid(name: str) -> bool:
    return name.endswith(("hook_resid_pre", "hook_resid_post"))


def _call(sensor, method: str, ids: list[int]):
    ids_t = torch.tensor([ids])
    if method == "fast cache":
        return sensor.run_with_cache(ids_t, names_filter=_resid)
    with torch.inference_mode():
        if method == "plain":
            hidden = sensor.hf_model.model(input_ids=ids_t, use_cache=False).last_hidden_state
            return sensor.hf_model.lm_head(hidden[:, -1:])
        if method == "bridge cache":
            return sensor.bridge.run_with_cache(ids_t, names_filter=_resid)
    raise ValueError(method)


def worker(args: argparse.Namespace) -> None:
    """Child process: load, warm up on 128 tokens, then one timed call at the requested size."""
    from interp.sensor.models import load_model

    torch.set_num_threads(args.threads)
    sensor = load_model("smollm2-135m")
    ids = _ids(args.size)
    out = _call(sensor, args.worker, ids[:128])
    if args.worker != "plain":
        assert len(out[1].keys()) == 2 * sensor.n_layers
    del out
    with PeakRSS() as mem:
        start, cpu = time.perf_counter(), time.process_time()
        out = _call(sensor, args.worker, ids)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    kept = sum(v.numel() * v.element_size() for v in out[1].values()) if args.worker != "plain" else 0
    del out
    emit({"time_s": elapsed, "cpu_s": cpu, "peak_rss_delta_mb": mem.delta_mb, "kept_mb": kept / 2**20,
          "load_avg": load_average()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="8192", help="comma list of context lengths (<= 8192) for fast and plain")
    parser.add_argument("--bridge-sizes", default="1024,2048", help="comma list of context lengths for the bridge")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    sizes = [int(s) for s in args.sizes.split(",") if s]
    bridge_sizes = [int(s) for s in args.bridge_sizes.split(",") if s]
    print("# run_with_cache memory: smollm2-135m, hook_resid_pre + hook_resid_post of every layer (60 sites)")
    print(machine_note(args.threads))
    jobs = sorted({(n, m) for n in sizes + bridge_sizes for m in ("fast cache", "plain")}
                  | {(n, "bridge cache") for n in bridge_sizes})
    results = {}
    for n, method in jobs:
        res = run_worker(SCRIPT, ["--worker", method, "--size", str(n), "--threads", str(args.threads)])
        results[(n, method)] = res
        print(f"  {n:>5} {method:<13} {res}", flush=True, file=sys.stderr)
    rows = []
    for n, method in jobs:
        res, plain = results[(n, method)], results.get((n, "plain"), {})
        if "error" in res:
            rows.append([n, method, "error", "", "", "", "", ""])
            continue
        ratio = (f"{res['peak_rss_delta_mb'] / plain['peak_rss_delta_mb']:.2f}"
                 if plain.get("peak_rss_delta_mb", 0) > 0 else "")
        t_ratio = f"{res['cpu_s'] / plain['cpu_s']:.2f}" if plain.get("cpu_s") else ""
        rows.append([n, method, f"{res['time_s']:.1f}", f"{res['cpu_s']:.1f}", f"{res['peak_rss_delta_mb']:.0f}",
                     f"{res['kept_mb']:.2f}", ratio, t_ratio])
    print()
    print(markdown_table(["tokens", "method", "wall s", "CPU s", "peak RSS +MiB", "cache MiB", "memory / plain",
                          "CPU / plain"], rows))
    print(f"\nload average at end {load_average():.2f}")


if __name__ == "__main__":
    main()
