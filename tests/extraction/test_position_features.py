"""Position features of every boundary row: computed from the condition's render, written as manifest columns,
read back by ``FeatureSet.from_store`` as the probe's nuisance features, with final boundaries undefined."""

from __future__ import annotations

import numpy as np
import pytest

from interp.data.conditions import apply_condition
from interp.data.render import render
from interp.extraction.batch import extract_to_store
from interp.extraction.extract import ExtractConfig, extract_trajectory
from interp.extraction.store import MANIFEST_FIELDS, Store
from probes.baselines import NUISANCE_FEATURES
from probes.data import MISSING, FeatureSet

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("condition", ["full", "delete_all_reasoning"])
def test_position_features_come_from_the_render(tiny_sensor, mini_trajectory, condition):
    traj, tok = mini_trajectory, tiny_sensor.tokenizer
    rows = extract_trajectory(tiny_sensor, traj, condition, ExtractConfig(layers=[0], poolings=["last"]))
    assert [r.after_step for r in rows] == list(range(1, traj.n_steps + 1))
    for r in rows:
        edited, _ = apply_condition(condition, traj, r.after_step,
                                    counter=lambda s: len(tok.encode(s, add_special_tokens=False)))
        blocks = render(edited, r.after_step, tok).spans("reasoning_block")
        assert r.position == {"n_steps": traj.n_steps, "rel_position": r.after_step / traj.n_steps,
                              "reasoning_tokens": sum(s.end - s.start for s in blocks),
                              "n_reasoning_blocks": len(blocks)}
    blocks = [r.position["n_reasoning_blocks"] for r in rows]
    if condition == "full":
        assert blocks == sorted(blocks) and blocks[-1] > 0  # reasoning accumulates along the trajectory
    else:
        assert max(blocks) == 0 and all(r.position["reasoning_tokens"] == 0 for r in rows)


def test_manifest_columns_and_probe_inputs(tiny_sensor, mini_trajectory, tmp_path):
    store = tmp_path / "store"
    extract_to_store(tiny_sensor, [mini_trajectory], ["full"], ExtractConfig(layers=[0, 1], poolings=["last"]),
                     store, progress=False)
    frame = Store(store).manifest()
    declared = {f.name for f in MANIFEST_FIELDS}
    assert set(NUISANCE_FEATURES) <= set(frame.columns) and set(NUISANCE_FEATURES) <= declared
    n = mini_trajectory.n_steps
    assert frame["n_steps"].tolist() == [n] * n
    np.testing.assert_allclose(frame["rel_position"], frame["after_step"] / n)
    fs = FeatureSet.from_store(Store(store), labels={("mini-code-1", b): 0 for b in range(1, n + 1)})
    final = f"mini-code-1@{n}:full"
    assert fs.undefined == [final] and fs.y[fs.sample_ids.index(final)] == MISSING  # not 0, though labelled 0
    assert (fs.y[[i for i, s in enumerate(fs.sample_ids) if s != final]] == 0).all()
    assert list(fs.nuisance) == list(NUISANCE_FEATURES)
    np.testing.assert_array_equal(fs.nuisance["after_step"], frame["after_step"])
    np.testing.assert_array_equal(fs.nuisance["n_tokens"], frame["n_tokens"])
    labelled, excluded = fs.drop_missing()
    assert excluded == [final] and labelled.undefined == [] and len(labelled.nuisance["n_steps"]) == n - 1
