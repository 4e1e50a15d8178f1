"""Token accounting on the importers' real public samples (tests/importers/samples/), tiny model's tokenizer:
the invariants of the cache model on real runs, and the full history's cache reading every earlier token."""

from __future__ import annotations

import pytest

from interp.accounting.tokens import account
from interp.data.importers.registry import import_runs
from interp.data.trajectory import load_trajectories
from tests.importers._support import REAL

pytestmark = pytest.mark.unit

SAMPLES = ["tau2/claude-sonnet-4-5_retail.json", "atif/rfc_example",
           "mini-swe-agent/deepseek_2.3_astropy__astropy-12907.traj.json"]
POLICIES = ["full", "delete_all_reasoning", "delete_latest_reasoning", "keep_latest_reasoning", "random:r=0.1",
            "sliding_window:k=1", "keep_last_k_reasoning:k=1"]


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> list:
    out = []
    for name in SAMPLES:
        path = tmp_path_factory.mktemp("real") / "t.jsonl"
        assert import_runs("auto", REAL / name, path).written
        out += load_trajectories(path, allow_control_tokens=True)
    return out


def test_real_samples_keep_the_cache_invariants(real, tokenizer_tiny):
    rows, skipped = account(real, POLICIES, tokenizer_tiny)
    assert not skipped and set(rows["policy"]) == set(POLICIES)
    assert (rows["cache_read_tokens"] + rows["cache_write_tokens"] == rows["input_tokens"]).all()
    assert (rows["cache_read_tokens"] <= rows["input_tokens"]).all() and (rows["output_tokens"] > 0).all()
    full = rows[rows["policy"] == "full"].reset_index(drop=True)
    assert (full["direct_removal_tokens"] == 0).all()
    for _, g in full.groupby("task_id"):  # appending history: request k reads all of request k-1 + its output
        prev = (g["input_tokens"] + g["output_tokens"]).shift(1).dropna().astype(int).tolist()
        assert g["cache_read_tokens"].tolist()[1:] == prev
    tau2 = rows[(rows["task_id"] == "14")]
    assert (tau2.groupby("policy")["input_tokens"].sum()["delete_all_reasoning"]
            < tau2.groupby("policy")["input_tokens"].sum()["full"])  # its steps carry thinking


@pytest.fixture(scope="module")
def tokenizer_tiny():
    from interp.sensor.models import load_tokenizer

    return load_tokenizer("tiny-qwen3.5")
