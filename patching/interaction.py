"""Interaction structure (DRSR Fig 2, Fig 6) and attention density (Fig 10) of deletion candidates.

Interaction of a set A = harm(A) - sum of its singleton harms (``patching.harm``). Over sets of two or more
units, grouped by

- ``size``: the number of units;
- ``composition``: the unit kinds in the set (``reasoning+observation``, in ``UNIT_KINDS`` order);
- ``semantic``: the mean cosine over member pairs of their pooled representations at the chosen layer
  (``patching.relations``), binned at fixed edges ``SEMANTIC_BINS``;
- ``heads``: the mean over member pairs of the number of heads (all full-attention layers together) whose
  boundary-token attention mass on *each* member's span is at least ``HEAD_THRESHOLD``;
- ``span``: steps between the earliest and the latest member;

each group's mean interaction has a task-bootstrap 95% CI (``interp.stats.task_bootstrap_ci``; none with
fewer than 3 tasks).

Attention density of a candidate at a full-attention layer: the boundary token's attention mass on its span,
averaged over heads, per token of the span. Candidates are split into those selected for deletion and those
retained. With a gate scorer the split is DRSR's: the gate's choice at each boundary among its pool
(``split`` "gate"); without one it is the toolkit's: the exact singleton harm selects a candidate when harm <=
the unsafe threshold (``split`` "harm"). Lower attention alone is not a deletion-safety test: the densities
only describe the split.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from interp.data.deletions import UNIT_KINDS, Unit
from interp.stats import task_bootstrap_ci

HEAD_THRESHOLD = 0.05  # attention mass of one head on a member's span (fraction of its row)
SEMANTIC_BINS = (-1.0, 0.25, 0.5, 0.75, 1.0)  # cosine bin edges, right-inclusive


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def set_structure(record: dict[str, Any], layer_index: int, head_threshold: float = HEAD_THRESHOLD
                  ) -> list[dict[str, Any]]:
    """Per set of 2+ units with an interaction: {task_id, size, composition, semantic, heads, span, interaction}
    (semantic and heads null when a member was not captured)."""
    cands = {tuple(c["unit"]): c for c in record.get("candidates", [])}
    rows = []
    for s in record["sets"]:
        ms = [tuple(m) for m in s["members"]]
        if len(ms) < 2 or s.get("interaction") is None:
            continue
        kinds = "+".join(k for k in UNIT_KINDS if any(m[0] == k for m in ms))
        have = all(m in cands for m in ms)
        semantic = heads = None
        if have:
            pairs = list(itertools.combinations(ms, 2))
            semantic = float(np.mean([_cos(np.asarray(cands[a]["rep"][layer_index]),
                                           np.asarray(cands[b]["rep"][layer_index])) for a, b in pairs]))
            heads = float(np.mean([int(np.sum((np.asarray(cands[a]["attention"]) >= head_threshold)
                                              & (np.asarray(cands[b]["attention"]) >= head_threshold)))
                                   for a, b in pairs]))
        rows.append({"task_id": record["task_id"], "size": len(ms), "composition": kinds, "semantic": semantic,
                     "heads": heads, "span": max(m[1] for m in ms) - min(m[1] for m in ms),
                     "interaction": s["interaction"]})
    return rows


def _semantic_bin(x: float) -> str:
    """The label of x's cosine bin: ``<=0.25``, ``0.25-0.5``, ..., ``>0.75`` (right-inclusive)."""
    edges = SEMANTIC_BINS[1:-1]
    for i, hi in enumerate(edges):
        if x <= hi:
            return f"<={hi:g}" if i == 0 else f"{edges[i - 1]:g}-{hi:g}"
    return f">{edges[-1]:g}"


