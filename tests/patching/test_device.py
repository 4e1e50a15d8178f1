"""One device end to end: with the model on a second device (``meta``), every tensor the engine hands on stays there.

The CPU is the only real device on a test machine, so a device mix-up (a
result moved to the host in one path and left on the accelerator in another,
then combined) cannot show on it. ``meta`` is a second device on which every
op runs shape-only: the model moved there runs the same code as on CUDA, and
any ``.cpu()`` of a meta tensor, or an op mixing meta and CPU tensors, raises.
The engine (``run_plan``, ``run_variants``) must return its tensors on the
sensor's device; KL Repair must hand ``P_full``, ``P_del`` and ``P_patch`` to
its scoring (the output boundary, where the one move to the host happens) on
that same device.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from patching.config import PatchConfig
import patching.kl_repair as kl_mod
from interp.sensor.forward import Plan, run_plan
from patching.kl_repair import default_sites, kl_repair_trajectory

from tests.patching.test_kl_repair import SHORT

RULE = PatchConfig().noise_rule  # the study's KL noise rule: PatchConfig's defaults

pytestmark = pytest.mark.unit

META = torch.device("meta")


@pytest.fixture(scope="module")
def meta_sensor(tiny_sensor):
    """The tiny sensor's plain HF model, copied onto the meta device (the session fixture is left as it is)."""
    return dataclasses.replace(tiny_sensor, hf_model=copy.deepcopy(tiny_sensor.hf_model).to(META), device=META)


def test_run_plan_keeps_its_outputs_on_the_device(meta_sensor):
    ids = list(range(5, 45))
    layer = meta_sensor.full_attention_layers[0]
    out = run_plan(meta_sensor, ids, Plan(pooled={"p": ("resid_pre", 2, [3, 30])}, rows={(layer, 39): "b"},
                                          logprobs=[20, 39], snapshots=[25], cuts=[12]))
    tensors = [out.sums["p"], out.rows["b"][layer], *out.logprobs.values()]
    assert [t.device for t in tensors] == [META] * len(tensors)
    assert out.snapshots[25].length == 25


def test_fast_kl_repair_scores_on_one_device(meta_sensor, monkeypatch):
    seen = []

    def record(task_id, b, p_full, p_del, p_patch, *rest):
        seen.append({p_full.device, p_del.device, p_patch.device})
        return kl_mod.BoundaryRepair(task_id, b, 1.0)

    monkeypatch.setattr(kl_mod, "_score", record)
    for condition in ("delete_all_reasoning", "delete_latest_reasoning"):
        kl_repair_trajectory(meta_sensor, SHORT, condition, default_sites(meta_sensor.n_layers), threshold=1e-6, rule=RULE)
    assert seen == [{META}] * 6


def test_reference_kl_repair_scores_on_one_device(monkeypatch):
    """The reference path runs the TransformerLens bridge: load the whole sensor onto the device."""
    from interp.sensor.models import load_model

    sensor = load_model("tiny-qwen3.5", device=META)
    seen = []

    def record(task_id, b, p_full, p_del, p_patch, *rest):
        seen.append({p_full.device, p_del.device, p_patch.device})
        return kl_mod.BoundaryRepair(task_id, b, 1.0)

    monkeypatch.setattr(kl_mod, "_score", record)
    kl_repair_trajectory(sensor, SHORT, "delete_all_reasoning", [("resid_pre", 2), ("attn_out", 3)], boundaries=[2],
                         method="reference", threshold=1e-6, rule=RULE)
    assert seen == [{META}]
