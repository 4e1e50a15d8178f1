"""History granularity (DRSR Table 8, Fig 4): is a whole step the right unit of deletion, or its blocks?

From one run of the harm machinery with ``step`` units and block units (``reasoning``, ``observation``,
``tool_exchange``: the blocks of a step) at the same boundary, the singleton harms give, per state (boundary):

- the within-state **range** of step harms (max - min over the history's steps) and of block harms (over every
  block of every step); states with fewer than two of a kind have no range of that kind;
- the **unsafe parents**: steps whose harm exceeds ``UNSAFE`` (nats/token), and among them those that contain a
  **safe child**, a block of that step whose harm is at most ``UNSAFE``;
- per step, its normalised historical position ``step / b`` (1 = the latest step) and its lowest-harm child.

Medians over states come with a task-bootstrap 95% CI (``interp.stats.task_resamples``; the median of each
resample's states).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from interp.stats import task_resamples
from patching.config import DrsrConfig

# nats/token: a deletion whose harm exceeds this is unsafe. The toolkit's assumption (DRSR states 0.020 as its
# pair-ordering margin and mean-harm limit, not as an unsafe cut): interp drsr --unsafe; one home: patching.config
UNSAFE = DrsrConfig.unsafe
BLOCK_KINDS = ("reasoning", "observation", "tool_exchange")


def median_ci(values: Sequence[float], groups: Sequence[str], n_boot: int, seed: int = 0
              ) -> tuple[float | None, list[float] | None]:
    """The median of ``values`` and its task-bootstrap 95% CI (None with fewer than 3 tasks)."""
    v = np.asarray(values, float)
    if not len(v):
        return None, None
    if len(set(groups)) < 3:
        return float(np.median(v)), None
    draws = [np.median(v[r]) for r in task_resamples(np.asarray(groups), n_boot, np.random.default_rng(seed))]
    return float(np.median(v)), [float(x) for x in np.percentile(draws, [2.5, 97.5])]


def step_children(record: dict[str, Any], unsafe: float = UNSAFE) -> list[dict[str, Any]]:
    """Per step unit measured at the boundary: {step, position, harm, unsafe, min_child_harm, n_children,
    safe_child} (min_child_harm and safe_child null without a block of that step)."""
    single = {tuple(s["members"][0]): s["harm"] for s in record["sets"] if len(s["members"]) == 1}
    b = record["after_step"]
    rows = []
    for (kind, t, _), harm in sorted(single.items(), key=lambda kv: kv[0][1]):
        if kind != "step":
            continue
        children = [h for (k, tt, _), h in single.items() if k in BLOCK_KINDS and tt == t]
        low = min(children) if children else None
        rows.append({"step": t, "position": t / b, "harm": harm, "unsafe": harm > unsafe, "min_child_harm": low,
                     "n_children": len(children), "safe_child": None if low is None else low <= unsafe})
    return rows


def granularity(records: Sequence[dict[str, Any]], unsafe: float = UNSAFE, *, n_boot: int, seed: int = 0
                ) -> dict[str, Any]:
    """The ``granularity`` section of ``drsr.json`` (``patching.drsr.FIELDS``) from harm boundary records."""
    step_range: list[tuple[str, float]] = []
    block_range: list[tuple[str, float]] = []
    steps: list[dict[str, Any]] = []
    for rec in records:
        single = [(s["members"][0][0], s["harm"]) for s in rec["sets"] if len(s["members"]) == 1]
        for kind_set, ranges in (({"step"}, step_range), (set(BLOCK_KINDS), block_range)):
            h = [v for k, v in single if k in kind_set]
            if len(h) >= 2:
                ranges.append((rec["task_id"], max(h) - min(h)))
        steps += [{"task_id": rec["task_id"], "after_step": rec["after_step"], **row}
                  for row in step_children(rec, unsafe)]
    parents = [s for s in steps if s["unsafe"] and s["n_children"]]
    with_safe = sum(bool(s["safe_child"]) for s in parents)
    out: dict[str, Any] = {"unsafe_threshold": unsafe}
    for name, rows in (("step_range", step_range), ("block_range", block_range)):
        med, ci = median_ci([v for _, v in rows], [t for t, _ in rows], n_boot, seed)
        out[name] = {"median": med, "ci": ci, "n_states": len(rows)}
    out.update({"n_unsafe_parents": len(parents), "n_unsafe_parents_with_safe_child": with_safe,
                "unsafe_parent_safe_child_fraction": with_safe / len(parents) if parents else None,
                "steps": steps})
    return out
