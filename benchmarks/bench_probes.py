"""Benchmark: the full probe report (nested CV, CIs, permutation test, control, layer curve) at reference-study scale.

300 boundaries (30 tasks x 10), 32 layers x 4 poolings, d = 4096 float32
synthetic features with a weak signal planted around layer 20 of the "last"
pooling, labels clustered within tasks. Run: python benchmarks/bench_probes.py
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np
from joblib.externals.loky import get_reusable_executor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a checkout, installed or not
from probes import FeatureSet, ProbeConfig, run_probe  # noqa: E402

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
    args = parser.parse_args()

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


if __name__ == "__main__":
    main()
