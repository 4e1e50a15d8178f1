"""Benchmark table: does KL Repair's measured noise bound the real error of d in a reduced precision? (issue 38)

Reads two ``interp patch`` output folders of the same trajectories and
condition, a float32 one (the reference) and a bfloat16/float16 one, and
prints per boundary: d in float32 and in the dtype, the error |d_dtype -
d_fp32|, the dtype's measured noise, noise_factor x noise, whether the dtype
run kept the boundary, and whether the error is within noise_factor x noise
(the acceptance: every kept boundary must be). Rows come from
``kl_repair.json`` when the run finished, else from its per-trajectory parts
(``parts/*/*.json``, the rows as ``BoundaryRepair`` fields), so a run still
going can be tabled as far as it got.

Usage (the demo's KL subset, the 4 shortest demo trajectories)::

    ids=code-003,code-007,office-001,office-002
    OMP_NUM_THREADS=1 python -m interp patch --trajectories data/demo/trajectories.jsonl --task-ids $ids \\
        --dtype fp32 --out runs/fp32
    OMP_NUM_THREADS=1 python -m interp patch ... --dtype bf16 --out runs/bf16
    python benchmarks/kl_noise_bound.py runs/fp32 runs/bf16

The reduced-precision run may be split over several processes by ``--task-ids``
(one folder each): pass every folder after the float32 one.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from _util import markdown_table

from patching.config import PatchConfig

RULE = PatchConfig().noise_rule  # the rule the runs compared were made under (the defaults)

HEADER = ["boundary", "d fp32", "d dtype", "abs err", "noise (dtype)", "factor x noise", "kept (dtype)",
          "err <= factor x noise", "noise components (null / schedule / d recomputed / weights)"]


def rows_of(folder: Path) -> dict[str, dict[str, Any]]:
    """``{task_id@after_step: row}`` of a KL Repair output folder (its kl_repair.json, else its parts)."""
    doc = folder / "kl_repair.json"
    if doc.exists():
        rows = json.loads(doc.read_text())["per_sample"]
    else:
        rows = [r for part in sorted(folder.glob("parts/*/*.json")) for r in json.loads(part.read_text())]
    return {f"{r['task_id']}@{r['after_step']}": r for r in rows if not r.get("skipped")}


def _g(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def table(ref: dict[str, dict[str, Any]],
          other: dict[str, dict[str, Any]]) -> tuple[list[list[str]], int, int, float]:
    """The per-boundary rows (boundaries in both runs), the count of kept boundaries and of kept ones unbounded,
    and the largest |err| / noise over every boundary (the smallest factor that would bound them all)."""
    out, kept, unbounded, ratios = [], 0, 0, []
    for key, r in other.items():
        if key not in ref:
            continue
        err, limit = abs(r["d"] - ref[key]["d"]), RULE.factor * r["noise"]
        is_kept = r["d"] > max(RULE.min_kl, limit)  # the rule, applied again as summarize does
        kept += is_kept
        unbounded += is_kept and err > limit
        if r["noise"] > 0:
            ratios.append(err / r["noise"])
        out.append([key, f"{ref[key]['d']:.4g}", f"{r['d']:.4g}", _g(err), _g(r["noise"]), _g(limit),
                    "kept" if is_kept else "excluded", "yes" if err <= limit else "NO",
                    " / ".join(_g(r.get(k)) for k in ("noise_null", "noise_schedule", "noise_d", "noise_weights"))])
    return out, kept, unbounded, max(ratios, default=math.nan)


def main() -> None:
    """Print the table and its summary line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fp32", type=Path, help="interp patch output folder, float32 (the reference)")
    ap.add_argument("other", type=Path, nargs="+",
                    help="interp patch output folder(s) of the reduced precision (runs split by --task-ids)")
    args = ap.parse_args()
    other = {key: row for folder in args.other for key, row in rows_of(folder).items()}
    rows, kept, unbounded, worst = table(rows_of(args.fp32), other)
    print(markdown_table(HEADER, rows))
    print(f"\n{len(rows)} boundaries in both runs; kept in the dtype: {kept}; kept with |err| > "
          f"{RULE.factor:g} x noise: {unbounded}; largest |err| / noise over every boundary: "
          f"{worst:.3g} (the smallest factor that would bound them all)")


if __name__ == "__main__":
    main()
