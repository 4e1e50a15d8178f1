"""Synthetic DRSR boundary records whose set harm is planted (a function of the members' relation to the
boundary state) or independent of every feature; the layout of ``patching.drsr.boundary_record``."""

from __future__ import annotations

import itertools

import numpy as np

LAYERS = [0, 1, 2, 3]
ATTENTION = [1, 3]
DIM = 8


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def truth(cands: list[dict], state: np.ndarray, members: list[int]) -> float:
    """The planted harm of deleting ``members`` (noise-free): 0.01 + 0.05 * mean cos(r_u, s) at layer 1."""
    return 0.01 + 0.05 * float(np.mean([cosine(np.array(cands[j]["rep"])[1], state[1]) for j in members]))


def records(n_tasks: int = 60, planted: bool = True, seed: int = 0, b: int = 4, measured: float = 1.0) -> list[dict]:
    """One boundary per task (tool-call steps of two reasoning blocks and one result each); harm = ``truth`` (+
    noise 0.001), or (``planted=False``) drawn independently with the same spread. Measured: every singleton and
    (a seeded ``measured`` fraction of) every set of 2-3 units of steps 1..b-1, the gate's whole pool."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_tasks):
        units = [["reasoning", t, k] for t in range(1, b + 1) for k in range(2)] + \
                [["observation", t, 0] for t in range(1, b + 1)]
        state = rng.normal(size=(len(LAYERS), DIM))
        cands = [{"unit": u, "n_tokens": int(rng.integers(5, 40)),
                  "rep": rng.normal(size=(len(LAYERS), DIM)).round(5).tolist(),
                  "attention": rng.uniform(0, 0.1, size=(len(ATTENTION), 2)).round(5).tolist()} for u in units]
        combos = [(j,) for j in range(len(units))]
        older = [j for j, u in enumerate(units) if u[1] < b]
        pool = list(itertools.combinations(older, 2)) + list(itertools.combinations(older, 3))
        combos += [c for c in pool if rng.uniform() < measured]
        sets = []
        for c in combos:
            harm = (truth(cands, state, list(c)) + rng.normal(0, 0.001) if planted
                    else 0.01 + 0.05 * rng.normal(0, 0.35))
            sets.append({"members": [units[j] for j in c], "tokens_removed": int(sum(cands[j]["n_tokens"] for j in c)),
                         "nll": 1.0 + harm, "harm": harm, "interaction": None})
        out.append({"task_id": f"t{i:03d}", "after_step": b, "units": ["reasoning", "observation"], "target": "y",
                    "target_tokens": 10, "nll_full": 1.0, "sets": sets, "layers": LAYERS,
                    "attention_layers": ATTENTION, "prompt_tokens": 1500, "state": state.round(5).tolist(),
                    "candidates": cands, "shapes": [[2, 1, 1, 0]] * b})
    return out
