"""Benchmark: the demo's analyses in bfloat16 and float16 against float32, on CPU (and on a GPU via gpu_check).

For each model and dtype one fresh worker process loads the model and runs,
on a subset of the bundled demo (``--trajectories N`` shortest, stated in the
output):

- KL Repair (``patching.kl_repair``, fast path, every layer): per-layer mean
  Repair with its task-bootstrap CI, boundaries kept by the measured-noise
  rule, the median measured noise;
- set-level harm (``patching.harm``, ``--units reasoning``, sets up to 2,
  ``--harm-budget`` samples) at the default boundary of each trajectory;
- ICLR online drop decisions (``interp.extraction.entropy.entropy_table``);
- time (wall and CPU) and peak RSS of the worker.

The parent compares each dtype with float32: per-layer mean Repair difference
(largest and mean absolute), the fraction of layers whose two CIs overlap and
how many sites have the dtype's mean inside float32's CI (and the reverse),
boundaries kept by both / by float32 only / by the dtype only, the issue's
acceptance count (boundaries float32 keeps with d >= 10x its float32 noise
that the dtype excludes, and how many of those have the dtype's own noise
within 10x of d), the median noise with its two components (null patch,
rescheduled ``P_full``), the median relative change of d, harm
pair-ordering agreement (pairs of sets of one boundary whose float32 harms
differ by at least the 0.020 nats/token margin: same sign of the difference
in the dtype), ICLR drop decisions agreeing (fraction of blocks). The probe
AUROC needs the whole demo's store (25 tasks) and is not in this subset run.

Models: ``smollm2-135m`` (real weights), ``tiny-qwen3.5``, and ``wide``: a
random Qwen3.5 hybrid stand-in 4096 wide (d_model of Qwen3.5-9B) and 4 layers
deep (3 Gated-DeltaNet + 1 full attention), built from tiny-qwen3.5's
tokenizer and config into ``$INTERP_CACHE/precision-wide-4096`` on first use.

``--analyses kl_repair,harm,iclr`` (default: all three) runs a part only, e.g.
``--analyses kl_repair --trajectories 4`` is the demo's KL Repair subset.

Run: ``python benchmarks/precision.py --models smollm2-135m,wide --trajectories 2``
(``--device cuda`` on a GPU; ``benchmarks/gpu_check.py --precision`` calls it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

from _util import emit, machine_note, markdown_table, run_worker  # the script's folder; it puts the checkout first

from patching.config import PatchConfig, HarmConfig

RULE = PatchConfig().noise_rule  # the study's KL noise rule: PatchConfig's defaults

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo" / "trajectories.jsonl"
DTYPES = ("fp32", "bf16", "fp16")
MARGIN = HarmConfig.margin  # nats/token: harm's pair-ordering margin (one home: patching.config)


def wide_model_path() -> Path:
    """Build (once) and return the 4096-wide, 4-layer random Qwen3.5 stand-in."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from interp.sensor.models import resolve_spec
    from interp.sensor.specs.base import cache_dir

    out = cache_dir() / "precision-wide-4096"
    if (out / "model.safetensors").exists():
        return out
    tiny = Path(resolve_spec("tiny-qwen3.5")[1])
    config = AutoConfig.from_pretrained(tiny)
    text = getattr(config, "text_config", config)
    text.hidden_size, text.intermediate_size, text.num_hidden_layers = 4096, 8192, 4
    text.layer_types = ["linear_attention"] * 3 + ["full_attention"]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(text, dtype=torch.float32)
    tmp = out.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (tiny / name).exists():
            shutil.copy(tiny / name, tmp / name)
    tmp.rename(out)
    return out


ANALYSES = ("kl_repair", "harm", "iclr")


