"""Benchmark: the full probe report (nested CV, CIs, permutation test, control, layer curve) at reference-study scale.

300 boundaries (30 tasks x 10), 32 layers x 4 poolings, d = 4096 float32
synthetic features with a weak signal planted around layer 20 of the "last"
pooling, labels clustered within tasks. Run: python benchmarks/bench_probes.py

``--solver`` instead times one nested CV at the demo's scale (25 tasks x 8
boundaries, 30 layers x 4 poolings, d = 576) with the span path's Newton solver
and with the L-BFGS solver it replaced (kept here as the reference), in one
process on one thread, and says how far the inner selection's AUROCs differ
(``--store results/demo/store``: on the demo's real SmolLM2 features instead,
whose few large residual dimensions make the problem ill-conditioned).

``--permutation-cost K`` instead measures the cost per permutation of the two
permutation statistics on the same data (`probes.stats.permutation_tests`):
the exact one (``permutation="nested"``: the whole nested CV rerun on each of
K permuted label vectors, joblib-parallel over permutations) against the
fast fixed-probe scan (K vs 0 extra label vectors in one batched scan).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from joblib.externals.loky import get_reusable_executor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a checkout, installed or not
from probes import FeatureSet, ProbeConfig, permutation_tests, run_nested_cv, run_probe  # noqa: E402
from probes.scan import candidate_aurocs  # noqa: E402

POOLINGS = ("last", "mean", "max", "first")


def synthetic_boundaries(
    n_tasks: int, per_task: int, n_layers: int, d: int, strength: float, seed: int
) -> FeatureSet:
    """Noise + a per-task offset + a y-dependent shift along one direction, peaking at layer 20 of "last"."""
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"task{t:02d}" for t in range(n_tasks)], per_task)
    propensity = np.repeat(rng.beta(2, 3, size=n_tasks), per_task)
    y = (rng.random(groups.size) < propensity).astype(np.int64)
    features = {}
    for layer in range(n_layers):
        for pooling in POOLINGS:
            task_offset = 0.5 * rng.standard_normal((n_tasks, d), dtype=np.float32)
            X = rng.standard_normal((groups.size, d), dtype=np.float32) + np.repeat(task_offset, per_task, axis=0)
            gain = strength * np.exp(-((layer - 20) ** 2) / 18) * {"last": 1.0, "mean": 0.5}.get(pooling, 0.0)
            direction = rng.standard_normal(d).astype(np.float32)
            X += np.float32(gain) * (y[:, None] - 0.5).astype(np.float32) * direction / np.linalg.norm(direction)
            features[layer, pooling] = X
    sample_ids = [f"{g}/b{i % per_task}" for i, g in enumerate(groups)]
    return FeatureSet(features=features, y=y, groups=groups, sample_ids=sample_ids)


def main() -> None:
    """Build the synthetic set, run `run_probe` with the default grid, print elapsed time and the numbers."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--search", choices=["two_stage", "full"], default="two_stage")
    parser.add_argument("--strength", type=float, default=3.0, help="planted shift at the peak layer, in noise SDs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--permutation-cost", type=int, default=0, metavar="K",
                        help="measure the cost per permutation of the nested vs fixed statistic with K permutations")
    parser.add_argument("--solver", action="store_true", help="Newton vs L-BFGS in the span path, demo scale")
    parser.add_argument("--store", type=Path, help="--solver on a store's features (e.g. results/demo/store)")
    args = parser.parse_args()
    if args.solver:
        solver_ab(args)
        return
    if args.permutation_cost:
        permutation_cost(args)
        return

    start = time.perf_counter()
    fs = synthetic_boundaries(n_tasks=30, per_task=10, n_layers=32, d=4096, strength=args.strength, seed=args.seed)
    print(f"data: {len(fs.sample_ids)} samples, {fs.n_tasks} tasks, {int(fs.y.sum())} positive, "
          f"{len(fs.features)} candidates x d=4096 float32 ({time.perf_counter() - start:.1f} s to build)")
    config = ProbeConfig(n_jobs=args.n_jobs, search=args.search, seed=args.seed)
    start = time.perf_counter()
    result = run_probe(fs, config)
    elapsed = time.perf_counter() - start
    get_reusable_executor().shutdown(wait=True)  # reap the joblib workers so their CPU time is counted
    cpu = sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
              for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))

    print(f"run_probe: {elapsed:.1f} s wall, {cpu:.0f} s CPU in all processes (search={config.search}, "
          f"n_jobs={config.n_jobs}, n_outer={config.n_outer}, n_inner={config.n_inner}, "
          f"n_perm={config.n_perm}, n_boot={config.n_boot})")
    print("phases (s wall): " + ", ".join(f"{k} {v:.1f}" for k, v in result["elapsed_s"].items()))
    print(f"AUROC {result['auroc']:.3f} CI [{result['auroc_ci'][0]:.3f}, {result['auroc_ci'][1]:.3f}]  "
          f"AP {result['ap']:.3f} CI [{result['ap_ci'][0]:.3f}, {result['ap_ci'][1]:.3f}]  "
          f"balanced acc {result['balanced_accuracy']:.3f}")
    print(f"permutation p {result['permutation_p']:.3f} (max-over-candidates AUROC "
          f"{result['permutation_observed']:.3f})  control AUROC {result['control_auroc']:.3f}  "
          f"selectivity {result['selectivity']:.3f}")
    for fold in result["folds"]:
        auc = "n/a" if fold["auroc"] is None else f"{fold['auroc']:.3f}"
        print(f"  fold {fold['fold']}: layer {fold['layer']} {fold['pooling']}, standardize={fold['standardize']}, "
              f"pca={fold['pca']}, C={fold['C']}, threshold={fold['threshold']:.3f}, "
              f"inner AUROC {fold['inner_auroc']:.3f}, fold AUROC {auc}")
    curve = result["layer_curve"]["last"]
    peak = int(np.argmax(curve["auroc"]))
    print(f"layer curve (last pooling, descriptive): peak layer {curve['layers'][peak]} "
          f"AUROC {curve['auroc'][peak]:.3f}; layers 0/10/20/31: "
          + ", ".join(f"{curve['auroc'][i]:.3f}" for i in (0, 10, 20, 31)))


