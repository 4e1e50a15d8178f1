"""Decision-conditioned relations across depth (DRSR Fig 3a): does the candidate's relation to the current
pre-action state order deletion sets by their exact harm, and at which layer?

At boundary b each candidate unit ``u`` (``interp.data.deletions``) has a representation ``r_u(l)``: its token
span in the full render, mean-pooled at ``resid_pre`` of layer l; the current state ``s(l)`` is the boundary
token (the last prompt token) at layer l. Both come from one forward of the prompt at b (:func:`prompt_capture`:
the render the agent sends at b, nothing of ``y``), the very forward the online set-risk gate runs
(``patching.gate.SetGate``), so what the gate is trained on is bit for bit what it reads online. They are
stored projected to ``proj_dim`` dimensions by one seeded Gaussian map ``d_model -> proj_dim`` scaled by
``1 / sqrt(proj_dim)`` (Johnson-Lindenstrauss: inner products and cosines kept in expectation; no projection
when ``d_model <= proj_dim``). The same forward keeps the boundary token's attention row at every
full-attention layer (``interp.sensor.kernels.attention_rows``, never an N x N pattern): per unit and head,
the attention mass on the unit's span.

A set's features are summed over its members (``FAMILIES``), per layer:

| family | per member | reads |
|---|---|---|
| ``relation`` | ``r_u * s``, ``abs(r_u - s)``, ``cos(r_u, s)`` | the candidate with this boundary's state (decision-conditioned) |
| ``block`` | ``r_u`` | the candidate alone |
| ``mismatched`` | as ``relation`` with ``s`` of another task's boundary (the next task in sorted order, cyclic) | a control: the relation to a state that made no decision here |
| ``state`` | ``s`` (once per set) | the current state alone: constant within a boundary, so every pair ties (0.5): the control of DRSR Table 8 |
| ``surface`` | set size, tokens removed, mean and min recency (b - step), mean step position (step / b), unit-kind counts | layer-free nuisance baseline |

Each family is fitted by ``StandardScaler`` + ``RidgeCV`` (alphas ``ALPHAS``, chosen inside each training
fold) to the exact set harm, with ``GroupKFold`` by trajectory (``task_id``; no task in two folds), and scored
by pair-ordering accuracy of the out-of-fold predictions at the margin (``patching.harm.ordered_pairs``:
pairs of sets of the same boundary, of two or more units each). CIs resample tasks
(``interp.stats.task_resamples``) over the per-task pair scores and counts.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from interp.data.deletions import UNIT_KINDS, Unit
from interp.data.render import Rendered
from interp.sensor.forward import Outputs, Plan
from interp.stats import task_resamples
from patching.config import DrsrConfig
from patching.harm import AGGREGATORS, ordered_pairs

if TYPE_CHECKING:
    from interp.data.trajectory import Trajectory
    from interp.sensor.protocol import Sensor

FAMILIES = ("relation", "block", "mismatched", "state", "surface")
ALPHAS = tuple(10.0 ** np.arange(-2, 5))
PROJ_DIM = DrsrConfig.proj_dim
MARGIN_GRID = tuple(float(x) for x in np.round(np.linspace(0.0, 0.1, 11), 3))  # nats/token (Fig 3b)


def unit_positions(full: Rendered, unit: Sequence[Any]) -> list[int]:
    """Token positions of a unit's span(s) in the full render: a block, an observation, a call with its result,
    or every segment of a step."""
    kind, t, k = unit[0], unit[1], unit[2]
    wanted = {"reasoning": ("reasoning_block",), "observation": ("observation",),
              "tool_exchange": ("action", "observation")}.get(kind)
    segments = [s for s in full.spans(step=t) if wanted is None or (s.kind in wanted and s.block == k)]
    return [p for s in segments for p in range(s.start, s.end)]


def projection(d_model: int, proj_dim: int = PROJ_DIM, seed: int = 0) -> np.ndarray | None:
    """The seeded Gaussian map ``[d_model, proj_dim]`` / sqrt(proj_dim), or None when d_model <= proj_dim."""
    if d_model <= proj_dim:
        return None
    return np.random.default_rng(seed).standard_normal((d_model, proj_dim)) / np.sqrt(proj_dim)


@dataclass
class Capture:
    """What one boundary's full forward keeps for the relations: the plan and the outputs it fills."""

    units: list[Unit]
    layers: list[int]
    attention_layers: list[int]
    positions: dict[Unit, list[int]] = field(default_factory=dict)
    boundary: int = -1
    plan: Plan = field(default_factory=Plan)
    outputs: Outputs = field(default_factory=Outputs)


