"""Attribution maps: the first-order estimate against its exact oracle, finite differences and known truths."""

from __future__ import annotations

import numpy as np
import pytest

from interp.sensor.hooks import hook_name
from patching.attribution import agreement, align, exact_effects, linear_harms, linear_kl_repair
from patching.harm import candidate_sets, set_harms
from patching.config import PatchConfig
from patching.kl_repair import boundary_renders, kl_repair_trajectory

pytestmark = pytest.mark.unit

CONDITION = "delete_all_reasoning"


def _renders(sensor, traj, b):
    full, deleted = boundary_renders(sensor, traj, CONDITION, [b])
    return full[b].input_ids, deleted[b].input_ids


def test_align_maps_kept_tokens_and_leaves_inserted_ones_unmatched():
    full = list(range(100, 140))
    deleted = full[:5] + [7] + full[12:30] + full[33:]  # two cuts and one inserted marker token
    got = align(full, deleted)
    want = [*range(5), -1, *range(12, 30), *range(33, 40)]
    assert got.tolist() == want


def test_exact_patch_of_the_tail_equals_kl_repair(tiny_sensor, mini_trajectory):
    """The oracle of the history sites (alpha = 1 in the attribution's own forward) reproduces KL Repair's fast
    path, an independent implementation, at the boundary token of every layer."""
    b = 3
    sites = [("resid_pre", layer) for layer in range(tiny_sensor.n_layers)]
    full, deleted = _renders(tiny_sensor, mini_trajectory, b)
    lin = linear_kl_repair(tiny_sensor, full, deleted, [hook_name(*s) for s in sites])
    n = len(deleted)
    ours = exact_effects(tiny_sensor, lin, deleted, [(k, [n - 1]) for k in range(len(sites))])
    (row,) = kl_repair_trajectory(tiny_sensor, mini_trajectory, CONDITION, sites, [b],
                                  rule=PatchConfig().noise_rule)
    assert abs(lin.d - row.d) <= 1e-6 + 1e-4 * row.d
    np.testing.assert_allclose(ours, np.array(row.kl_patch) - row.d, atol=1e-6 + 1e-4 * row.d)


@pytest.fixture(scope="module")
def llama_fp64(llama_path):
    """The random Llama in float64 (pure torch ops: a central difference resolves 1e-9 of the KL; the hybrid's
    Gated-DeltaNet kernels compute in float32 inside and blur it at 1e-5)."""
    from interp.sensor.models import load_model

    return load_model(str(llama_path), dtype="fp64")