def grouped_means(rows: Sequence[dict[str, Any]], key: str, n_boot: int, seed: int = 0
                  ) -> list[dict[str, Any]]:
    """[{group, mean_interaction, ci, n_sets, n_tasks}] of ``rows`` grouped by ``key`` (semantic: binned, heads:
    rounded to a whole head), in group order."""
    def group(row: dict[str, Any]) -> Hashable:
        v = row[key]
        if v is None:
            return None
        return _semantic_bin(v) if key == "semantic" else int(round(v)) if key == "heads" else v

    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        g = group(row)
        if g is not None:
            groups.setdefault(g, []).append(row)
    bins = [_semantic_bin(x) for x in SEMANTIC_BINS[1:]] + [_semantic_bin(2.0)]
    order = sorted(groups, key=lambda g: bins.index(g) if key == "semantic" else g)
    out = []
    for g in order:
        values = np.array([[r["interaction"]] for r in groups[g]], float)
        tasks = np.array([r["task_id"] for r in groups[g]])
        ci = (task_bootstrap_ci(values, tasks, n_boot=n_boot, seed=seed)[0].tolist()
              if len(set(tasks)) >= 3 else None)
        out.append({"group": g, "mean_interaction": float(values.mean()), "ci": ci, "n_sets": len(values),
                    "n_tasks": int(len(set(tasks)))})
    return out


def interaction_structure(records: Sequence[dict[str, Any]], layer_index: int,
                          head_threshold: float = HEAD_THRESHOLD, *, n_boot: int, seed: int = 0
                          ) -> dict[str, Any]:
    """The ``interaction`` section of ``drsr.json``: mean interaction by size, composition, semantic overlap,
    attention-head overlap and temporal span, with task-bootstrap CIs, and the per-set rows."""
    rows = [r for rec in records for r in set_structure(rec, layer_index, head_threshold)]
    return {"head_threshold": head_threshold, "semantic_bins": list(SEMANTIC_BINS),
            **{f"by_{key}": grouped_means(rows, key, n_boot, seed)
               for key in ("size", "composition", "semantic", "heads", "span")},
            "sets": rows}


def attention_density(records: Sequence[dict[str, Any]], unsafe: float,
                      gate: dict[tuple[str, int], tuple[list[Unit], list[Unit]]] | None = None,
                      scorer: str | None = None, parts: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The ``attention_density`` section: per candidate {task_id, after_step, unit, harm, selected, part, density
    [n_attention_layers]} and per layer the mean density of the selected and the retained candidates.

    ``gate`` None: the toolkit's split, every candidate with a measured singleton harm, selected when harm <=
    ``unsafe``. ``gate`` {(task_id, after_step): (chosen units, pool units)} (``patching.drsr.gate_selection``,
    from the scorer file ``scorer``): DRSR's split, the gate's pool members at each boundary, selected when the
    gate's chosen set holds them (an abstaining boundary selects none); ``parts``: the scorer's split, naming
    each candidate's part (train, validation, test; null outside it or without a gate)."""
    part_of = {t: name for name, tasks in (parts or {}).items() for t in tasks}
    rows = []
    for rec in records:
        single = {tuple(s["members"][0]): s["harm"] for s in rec["sets"] if len(s["members"]) == 1}
        chosen, pool = gate[(rec["task_id"], rec["after_step"])] if gate is not None else ([], [])
        for c in rec.get("candidates", []):
            u = tuple(c["unit"])
            if not (u in single if gate is None else u in pool):
                continue
            density = (np.asarray(c["attention"], float).mean(axis=1) / max(c["n_tokens"], 1)).tolist()
            rows.append({"task_id": rec["task_id"], "after_step": rec["after_step"], "unit": list(u),
                         "harm": single.get(u), "selected": single[u] <= unsafe if gate is None else u in chosen,
                         "part": part_of.get(rec["task_id"]) if gate is not None else None, "density": density})
    layers = list(records[0]["attention_layers"]) if records and "attention_layers" in records[0] else []
    summary = []
    for i, layer in enumerate(layers):
        entry: dict[str, Any] = {"layer": layer}
        for name, flag in (("selected", True), ("retained", False)):
            d = [r["density"][i] for r in rows if r["selected"] is flag]
            entry[name] = {"mean": float(np.mean(d)) if d else None, "n": len(d)}
        summary.append(entry)
    return {"split": "harm" if gate is None else "gate", "scorer": scorer if gate is not None else None,
            "unsafe_threshold": unsafe, "layers": summary, "candidates": rows}