def capture_plan(full: Rendered, prompt_length: int, units: Sequence[Unit], layers: Sequence[int],
                 attention_layers: Sequence[int]) -> Capture:
    """The pooled sites (each unit's span and the boundary token at every layer) and the boundary token's attention
    rows at the full-attention layers, for the full render's forward."""
    cap = Capture([(str(u[0]), int(u[1]), u[2]) for u in units], list(layers), list(attention_layers), boundary=prompt_length - 1)
    for u in cap.units:
        cap.positions[u] = unit_positions(full, u)
        if not cap.positions[u] or max(cap.positions[u]) >= prompt_length:
            raise ValueError(f"unit {list(u)}: no span in the prompt at the boundary")
    for layer in cap.layers:
        cap.plan.pooled[("state", layer)] = ("resid_pre", layer, torch.tensor([cap.boundary]))
        for i, u in enumerate(cap.units):
            cap.plan.pooled[(i, layer)] = ("resid_pre", layer, torch.tensor(cap.positions[u]))
    for layer in cap.attention_layers:
        cap.plan.rows[(layer, cap.boundary)] = "boundary"
    return cap


def captured(cap: Capture, proj: np.ndarray | None, digits: int = 6) -> dict[str, Any]:
    """The JSON part of a capture: ``state`` ``[n_layers][dim]``, per unit ``rep`` ``[n_layers][dim]`` and
    ``attention`` ``[n_attention_layers][n_heads]`` (mass on its span, summed over its tokens), ``n_tokens`` of its span, and
    ``prompt_tokens`` (the render at the boundary: the request a deletion shortens)."""
    def vec(key: Hashable) -> list[float]:
        v = cap.outputs.mean(key).detach().cpu().double().numpy()
        return np.round(v @ proj if proj is not None else v, digits).tolist()

    rows = cap.outputs.rows.get("boundary", {})
    missing = [layer for layer in cap.attention_layers if layer not in rows]
    if missing:
        raise RuntimeError(f"no attention row at layer(s) {missing}: the boundary token's forward did not run")
    units = []
    for i, u in enumerate(cap.units):
        pos = torch.tensor(cap.positions[u])
        attention = [rows[layer][:, pos.to(rows[layer].device)].sum(-1).double().cpu().numpy().round(digits).tolist()
                     for layer in cap.attention_layers]
        units.append({"unit": list(u), "n_tokens": len(cap.positions[u]),
                      "rep": [vec((i, layer)) for layer in cap.layers], "attention": attention})
    return {"layers": cap.layers, "attention_layers": cap.attention_layers, "prompt_tokens": cap.boundary + 1,
            "state": [vec(("state", layer)) for layer in cap.layers], "candidates": units}


def prompt_capture(sensor: Sensor, traj: Trajectory, b: int, units: Sequence[Unit], layers: Sequence[int],
                   attention_layers: Sequence[int], proj: np.ndarray | None) -> dict[str, Any]:
    """:func:`captured` of one forward of the prompt at boundary b (``render(traj, b)``): the view of the
    candidates the set-risk gate reads, offline (``patching.drsr``) and online (``patching.gate``) alike."""
    from interp.data.render import render
    from interp.sensor.forward import run_plan

    prompt = render(traj, b, sensor.tokenizer)
    cap = capture_plan(prompt, prompt.n_tokens, units, layers, attention_layers)
    cap.outputs = run_plan(sensor, prompt.input_ids, cap.plan)
    return captured(cap, proj)