def test_attribution_equals_finite_differences(llama_fp64, mini_trajectory):
    """dKL/dalpha from the one backward equals the central difference of the exact patched KL at alpha = +-eps, at
    the boundary token of every layer and at history positions (float64: the difference is the algorithm's)."""
    sensor = llama_fp64
    full, deleted = _renders(sensor, mini_trajectory, 2)
    names = [hook_name("resid_pre", layer) for layer in range(sensor.n_layers)]
    lin = linear_kl_repair(sensor, full, deleted, names)
    n = len(deleted)
    history = [i for i in range(n - 1) if lin.aligned[i] >= 0][:: max(1, n // 6)][:6]
    sites = [(k, [n - 1]) for k in range(len(names))] + [(len(names) - 1, [i]) for i in history]
    def central(eps: float) -> np.ndarray:
        up = np.array(exact_effects(sensor, lin, deleted, sites, strength=eps))
        return (up - np.array(exact_effects(sensor, lin, deleted, sites, strength=-eps))) / (2 * eps)

    # Richardson: (4 D(h) - D(2h)) / 3 cancels the h^2 term. h is not smaller because HF's RMSNorm and rotary compute
    # in float32 even in a float64 model: round-off ~1e-8 nats in the KL, divided by h.
    fd = (4 * central(1e-2) - central(2e-2)) / 3
    est = np.array([lin.effect[k, pos[0]] for k, pos in sites])
    scale = np.abs(est).max()
    assert scale > 1e-6  # the deletion changes the boundary at all
    np.testing.assert_allclose(est, fd, atol=1e-5 * scale, rtol=1e-4)


def test_linear_regime_and_the_factor_two_at_the_final_residual(tiny_sensor_fp64, mini_trajectory):
    """Known truths by hand. KL(P_full || P(x)) is quadratic at its minimum x_full: KL ~ (x - x_full)' F (x - x_full)
    / 2, so for the final residual (a site carrying the whole deletion: the exact patch gives P_full, change -d) the
    first-order change is -(x_del - x_full)' F (x_del - x_full) = -2d to leading order. And a patch scaled down to
    strength s is linear in s: exact(s) / s -> effect as s -> 0 (the regime where the estimate is exact)."""
    sensor = tiny_sensor_fp64
    full, deleted = _renders(sensor, mini_trajectory, 2)
    last = sensor.n_layers - 1
    lin = linear_kl_repair(sensor, full, deleted, [hook_name("resid_post", last)])
    n = len(deleted)
    (exact,) = exact_effects(sensor, lin, deleted, [(0, [n - 1])])
    assert exact == pytest.approx(-lin.d, abs=1e-9)  # the exact patch of the final residual restores P_full
    assert lin.effect[0, n - 1] / exact == pytest.approx(2.0, rel=0.1)  # d ~ 1e-3: higher orders ~ sqrt(d)
    small = [exact_effects(sensor, lin, deleted, [(0, [n - 1])], strength=s)[0] / s for s in (1e-1, 1e-2)]
    errors = np.abs(np.array(small) - lin.effect[0, n - 1])
    assert errors[1] == pytest.approx(errors[0] / 10, rel=0.2)  # the error is second order: it shrinks with s
    assert errors[1] < 0.01 * abs(lin.effect[0, n - 1])


@pytest.fixture(scope="module")
def positionless_llama(tmp_path_factory):
    """A random Llama whose rotary base is so large that no position matters (every rotation is the identity):
    deleting a unit then equals gating its keys to 0, so first-order harm has only its curvature error."""
    from transformers import LlamaConfig

    from interp.sensor.models import load_model
    from tests.conftest import _save_random

    config = LlamaConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=4096, initializer_range=0.02,
                         rope_theta=1e30)
    return load_model(str(_save_random(tmp_path_factory.mktemp("llama_positionless"), config, seed=6)))


def test_first_order_harm_agrees_with_exact_singletons_on_a_synthetic_case(positionless_llama, mini_trajectory):
    """Small weights, no position dependence: every unit moves the next output a little and deleting it equals
    gating it out, so first-order and exact DRSR singleton harm agree (rank and size)."""
    b = 2
    singles = candidate_sets(mini_trajectory, b, max_k=1)
    nll, lin = linear_harms(positionless_llama, mini_trajectory, b, singles)
    nll_exact, exact = set_harms(positionless_llama, mini_trajectory, b, singles)
    assert nll == pytest.approx(nll_exact, rel=1e-5)  # the gate at 1 is the plain forward
    est, ex = [h for h, _ in lin], [s.harm for s in exact]
    stats = agreement(est, ex, [str(s) for s in singles])
    assert stats["n"] == len(singles) >= 5
    assert stats["spearman"] > 0.9
    assert stats["mae"] < 0.2 * np.abs(ex).mean()
    assert all(n > 0 for _, n in lin)  # every unit removes tokens


def test_first_order_harm_refuses_gated_deltanet(tiny_sensor, mini_trajectory):
    with pytest.raises(ValueError, match="Gated-DeltaNet"):
        linear_harms(tiny_sensor, mini_trajectory, 2, candidate_sets(mini_trajectory, 2, max_k=1))


def test_agreement_reports_rank_error_and_the_worst_sites():
    est, ex = [0.1, 0.2, 0.3, 0.9], [0.1, 0.25, 0.3, 0.4]
    got = agreement(est, ex, ["a", "b", "c", "d"])
    assert got["spearman"] == pytest.approx(1.0)
    assert got["mae"] == pytest.approx((0.05 + 0.5) / 4)
    assert got["disagree"][0]["site"] == "d" and got["disagree"][0]["error"] == pytest.approx(0.5)
    assert agreement([1.0, float("nan")], [1.0, 2.0], ["a", "b"])["n"] == 1
    assert agreement([1.0, 1.0, 1.0], [1.0, 2.0, 3.0], ["a", "b", "c"])["spearman"] is None  # constant side


def test_patch_stage_writes_attribution_with_its_record_and_maps(tiny_sensor, mini_trajectory, tmp_path):
    """``interp patch --method attribution``'s stage: attribution.json matches its schema and carries the config
    that ran; the maps hold every site at every deleted-render position; harm says why it did not run here."""
    import json

    from safetensors.torch import load_file

    from interp.pipelines import stages
    from interp.record import config_from
    from interp.schema import check
    from patching.attribution import FIELDS, MAPS_FILE
    from patching.config import PatchConfig

    config = PatchConfig(method="attribution", layers="0,4,7", exact_sites=2, n_boot=0)
    stages.patch(tiny_sensor, [mini_trajectory], tmp_path, config)
    doc = json.loads((tmp_path / "attribution.json").read_text())
    check(doc, FIELDS, "attribution.json")
    assert config_from(PatchConfig, doc["config"]) == config
    assert doc["sites"] == ["resid_pre.0", "resid_pre.4", "resid_pre.7"]
    maps = load_file(tmp_path / MAPS_FILE)
    for row in doc["boundaries"]:
        key = f"{row['task_id']}@{row['after_step']}"
        assert tuple(maps[f"{key}.effect"].shape) == (3, row["n_tokens_deleted"])
        assert len(row["history"]) == 2
        last = row["after_step"] == mini_trajectory.n_steps
        assert ("last boundary" if last else "Gated-DeltaNet") in row["harm"]["reason"]
    assert doc["agreement"]["tail"]["n"] == 3 * len(doc["boundaries"])
    assert doc["forwards"]["attribution"] == 3 and doc["forwards"]["exact"] > 100
