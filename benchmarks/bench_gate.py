"""Benchmark: the online set-risk gate's decision latency (``patching.gate.decide_view``) at 20, 60 and 120
history units and K = 2, 3, 4, pruned (sets scored largest saving first, stopping once nothing unscored can
win) against exhaustive (every valid set scored), both vectorised and capped at ``MAX_SETS`` candidate sets.

The views are synthetic with SmolLM2-135M's shapes (the demo's sensor): 4 representation layers projected to
64 dimensions, 30 full-attention layers of 9 heads, so the set features have the width of the demo's gate;
each step holds two reasoning blocks and one tool exchange (units), the latest step protected. The scorer is a
``SetRiskScorer`` fitted to a planted harm on random rows of that width; tau is set to the 20th percentile of
the exhaustive scores at 20 units (a gate that deletes at most boundaries). The decision excludes the one
forward of the prompt (the sensor's cost, measured by ``bench_extract.py``). The pruned and exhaustive choices
are checked equal at every point. Reported: valid sets (capped or not), sets scored and milliseconds per
decision (median of repeats); the machine's load average is printed beside them.

Run: python benchmarks/bench_gate.py [--units 20,60,120] [--k 2,3,4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _util import load_average, machine_note, markdown_table

LAYERS, ATTENTION, HEADS, DIM = (3, 10, 20, 29), tuple(range(30)), 9, 64


def view(n_units: int, seed: int = 0) -> dict:
    """A boundary with ``n_units`` admissible units (3 per step) plus a protected latest step."""
    rng = np.random.default_rng(seed)
    n_steps = n_units // 3 + 1
    units = [["reasoning", t, k] for t in range(1, n_steps + 1) for k in range(2)] + \
            [["tool_exchange", t, 0] for t in range(1, n_steps + 1)]
    units.sort(key=lambda u: (u[1], u[0] != "reasoning", u[2]))
    cands = [{"unit": u, "n_tokens": int(rng.integers(20, 200)),
              "rep": rng.normal(size=(len(LAYERS), DIM)).tolist(),
              "attention": rng.uniform(0, 0.05, size=(len(ATTENTION), HEADS)).tolist()} for u in units]
    tokens = sum(c["n_tokens"] for c in cands)
    return {"task_id": "bench", "after_step": n_steps, "layers": list(LAYERS), "attention_layers": list(ATTENTION),
            "prompt_tokens": 3 * tokens, "state": rng.normal(size=(len(LAYERS), DIM)).tolist(), "candidates": cands,
            "shapes": [[2, 1, 1, 0]] * n_steps}


def model(tau: float | None = None):
    """A gate whose scorer has the demo gate's feature width, fitted to a planted harm."""
    from patching.gate import FeatureSpec, GateModel, GateSetting, SetRiskScorer, candidate_features, grow_sets, \
        pool_members, set_matrix

    v = view(20, seed=1)
    spec = FeatureSpec(LAYERS, ATTENTION)
    pool = pool_members(v, GateSetting(k=3))
    sets, _, _ = grow_sets(v, pool, GateSetting(k=3))
    x = set_matrix(v, candidate_features(v, spec), pool, sets, spec)
    rng = np.random.default_rng(0)
    y = 0.015 + 0.01 * (x[:, 0] - x[:, 0].mean()) / x[:, 0].std() + rng.normal(0, 0.003, len(x))
    scorer = SetRiskScorer().fit(x, y)  # the default ensemble (patching.config.N_MEMBERS)
    return GateModel(spec, scorer, GateSetting(k=3, tau=tau), model={"proj_dim": 64})


def main() -> None:
    from dataclasses import replace

    from patching.gate import MAX_SETS, decide_view

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", default="20,60,120")
    parser.add_argument("--k", default="2,3,4")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    gate = model()
    probe = decide_view(replace(gate, setting=replace(gate.setting, tau=1.0)), view(20), prune=False)
    assert probe.members is not None
    from patching.gate import candidate_features, grow_sets, pool_members, set_matrix

    v20 = view(20)
    sets, _, _ = grow_sets(v20, pool_members(v20, gate.setting), gate.setting)
    risk, _ = gate.scorer.predict_risk(set_matrix(v20, candidate_features(v20, gate.spec),
                                                  pool_members(v20, gate.setting), sets, gate.spec))
    tau = float(np.quantile(risk, 0.2))
    print(f"load average before: {load_average():.2f}; {machine_note(1)}; tau {tau:.4f}; cap {MAX_SETS} sets")
    rows = []
    for n in (int(x) for x in args.units.split(",")):
        v = view(n)
        for k in (int(x) for x in args.k.split(",")):
            g = replace(gate, setting=replace(gate.setting, k=k, tau=tau))
            times = {}
            picks = {}
            for prune in (True, False):
                ts = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    d = decide_view(g, v, prune=prune)
                    ts.append(time.perf_counter() - t0)
                times[prune], picks[prune] = float(np.median(ts)), d
            assert picks[True].members == picks[False].members, (n, k)
            total = picks[False].n_scored
            rows.append([n, k, f"{total:,}" + (" (cap)" if picks[False].capped else ""), f"{picks[True].n_scored:,}",
                         f"{1000 * times[True]:.0f}", f"{1000 * times[False]:.0f}",
                         "abstain" if picks[True].members is None else len(picks[True].members),
                         f"{load_average():.1f}"])
    print(markdown_table(["units", "K", "valid sets", "scored (pruned)", "pruned ms", "exhaustive ms",
                          "chosen set size", "load avg"], rows))


if __name__ == "__main__":
    main()