def _member_features(family: str, r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Per-member features ``[n_members, dim']`` of a family from member reps ``r`` [n, d] and a state ``s`` [d]."""
    if family == "block":
        return r
    cos = (r @ s) / (np.linalg.norm(r, axis=1) * np.linalg.norm(s) + 1e-12)
    return np.concatenate([r * s, np.abs(r - s), cos[:, None]], axis=1)


def surface_features(members: Sequence[Unit], b: int, n_tokens: Sequence[int]) -> np.ndarray:
    """Set size, tokens of the members' spans, mean and min recency (b - step), mean step position (step / b), kind
    counts (``UNIT_KINDS`` order)."""
    steps = np.array([m[1] for m in members], float)
    kinds = [sum(m[0] == k for m in members) for k in UNIT_KINDS]
    return np.array([len(members), float(sum(n_tokens)), float(np.mean(b - steps)), float(np.min(b - steps)),
                     float(np.mean(steps / b)), *kinds], float)


@dataclass
class SetTable:
    """The rows of the relation analysis: one per set of two or more units whose members were all captured."""

    task: np.ndarray  # [n] str
    boundary: np.ndarray  # [n] int: index of the boundary
    harm: np.ndarray  # [n] nats/token
    members: list[list[int]]  # indices into each boundary's candidates
    boundaries: list[dict[str, Any]]  # per boundary: b, reps [n_units, n_layers, d], state [n_layers, d], n_tokens, units
    singles: list[dict[Unit, float]]


def set_table(records: Sequence[dict[str, Any]], min_size: int = 2) -> SetTable:
    """Rows from drsr boundary records (harm record + ``captured``), sets of ``min_size`` units or more."""
    task, bidx, harm, members, bounds, singles = [], [], [], [], [], []
    for i, rec in enumerate(records):
        units = [tuple(c["unit"]) for c in rec["candidates"]]
        index = {u: j for j, u in enumerate(units)}
        bounds.append({"b": rec["after_step"], "task": rec["task_id"], "units": units,
                       "reps": np.array([c["rep"] for c in rec["candidates"]], float).reshape(
                           len(units), len(rec["layers"]), -1),
                       "state": np.array(rec["state"], float), "n_tokens": [c["n_tokens"] for c in rec["candidates"]]})
        singles.append({tuple(s["members"][0]): s["harm"] for s in rec["sets"] if len(s["members"]) == 1})
        for s in rec["sets"]:
            ms = [tuple(m) for m in s["members"]]
            if len(ms) >= min_size and all(m in index for m in ms):
                task.append(rec["task_id"])
                bidx.append(i)
                harm.append(s["harm"])
                members.append([index[m] for m in ms])
    return SetTable(np.array(task, dtype=object), np.array(bidx, int), np.array(harm, float), members, bounds, singles)


def mismatched_partner(table: SetTable) -> list[int]:
    """For each boundary, the boundary whose state stands in for its own: the first boundary of the next task in
    sorted task order (cyclic); a boundary's own when there is one task only."""
    tasks = sorted({b["task"] for b in table.boundaries})
    first = {t: next(i for i, b in enumerate(table.boundaries) if b["task"] == t) for t in tasks}
    return [first[tasks[(tasks.index(b["task"]) + 1) % len(tasks)]] for b in table.boundaries]


def features(table: SetTable, family: str, layer_index: int | None = None) -> np.ndarray:
    """The family's set features ``[n_sets, dim]`` at the layer of that index (``surface``: no layer)."""
    partner = mismatched_partner(table) if family == "mismatched" else None
    rows = []
    for bi, ms in zip(table.boundary, table.members):
        bd = table.boundaries[bi]
        if family == "surface":
            rows.append(surface_features([bd["units"][m] for m in ms], bd["b"], [bd["n_tokens"][m] for m in ms]))
            continue
        r = bd["reps"][ms, layer_index]
        s = (table.boundaries[partner[bi]] if partner else bd)["state"][layer_index]
        rows.append(s.copy() if family == "state" else _member_features(family, r, s).sum(0))
    return np.array(rows, float)


def oof_predictions(x: np.ndarray, y: np.ndarray, groups: np.ndarray, n_splits: int = 5) -> np.ndarray:
    """Out-of-fold predictions of StandardScaler + RidgeCV through GroupKFold by ``groups`` (no group in two folds)."""
    from sklearn.linear_model import RidgeCV
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    n_groups = len(set(groups))
    if n_groups < 2:
        raise ValueError(f"grouped cross-validation needs two trajectories or more, got {n_groups}")
    pred = np.empty(len(y))
    for train, test in GroupKFold(n_splits=min(n_splits, n_groups)).split(x, y, groups):
        model = make_pipeline(StandardScaler(), RidgeCV(alphas=ALPHAS)).fit(x[train], y[train])
        pred[test] = model.predict(x[test])
    # BLAS round-off depends on a row's place in the matrix: identical feature rows (the state family within a
    # boundary) can get float64 predictions an ulp apart, which would turn true ties into random orderings.
    # Rounding to float32 keeps every real difference (ridge outputs are far coarser than 1e-7) and the ties.
    return pred.astype(np.float32).astype(float)


def pair_scores(table: SetTable, pred: np.ndarray, margin: float) -> dict[str, tuple[float, int]]:
    """Per task: (score, counted pairs) of ``pred`` ordering the sets of each of its boundaries at the margin."""
    out: dict[str, list[float]] = {}
    for bi in np.unique(table.boundary):
        rows = np.flatnonzero(table.boundary == bi)
        score, counted = ordered_pairs(table.harm[rows].tolist(), pred[rows].tolist(), margin)
        t = out.setdefault(table.boundaries[bi]["task"], [0.0, 0])
        t[0] += score
        t[1] += counted
    return {k: (v[0], int(v[1])) for k, v in out.items()}


def accuracy_ci(per_task: dict[str, tuple[float, int]], n_boot: int, seed: int = 0
                ) -> tuple[float | None, list[float] | None, int]:
    """Pooled pair accuracy, its task-bootstrap 95% CI (ratio of resampled sums; None with < 3 tasks or n_boot 0) and pairs."""
    score = np.array([v[0] for v in per_task.values()], float)
    count = np.array([v[1] for v in per_task.values()], float)
    if count.sum() == 0:
        return None, None, 0
    acc = float(score.sum() / count.sum())
    if len(per_task) < 3 or n_boot == 0:
        return acc, None, int(count.sum())
    draws = [score[r].sum() / count[r].sum() for r in task_resamples(np.arange(len(score)), n_boot,
                                                                       np.random.default_rng(seed))
             if count[r].sum() > 0]
    return acc, [float(x) for x in np.percentile(draws, [2.5, 97.5])], int(count.sum())


def relations_by_layer(records: Sequence[dict[str, Any]], margin: float, relation_layer: int | None = None,
                       margin_grid: Sequence[float] = MARGIN_GRID, *, n_boot: int, seed: int = 0
                       ) -> dict[str, Any]:
    """Pair-ordering accuracy at ``margin`` of every family at every captured layer (surface once), and the
    accuracy-vs-margin curve of the aggregators of singleton harms and of the families at ``relation_layer``
    (no families and no curve with fewer than two trajectories: nothing to hold out)."""
    table = set_table(records)
    if not records or not len(table.harm):
        return {"n_sets": 0, "n_tasks": 0, "layers": [], "families": {}, "margin_curve": None}
    layers = list(records[0]["layers"])
    groups = table.task.astype(str)
    if len(set(groups)) < 2:  # grouped cross-validation needs a held-out trajectory
        return {"n_sets": int(len(table.harm)), "n_tasks": int(len(set(groups))), "layers": layers, "families": {},
                "margin_curve": None}
    fams: dict[str, Any] = {}
    preds: dict[str, dict[int, np.ndarray]] = {}
    for family in FAMILIES:
        rows = []
        for li in ([None] if family == "surface" else range(len(layers))):
            pred = oof_predictions(features(table, family, li), table.harm, groups)
            preds.setdefault(family, {})[-1 if li is None else li] = pred
            acc, ci, n_pairs = accuracy_ci(pair_scores(table, pred, margin), n_boot, seed)
            rows.append({"layer": None if li is None else layers[li], "pair_accuracy": acc, "ci": ci,
                         "n_pairs": n_pairs})
        fams[family] = rows
    chosen = relation_layer if relation_layer is not None else layers[len(layers) // 2]
    if chosen not in layers:
        raise ValueError(f"relation layer {chosen} was not captured (layers {layers[0]}..{layers[-1]})")
    curves: dict[str, list[float | None]] = {}
    for name, agg in AGGREGATORS.items():
        pred = np.array([agg([table.singles[bi][table.boundaries[bi]["units"][m]] for m in ms])
                         for bi, ms in zip(table.boundary, table.members)])
        curves[name] = [accuracy_ci(pair_scores(table, pred, m), 0)[0] for m in margin_grid]
    for family in FAMILIES:
        pred = preds[family][-1 if family == "surface" else layers.index(chosen)]
        curves[family] = [accuracy_ci(pair_scores(table, pred, m), 0)[0] for m in margin_grid]
    return {"n_sets": int(len(table.harm)), "n_tasks": int(len(set(groups))), "layers": layers, "families": fams,
            "margin_curve": {"layer": chosen, "margins": list(margin_grid), "accuracy": curves}}
