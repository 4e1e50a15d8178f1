"""``interp serve --policy drsr_gate --gate-scorer FILE``: for each scorer kind (ridge, set-mlp), the decisions the
proxy makes at every request of an agent run (one gate per session, its memory across requests) equal the offline
``drsr_gate`` condition's (with memory: the gate replayed at t = 1..b) on the same trajectory, and the histories
forwarded are the offline edits written back."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from interp.data.conditions import apply_condition
from interp.serve.app import Proxy
from interp.serve.messages import history_of, write_back
from interp.serve.policy import gate_factory, parse_serve_policy
from interp.serve.runlog import read_requests

from ._support import Stub, run_agent, scripted_turns

pytestmark = pytest.mark.e2e

N = 4


def synthetic_records(n: int) -> list[dict]:
    """tests/gate/synthetic.py's DRSR records (loaded by path: the test packages are not importable by name)."""
    path = Path(__file__).resolve().parents[1] / "gate" / "synthetic.py"
    spec = importlib.util.spec_from_file_location("gate_synthetic", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.records(n, planted=True, seed=1)


@pytest.fixture(scope="module", params=["ridge", "set-mlp"])
def scorer_file(request, tmp_path_factory, tiny_sensor):
    """A gate of each scorer kind trained on synthetic records, set to read the tiny model (its 64 dimensions
    projected to the records' 8, its full-attention layers) and open (tau above every score: it deletes the largest
    saving at every step, so decisions are made, not abstained)."""
    from patching.config import GateConfig
    from patching.gate_eval import train

    extra = {"scorer": "set-mlp", "calibration": GateConfig(folds=2).calibration()} if request.param == "set-mlp" \
        else {}
    gate, _ = train(synthetic_records(16), fractions=(0.5, 0.25, 0.25), n_members=1, **extra)
    assert gate.scorer.kind == request.param
    gate.spec = replace(gate.spec, attention_layers=tuple(tiny_sensor.full_attention_layers))
    gate.model = {"spec": "tiny-qwen3.5", "d_model": tiny_sensor.d_model, "proj_dim": 8}
    gate.setting = replace(gate.setting, tau=1.01)
    return gate.save(tmp_path_factory.mktemp("gate") / f"{request.param}.json", {})


def test_online_gate_decisions_equal_the_offline_gate_with_memory(scorer_file, tiny_sensor, serving, tmp_path):
    stub = Stub(scripted_turns(N))
    proxy = Proxy(serving(stub.build()), parse_serve_policy("drsr_gate"), tmp_path / "log", sensor=tiny_sensor,
                  gate_factory=gate_factory(scorer_file, tiny_sensor))
    sent, _ = run_agent(serving(proxy.build()), proxy.token, N)
    rows = read_requests(tmp_path / "log")
    assert [r["failure"] for r in rows] == [None] * (N + 1)
    decided = 0
    for k, (body, got, row) in enumerate(zip(sent, stub.received, rows)):
        hist = history_of(body, "offline")
        if hist is None:
            assert k == 0 and got["messages"] == body["messages"]
            continue
        fresh = gate_factory(scorer_file, tiny_sensor)("offline")  # no memory across requests: replayed 1..b
        edited, log = apply_condition("drsr_gate", hist.trajectory, hist.trajectory.n_steps, gate=fresh)
        assert row["edit_log"]["params"]["units"] == log.params["units"], k
        assert got["messages"] == write_back(body, hist, edited, log)["messages"], k
        decided += sum(map(len, log.params["units"].values()))
    assert decided > 0  # the gate did delete units, so equality is not that of two no-ops
