"""The probe on SAE features: a planted feature is the probe direction's top feature (and the nested-CV probe with
its nulls finds it); with the labels carrying no signal, nothing is found."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from probes import ProbeConfig, run_probe
from probes.sae import dense_codes, probe_features, sae_feature_set

pytestmark = pytest.mark.unit

D_SAE, TOP_K, PLANTED = 40, 5, 17
FAST = ProbeConfig(n_outer=3, n_inner=2, n_perm=4, n_boot=0, n_jobs=1, pca_grid=(None,), C_grid=(0.1, 1.0),
                   baselines=False)


def _store_rows(seed: int, planted: bool, n_tasks: int = 12, per_task: int = 6):
    """Manifest rows and stored top-k codes of a synthetic store: random features fire everywhere; the planted
    feature fires (strongly) on the boundaries whose label is 1, when ``planted``."""
    rng = np.random.default_rng(seed)
    n = n_tasks * per_task
    y = rng.permutation(np.arange(n) % 2)
    ids = np.stack([rng.choice([j for j in range(D_SAE) if j != PLANTED], TOP_K, replace=False) for _ in range(n)])
    values = rng.exponential(1.0, (n, TOP_K)).astype(np.float32)
    if planted:
        ids[y == 1, 0] = PLANTED
        values[y == 1, 0] = 1.0 + rng.exponential(1.0, int((y == 1).sum()))
    after = np.tile(np.arange(1, per_task + 1), n_tasks)
    tasks = np.repeat([f"t{t:02d}" for t in range(n_tasks)], per_task)
    frame = pd.DataFrame({"task_id": tasks, "after_step": after, "n_steps": per_task + 1,
                          "sample_id": [f"{t}@{b}:full" for t, b in zip(tasks, after)], "future_necessity": y,
                          "rel_position": after / (per_task + 1), "n_tokens": 100 * after,
                          "reasoning_tokens": 50 * after, "n_reasoning_blocks": after})
    return frame, {"last": {"ids": ids, "values": values, "sq_err": np.zeros(n, np.float32)}}


def test_dense_codes_put_each_value_at_its_feature():
    ids = np.array([[3, 1], [0, 2]])
    vals = np.array([[0.5, 2.0], [1.0, 3.0]], np.float32)
    dense = dense_codes(ids, vals, 4)
    assert dense.tolist() == [[0.0, 2.0, 0.0, 0.5], [1.0, 0.0, 3.0, 0.0]]


@pytest.mark.parametrize("seed", range(5))
def test_planted_feature_is_the_top_feature(seed):
    frame, codes = _store_rows(seed, planted=True)
    fs = sae_feature_set(frame, codes, D_SAE, layer=3)
    top = [row for row in probe_features(fs, FAST, n_top=3) if row["pooling"] == "last"]
    assert top[0]["feature"] == PLANTED and top[0]["coef"] > 0 and top[0]["coef_per_sd"] > 0
    assert all(c["activation"] > 1.0 for c in top[0]["contexts"])  # its strongest contexts are where it fires


@pytest.mark.parametrize("seed", range(2))
def test_probe_with_nulls_finds_the_planted_feature_and_nothing_without_it(seed):
    with_signal = run_probe(sae_feature_set(*_store_rows(seed, planted=True), D_SAE, layer=3), FAST)
    without = run_probe(sae_feature_set(*_store_rows(seed, planted=False), D_SAE, layer=3), FAST)
    assert with_signal["auroc"] > 0.9 and with_signal["permutation_p"] == pytest.approx(0.2)  # 1/(1 + 4)
    assert without["auroc"] < 0.75 and without["permutation_p"] > 0.2