def _cpu() -> float:
    """CPU seconds of this process and its reaped children (joblib workers are reaped first)."""
    get_reusable_executor().shutdown(wait=True)
    return sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def permutation_cost(args: argparse.Namespace) -> None:
    """Wall and CPU seconds per permutation: nested-CV statistic vs the fixed-probe scan, on the benchmark data."""
    fs = synthetic_boundaries(n_tasks=30, per_task=10, n_layers=32, d=4096, strength=args.strength, seed=args.seed)
    k = args.permutation_cost
    config = ProbeConfig(n_jobs=args.n_jobs, search=args.search, seed=args.seed, n_perm=k, permutation="nested")
    print(f"data: {len(fs.sample_ids)} samples, {fs.n_tasks} tasks, {len(fs.features)} candidates x d=4096; "
          f"n_jobs={args.n_jobs}, search={args.search}, K={k} permutations; load average at start "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    timings = {}
    for name, run in (
        ("nested CV once (the observed headline)", lambda: run_nested_cv(fs, config).auroc),
        (f"nested statistic, {k} permutations (across-task null)",
         lambda: permutation_tests(fs, config, ("across_tasks",), observed=0.5)),
        ("fixed scan, real labels only", lambda: candidate_aurocs(fs, fs.y[None, :], config)),
        (f"fixed statistic, {k} permutations + real labels (one scan)",
         lambda: permutation_tests(fs, replace(config, permutation="fixed"), ("across_tasks",))),
    ):
        cpu, start = _cpu(), time.perf_counter()
        run()
        timings[name] = (time.perf_counter() - start, _cpu() - cpu)
        print(f"  {name}: {timings[name][0]:.1f} s wall, {timings[name][1]:.0f} s CPU")
    names = list(timings)
    nested = [v / k for v in timings[names[1]]]
    fixed = [(a - b) / k for a, b in zip(timings[names[3]], timings[names[2]])]
    print(f"per permutation: nested {nested[0]:.1f} s wall / {nested[1]:.0f} s CPU; fixed (marginal) "
          f"{fixed[0]:.2f} s wall / {fixed[1]:.1f} s CPU; nested / fixed = {nested[1] / max(fixed[1], 1e-9):.0f}x CPU; "
          f"nested permutation / one nested CV = {nested[0] / timings[names[0]][0]:.2f} (wall)")
    print(f"load average at end {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


def lbfgs_fit(Z: np.ndarray, y: np.ndarray, C: float) -> np.ndarray:
    """The span path's previous solver (L-BFGS-B, gtol 1e-6): the reference of `solver_ab`."""
    from scipy.optimize import minimize
    from scipy.special import expit

    sign = 2.0 * y - 1.0
    weight = (y.size / (2.0 * np.bincount(y, minlength=2)))[y]

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        margin = sign * (Z @ theta[:-1] + theta[-1])
        slope = -weight * sign * expit(-margin)
        return (weight @ np.logaddexp(0.0, -margin) + theta[:-1] @ theta[:-1] / (2 * C),
                np.append(Z.T @ slope + theta[:-1] / C, slope.sum()))

    return minimize(objective, np.zeros(Z.shape[1] + 1), jac=True, method="L-BFGS-B",
                    options={"maxiter": 100_000, "gtol": 1e-6}).x


def solver_ab(args: argparse.Namespace) -> None:
    """One nested CV at demo scale with each solver (one thread, same process): CPU seconds, ratio, score gap."""
    from contextlib import nullcontext
    from unittest import mock

    from threadpoolctl import threadpool_limits

    if args.store:
        from interp.extraction.store import Store

        fs = FeatureSet.from_store(Store(args.store), site="resid_pre", condition="full").drop_missing()[0]
    else:
        fs = synthetic_boundaries(n_tasks=25, per_task=8, n_layers=30, d=576, strength=args.strength, seed=args.seed)
    config = ProbeConfig(n_jobs=1, search=args.search, seed=args.seed)
    print(f"data: {args.store or 'synthetic'}, {len(fs.sample_ids)} samples, {len(fs.features)} candidates x "
          f"d={next(iter(fs.features.values())).shape[1]}; one nested CV, n_jobs=1, "
          f"1 thread; load average at start {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    runs = {}
    with threadpool_limits(limits=1):
        for name in ("lbfgs", "newton", "lbfgs again", "newton again"):
            with mock.patch("probes.span._fit_logreg", lbfgs_fit) if name.startswith("lbfgs") else nullcontext():
                cpu = time.process_time()
                runs[name] = (run_nested_cv(fs, config), time.process_time() - cpu)
            print(f"  {name}: {runs[name][1]:.1f} s CPU, AUROC {runs[name][0].auroc:.4f}")
    old, new = runs["lbfgs"][0], runs["newton"][0]
    gap = max(abs(a["inner_auroc"] - b["inner_auroc"]) for a, b in zip(old.folds, new.folds))
    same = [(f["layer"], f["pooling"], f["pca"], f["C"]) for f in old.folds] == \
        [(f["layer"], f["pooling"], f["pca"], f["C"]) for f in new.folds]
    print(f"L-BFGS / Newton CPU: {(runs['lbfgs'][1] + runs['lbfgs again'][1]) / (runs['newton'][1] + runs['newton again'][1]):.2f}x; "
          f"max |inner AUROC gap| {gap:.2g}; same choices in every fold: {same}; "
          f"load average at end {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
