"""Benchmark: cost of boundary extraction vs a plain forward and vs a full TransformerLens cache (SmolLM2-135M, CPU).

Contexts of 1K, 4K and 8K tokens (the SmolLM2 renders of the demo
trajectories concatenated, cut to length; 8192 is SmolLM2's position limit).
Methods, each in its own subprocess after a short warm-up of the same call:

- ``ours``: ``run_plan`` keeping the last token's ``resid_pre`` at 4 layers,
  the boundary attention row at the same 4 layers and the boundary
  log-probs: what extraction does per boundary;
- ``plain``: ``sensor.hf_model.model(ids)``: the base model, sdpa, no hooks,
  no unembedding (HF's default ``use_cache=True``, as a user would call it);
- ``plain+lm_head``: ``sensor.hf_model(ids)``: the full CausalLM forward, logits
  over every position ([N, 49152] float32: 1.6 GB at 8K);
- ``bridge cache``: ``sensor.bridge.run_with_cache(ids)``, everything cached
  (eager attention, every hook incl. the N x N scores and pattern per layer).
  Only where its lower-bound size (scores + pattern: 2 x 30 layers x 9 heads
  x N^2 x 4 bytes) fits ``--bridge-max-gb`` (12 GB): 1K only (4K would need
  >= 36 GB, 8K >= 145 GB).

Time is one timed call: wall (``time.perf_counter``) and process CPU time
(``time.process_time``, all threads; the steadier figure when other processes
share the cores); memory is the peak RSS the call adds over the loaded model
(sampled every 2 ms, see ``_util.py``). Ratios are method / plain. Workers
other than the bridge's load the HF model alone (``run_plan`` reads only
``hf_model`` and ``device``), which keeps their start-up short. No asserts on
time.

Run: python benchmarks/bench_extract.py [--sizes 1024,4096,8192] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from _util import PeakRSS, emit, load_average, machine_note, markdown_table, run_worker

SCRIPT = Path(__file__).resolve()
METHODS = ["ours", "plain", "plain+lm_head", "bridge cache"]
N_LAYERS, N_HEADS = 30, 9  # SmolLM2-135M


def _ids(n: int) -> list[int]:
    """The first n tokens of the demo renders (last boundary of each trajectory) concatenated."""
    from interp.sensor.models import load_tokenizer
    from interp.data.render import render
    from interp.data.trajectory import load_trajectories

    tok = load_tokenizer("smollm2-135m")
    ids: list[int] = []
    for traj in load_trajectories(Path(__file__).resolve().parents[1] / "data" / "demo" / "trajectories.jsonl"):
        ids += render(traj, traj.n_steps, tok).input_ids
        if len(ids) >= n:
            return ids[:n]
    raise SystemExit(f"the demo renders hold only {len(ids)} tokens (< {n})")


def _call(sensor, method: str, ids: list[int], layers: list[int]):
    from interp.sensor.forward import Plan, run_plan

    n = len(ids)
    ids_t = torch.tensor([ids])
    if method == "ours":
        plan = Plan(pooled={(l, "last"): ("resid_pre", l, [n - 1]) for l in layers},
                    rows={(l, n - 1): "boundary" for l in layers}, logprobs=[n - 1])
        return run_plan(sensor, ids, plan)
    with torch.inference_mode():
        if method == "plain":
            return sensor.hf_model.model(input_ids=ids_t)
        if method == "plain+lm_head":
            return sensor.hf_model(input_ids=ids_t)
        if method == "bridge cache":
            return sensor.bridge.run_with_cache(ids_t)
    raise ValueError(method)


class _PlainSensor:
    """What ``run_plan`` reads of a Sensor (``hf_model``, ``device``), without booting the TransformerLens bridge."""

    def __init__(self) -> None:
        from transformers import AutoModelForCausalLM

        from interp.sensor.models import resolve_spec

        _, path = resolve_spec("smollm2-135m")
        self.hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa",
                                                             local_files_only=True, use_kernels=False).eval().requires_grad_(False)
        self.device = torch.device("cpu")


def worker(args: argparse.Namespace) -> None:
    """Child process: load, warm up on 128 tokens, then one timed call at the requested size."""
    from interp.sensor.models import load_model

    torch.set_num_threads(args.threads)
    # Only the bridge method needs the bridge; the others skip its boot (same HF modules, same kernels).
    sensor = load_model("smollm2-135m") if args.worker == "bridge cache" else _PlainSensor()
    layers = [int(x) for x in args.layers.split(",")]
    ids = _ids(args.size)
    _call(sensor, args.worker, ids[:128], layers)  # warm-up: kernels, allocator
    with PeakRSS() as mem:
        start, cpu = time.perf_counter(), time.process_time()
        out = _call(sensor, args.worker, ids, layers)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    del out
    emit({"time_s": elapsed, "cpu_s": cpu, "peak_rss_delta_mb": mem.delta_mb, "rss_base_mb": mem.base / 2**20,
          "load_avg": load_average()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1024,4096,8192", help="comma list of context lengths (<= 8192)")
    parser.add_argument("--layers", default="0,10,20,29")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma list of {METHODS}")
    parser.add_argument("--bridge-max-gb", type=float, default=12.0)
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    sizes = [int(s) for s in args.sizes.split(",")]
    methods = args.methods.split(",")
    print(f"# extraction cost: smollm2-135m, layers {args.layers}: last-token resid_pre + boundary attention rows")
    print(machine_note(args.threads))
    results: dict[tuple[int, str], dict] = {}
    notes = []
    for n in sizes:
        for method in methods:
            if method == "bridge cache":
                lower_gb = 2 * N_LAYERS * N_HEADS * n * n * 4 / 1e9
                if lower_gb > args.bridge_max_gb:
                    notes.append(f"bridge cache at {n} tokens skipped: its attention scores + patterns alone "
                                 f"take >= {lower_gb:.0f} GB (> {args.bridge_max_gb:g} GB budget)")
                    continue
            res = run_worker(SCRIPT, ["--worker", method, "--size", str(n), "--layers", args.layers,
                                      "--threads", str(args.threads)])
            results[(n, method)] = res
            if "error" in res:
                print(f"  {n:>5} {method:<14} ERROR {res['error']}", file=sys.stderr, flush=True)
            else:
                print(f"  {n:>5} {method:<14} {res['time_s']:8.2f} s wall {res['cpu_s']:8.2f} s CPU  "
                      f"peak RSS +{res['peak_rss_delta_mb']:7.0f} MiB  (load avg {res['load_avg']:.1f})", flush=True)

    rows = []
    for n in sizes:
        plain = results.get((n, "plain"), {})
        for method in methods:
            res = results.get((n, method))
            if res is None or "error" in res:
                rows.append([n, method, "skipped" if res is None else "error", "", "", "", "", ""])
                continue
            t_ratio = f"{res['time_s'] / plain['time_s']:.2f}" if "time_s" in plain else ""
            c_ratio = f"{res['cpu_s'] / plain['cpu_s']:.2f}" if "cpu_s" in plain else ""
            m_ratio = (f"{res['peak_rss_delta_mb'] / plain['peak_rss_delta_mb']:.2f}"
                       if plain.get("peak_rss_delta_mb", 0) > 0 else "")
            rows.append([n, method, f"{res['time_s']:.2f}", f"{res['cpu_s']:.2f}", f"{res['peak_rss_delta_mb']:.0f}",
                         t_ratio, c_ratio, m_ratio])
    print()
    print(markdown_table(["tokens", "method", "wall s", "CPU s", "peak RSS +MiB", "wall / plain", "CPU / plain",
                          "memory / plain"], rows))
    for note in notes:
        print(f"\n- {note}")
    print(f"\nload average at end {load_average():.2f}")


if __name__ == "__main__":
    main()
