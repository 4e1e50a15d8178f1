"""Synthetic result files of every kind (shapes as the analyses write them), seeded; no model involved."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

KINDS = ["system", "tools", "task", "reasoning_block", "action", "observation", "glue"]


def write_results(root: Path, seed: int = 0) -> Path:
    """Write one file of each analysis under root (a results directory) and return root."""
    rng = np.random.default_rng(seed)
    _probe(root / "probe", rng)
    _json(root / "patching" / "kl_repair.json", _kl_repair(rng))
    _json(root / "externalization" / "externalization.json", _externalization(rng))
    _json(root / "interventions" / "interventions.json", _interventions())
    _json(root / "attention" / "attention.json", _attention(rng))
    _iclr(rng).to_csv(_mkdir(root / "iclr") / "iclr_blocks.csv", index=False)
    _json(root / "harm" / "harm.json", _harm(rng))
    return root


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _json(path: Path, obj: dict) -> None:
    _mkdir(path.parent)
    path.write_text(json.dumps(obj, indent=2))


def _probe(out: Path, rng: np.random.Generator) -> None:
    layers = list(range(0, 32, 2))
    curve = {pooling: {"layers": layers, "auroc": [0.55 + 0.25 * np.sin(np.pi * l / 40) + shift for l in layers]}
             for pooling, shift in (("last", 0.02), ("mean", -0.05))}
    folds = [{"fold": i, "test_tasks": [f"t{i}"], "layer": 20 if i < 4 else 24, "pooling": "last", "auroc": 0.8}
             for i in range(5)]
    result = {"auroc": 0.812, "auroc_ci": [0.751, 0.868], "ap": 0.774, "ap_ci": [0.70, 0.84],
              "balanced_accuracy": 0.731, "permutation_p": 0.004, "n_samples": 120, "n_tasks": 15,
              "n_positive": 50, "folds": folds, "layer_curve": curve}
    _json(out / "probe_results.json", result)
    y = (rng.random(120) < 50 / 120).astype(int)
    score = rng.normal(1.2 * y - 0.6, 1.0)
    fold = np.arange(120) % 5
    pd.DataFrame({"sample_id": [f"s{i}" for i in range(120)], "task_id": [f"t{i % 15}" for i in range(120)], "y": y,
                  "score": score, "fold": fold, "threshold": 0.0, "pred": (score >= 0).astype(int)}
                 ).to_csv(out / "oof_predictions.csv", index=False)


def _kl_repair(rng: np.random.Generator) -> dict:
    layers = list(range(32))
    mean = [float(np.clip(l / 31, 0, 1) ** 1.5) for l in layers] + [1.0]
    return {
        "sites": [f"resid_pre.{l}" for l in layers] + ["resid_post.31"], "layers": layers + [31],
        "repair_mean": mean, "repair_ci": [[m - 0.06, m + 0.05] for m in mean],
        "top1_mean": [float(min(1.0, m + 0.1)) for m in mean], "full_attention_layers": list(range(3, 32, 4)),
        "n_samples": 40, "n_excluded": 2, "condition": "delete_all_reasoning",
        "model": {"spec": "qwen3.5-toy", "n_layers": 32, "layer_types": ["linear_attention"] * 32},
    }


def _externalization(rng: np.random.Generator) -> dict:
    per_task = [{"task_id": f"t{i}", "diff": float(rng.normal(0.2, 0.15))} for i in range(15)]
    per_sample = [{"task_id": f"t{i % 15}", "G": int(i % 2), "score": float(rng.normal(0.3 * (i % 2), 0.2))}
                  for i in range(80)]
    return {"risk": {"G1": {"p": 0.64, "ci": [0.55, 0.72], "n": 60}, "G0": {"p": 0.38, "ci": [0.30, 0.46], "n": 70}},
            "within_task": {"gap": 0.21, "ci": [0.12, 0.29], "n_tasks": 15, "per_task": per_task},
            "hidden_score": {"gap": 0.27, "per_sample": per_sample}}


def risk_layout_externalization() -> dict:
    """externalization.json as interp.externalization.risk writes it (estimates under p_y_given_g*, per_task as a mapping)."""
    def gap(estimate: float, scale: float) -> dict:
        return {"estimate": estimate, "ci": [estimate - 0.1 * scale, estimate + 0.1 * scale], "n_tasks": 4,
                "per_task": {f"t{i}": estimate + scale * (i - 1.5) / 10 for i in range(4)}}
    return {"p_y_given_g1": {"estimate": 0.6, "ci": [0.5, 0.7], "n": 40, "n_positive": 24, "n_tasks": 5},
            "p_y_given_g0": {"estimate": 0.3, "ci": [0.2, 0.4], "n": 50, "n_positive": 15, "n_tasks": 5},
            "risk_difference": 0.3, "within_task_gap": gap(0.25, 1.0),
            "hidden_score_gap": {"logodds": gap(0.9, 3.0), "probability": gap(0.15, 0.5)}}


def summary_layout_interventions() -> dict:
    """interventions.json as interp.continuations.run writes it (per-condition stats under summary)."""
    def row(mean: float | None, rate: float | None = None) -> dict:
        return {"mean_score": mean, "ci": None if mean is None else [mean - 0.1, mean + 0.1], "n_states": 8,
                "n_tasks": 4, "n_generations": 8, "parse_failures": 0, "reacquisition_rate": rate}
    return {"summary": {"delete_all_reasoning": row(0.61), "full": row(0.9, 0.1), "hide_observation": row(0.5, 0.75),
                        "keep_latest_reasoning": row(None)}}


def _interventions() -> dict:
    def row(mean: float, rate: float | None = None) -> dict:
        return {"mean": mean, "ci": [mean - 0.05, mean + 0.04], "n": 30, "parse_failures": 1,
                "reacquisition_rate": rate}
    return {"conditions": {"full": row(0.86), "keep_latest_reasoning": row(0.85), "delete_latest_reasoning": row(0.74),
                           "delete_all_reasoning": row(0.66), "clear_after_code": row(0.75),
                           "hide_observation": row(0.70, 0.83)}}


def _attention(rng: np.random.Generator) -> dict:
    layers = list(range(3, 32, 4))
    mass = rng.dirichlet(np.ones(len(KINDS)), size=len(layers)).tolist()
    return {"layers": layers, "kinds": KINDS, "mass": mass, "n": 40, "condition": "full"}


def _iclr(rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for task in range(6):
        for step in range(1, 7):
            n = int(rng.integers(1, 7))
            scored = not (task == 5 and step > 4)
            entropy = rng.gamma(2.0, 0.6, n)
            order = np.argsort(entropy)
            dropped = set(order[: int(0.8 * n)].tolist()) if scored and n > 1 else set()
            rows += [{"task_id": f"t{task}", "domain": "code", "step": step, "block": b,
                      "n_tokens": int(rng.integers(10, 200)), "mean_entropy_bits": entropy[b] if scored else None,
                      "scored": scored, "n_blocks_in_step": n, "dropped": b in dropped} for b in range(n)]
    return pd.DataFrame(rows)


def _harm(rng: np.random.Generator) -> dict:
    boundaries = []
    for task in range(4):
        blocks = [(s, b) for s in (1, 2) for b in range(3)]
        single = {m: float(rng.gamma(2.0, 0.02)) for m in blocks}
        sets = [{"members": [list(m)], "tokens_removed": 20, "nll": 1.0 + h, "harm": h, "interaction": None}
                for m, h in single.items()]
        for k in (2, 3):
            for _ in range(6):
                members = [blocks[i] for i in rng.choice(len(blocks), k, replace=False)]
                joint = sum(single[m] for m in members) * float(rng.uniform(0.4, 1.3))
                sets.append({"members": [list(m) for m in members], "tokens_removed": 20 * k, "nll": 1.0 + joint,
                             "harm": joint, "interaction": joint - sum(single[m] for m in members)})
        boundaries.append({"task_id": f"t{task}", "after_step": 3, "nll_full": 1.0, "sets": sets})
    return {"per_cardinality": {"2": {"mean_interaction": -0.01, "n_sets": 24, "pair_ordering_accuracy": 0.8},
                                "3": {"mean_interaction": -0.02, "n_sets": 24, "pair_ordering_accuracy": 0.7}},
            "boundaries": boundaries}