def worker(model: str, dtype: str, device: str, n_traj: int, harm_budget: int,
           analyses: tuple[str, ...] = ANALYSES) -> dict[str, Any]:
    """One model in one dtype: every analysis of the module docstring on the subset; numbers for the parent."""
    from patching.harm import boundary_harm, default_boundaries
    from patching.kl_repair import default_sites, kl_repair_trajectory, summarize

    from interp.data.trajectory import load_trajectories
    from interp.extraction.entropy import entropy_table
    from interp.sensor.models import load_model

    wall, cpu = time.perf_counter(), time.process_time()
    sensor = (load_model("tiny-qwen3.5", device, dtype, model_path=wide_model_path()) if model == "wide"
              else load_model(model, device, dtype))
    trajs = sorted(load_trajectories(DEMO), key=lambda t: t.n_steps)[:n_traj]
    sites = default_sites(sensor.n_layers)
    times = {}
    t0 = time.perf_counter()
    rows = [r for t in trajs for r in kl_repair_trajectory(sensor, t, "delete_all_reasoning", sites, rule=RULE)] \
        if "kl_repair" in analyses else []
    doc = summarize(rows, sites, "delete_all_reasoning", sensor, "fast", 1, n_boot=500, rule=RULE)
    times["kl_repair_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    harms = {}
    for key in default_boundaries(trajs) if "harm" in analyses else []:
        task_id, _, b = key.rpartition("@")
        traj = next(t for t in trajs if t.task_id == task_id)
        rec = boundary_harm(sensor, traj, int(b), max_k=2, budget=harm_budget, units=("reasoning",))
        harms[key] = {json.dumps(s["members"]): s["harm"] for s in rec.get("sets", [])}
    times["harm_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    table = entropy_table(sensor, trajs, full=False) if "iclr" in analyses else None
    times["iclr_s"] = time.perf_counter() - t0
    return {
        "model": model, "dtype": dtype, "device": device, "d_model": sensor.d_model,
        "trajectories": [t.task_id for t in trajs],
        "sites": doc["sites"], "repair_mean": doc["repair_mean"], "repair_ci": doc["repair_ci"],
        "kept": [f"{s['task_id']}@{s['after_step']}" for s in doc["per_sample"] if not s["excluded"]],
        "boundaries": [f"{s['task_id']}@{s['after_step']}" for s in doc["per_sample"]],
        "d": [s["d"] for s in doc["per_sample"]], "noise": [s["noise"] for s in doc["per_sample"]],
        "noise_null": [s["noise_null"] for s in doc["per_sample"]],
        "noise_schedule": [s["noise_schedule"] for s in doc["per_sample"]],
        "d_threshold_formula": doc["d_threshold"],
        "harm": harms,
        "iclr_dropped": {} if table is None else {f"{r.task_id}@{r.step}.{r.block}": bool(r.dropped)
                                                  for r in table.itertuples()},
        "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu, **times,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _pair_agreement(ref: dict[str, dict[str, float]], other: dict[str, dict[str, float]]) -> tuple[int, int]:
    """(agreeing, counted) pairs of sets of one boundary whose reference harms differ by >= MARGIN."""
    agree = counted = 0
    for key, sets in ref.items():
        names = sorted(set(sets) & set(other.get(key, {})))
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                diff = sets[a] - sets[b]
                if abs(diff) >= MARGIN:
                    counted += 1
                    agree += (other[key][a] - other[key][b]) * diff > 0
    return agree, counted


def compare(ref: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """The dtype's numbers against float32's (module docstring)."""
    out: dict[str, Any] = {"dtype": other["dtype"]}
    if ref["repair_mean"] and other["repair_mean"]:
        diffs = [abs(a - b) for a, b in zip(ref["repair_mean"], other["repair_mean"])]
        overlap = [lo1 <= hi2 and lo2 <= hi1 for (lo1, hi1), (lo2, hi2) in zip(ref["repair_ci"], other["repair_ci"])]
        inside_ref = [lo <= b <= hi for b, (lo, hi) in zip(other["repair_mean"], ref["repair_ci"])]
        inside_other = [lo <= a <= hi for a, (lo, hi) in zip(ref["repair_mean"], other["repair_ci"])]
        out.update(repair_max_abs_diff=max(diffs), repair_mean_abs_diff=sum(diffs) / len(diffs),
                   repair_ci_overlap=sum(overlap) / len(overlap), n_sites=len(diffs),
                   mean_in_fp32_ci=sum(inside_ref), fp32_mean_in_ci=sum(inside_other))
    else:
        out.update(repair_max_abs_diff=None, repair_mean_abs_diff=None, repair_ci_overlap=None, n_sites=0,
                   mean_in_fp32_ci=None, fp32_mean_in_ci=None)
    kept_ref, kept = set(ref["kept"]), set(other["kept"])
    # the acceptance test of issue 25: boundaries float32 keeps with d >= 10 x its float32 noise that the dtype
    # excludes, and of those, how many have the dtype's noise within a factor 10 of d (excluded for a measured reason)
    ref_d = dict(zip(ref["boundaries"], zip(ref["d"], ref["noise"])))
    mine = dict(zip(other["boundaries"], zip(other["d"], other["noise"])))
    strong = [b for b in kept_ref if ref_d[b][0] >= 10 * ref_d[b][1]]
    lost = [b for b in strong if b not in kept and b in mine]
    out.update(strong_fp32=len(strong), strong_lost=len(lost),
               strong_lost_noise_within_10x=sum(mine[b][1] * 10 >= mine[b][0] for b in lost),
               d_rel_diff_median=_median([abs(mine[b][0] - ref_d[b][0]) / ref_d[b][0] for b in ref_d
                                          if b in mine and ref_d[b][0] > 0]),
               d_abs_diff_median=_median([abs(mine[b][0] - ref_d[b][0]) for b in ref_d if b in mine]),
               noise_null_median=_median(other.get("noise_null", [])),
               noise_schedule_median=_median(other.get("noise_schedule", [])))
    out.update(kept_both=len(kept_ref & kept), kept_fp32_only=len(kept_ref - kept), kept_dtype_only=len(kept - kept_ref),
               n_boundaries=len(ref["boundaries"]),
               noise_median=sorted(other["noise"])[len(other["noise"]) // 2] if other["noise"] else None)
    agree, counted = _pair_agreement(ref["harm"], other["harm"])
    out.update(harm_pairs=counted, harm_pair_agreement=agree / counted if counted else None)
    blocks = set(ref["iclr_dropped"]) & set(other["iclr_dropped"])
    out.update(iclr_blocks=len(blocks), iclr_agreement=(sum(ref["iclr_dropped"][k] == other["iclr_dropped"][k]
                                                             for k in blocks) / len(blocks)) if blocks else None)
    return out


def _median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if x == x)  # NaN-free
    return None if not xs else (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def _fmt(x: Any) -> str:
    return "-" if x is None else f"{x:.3g}" if isinstance(x, float) else str(x)


def main() -> None:
    """Run every (model, dtype) worker, compare with float32, print the table (and write ``--out`` JSON)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="smollm2-135m,wide")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="float32 (fp32) first: the reference")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--trajectories", type=int, default=2, help="the N shortest demo trajectories")
    parser.add_argument("--harm-budget", type=int, default=3)
    parser.add_argument("--analyses", default=",".join(ANALYSES), help="comma list of kl_repair, harm, iclr")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "DTYPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        emit(worker(args.worker[0], args.worker[1], args.device, args.trajectories, args.harm_budget,
                    tuple(args.analyses.split(","))))
        return
    print(machine_note(int(os.environ.get("OMP_NUM_THREADS", "0") or 0) or os.cpu_count() or 1), flush=True)
    dtypes = args.dtypes.split(",")
    results: dict[str, Any] = {}
    rows = []
    for model in args.models.split(","):
        runs = {}
        for dtype in dtypes:
            runs[dtype] = run_worker(Path(__file__), ["--worker", model, dtype, "--device", args.device,
                                                      "--trajectories", str(args.trajectories),
                                                      "--harm-budget", str(args.harm_budget),
                                                      "--analyses", args.analyses], timeout_s=7200)
            if "error" in runs[dtype]:
                print(f"{model} {dtype}: {runs[dtype]['error']}", flush=True)
                continue
            r = runs[dtype]
            print(f"{model} {dtype}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, peak RSS "
                  f"{r['peak_rss_mb']:.0f} MiB; kept {len(r['kept'])}/{len(r['boundaries'])}; "
                  f"trajectories {', '.join(r['trajectories'])}", flush=True)
        ref = runs.get(dtypes[0], {})
        comparisons = [compare(ref, runs[d]) for d in dtypes if "error" not in runs.get(d, {"error": 1})
                       and "error" not in ref]
        for c in comparisons:
            r = runs[c["dtype"]]
            rows.append([model, c["dtype"], f"{c['kept_both']}+{c['kept_dtype_only']} / {c['n_boundaries']} "
                         f"({c['kept_fp32_only']} lost)",
                         f"{c['strong_lost']} of {c['strong_fp32']} ({c['strong_lost_noise_within_10x']})",
                         f"{_fmt(c['noise_median'])} ({_fmt(c['noise_null_median'])} / "
                         f"{_fmt(c['noise_schedule_median'])})", _fmt(c["d_rel_diff_median"]),
                         f"{_fmt(c['repair_max_abs_diff'])} / {_fmt(c['repair_mean_abs_diff'])}",
                         f"{c['mean_in_fp32_ci']} / {c['fp32_mean_in_ci']} of {c['n_sites']}",
                         _fmt(c["repair_ci_overlap"]), f"{_fmt(c['harm_pair_agreement'])} ({c['harm_pairs']})",
                         f"{_fmt(c['iclr_agreement'])} ({c['iclr_blocks']})", f"{r['wall_s']:.0f}",
                         f"{r['cpu_s']:.0f}", f"{r['peak_rss_mb']:.0f}"])
        results[model] = {"runs": runs, "comparisons": comparisons}
    print(markdown_table(["model", "dtype", "boundaries kept (both+dtype only / all)",
                          "fp32-strong lost (noise within 10x)", "median noise (null / schedule), nats",
                          "median rel diff of d vs fp32", "mean Repair diff vs fp32 (max / mean)",
                          "sites: mean in fp32 CI / fp32 mean in CI", "sites with CIs overlapping",
                          "harm pair agreement (pairs)", "ICLR drops agreeing (blocks)", "wall s", "CPU s",
                          "peak RSS MiB"],
                         rows), flush=True)
    print(f"load average at end {os.getloadavg()[0]:.2f} / {os.getloadavg()[1]:.2f} / {os.getloadavg()[2]:.2f}",
          flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
