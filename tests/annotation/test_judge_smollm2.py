"""The judge end to end against a real local model: SmolLM2-135M behind a minimal OpenAI-compatible endpoint.

The endpoint (``tests/annotation/_local_chat.py``) is written here, not a
server package: ``load_model("smollm2-135m")``, the chat template, greedy
decoding. The judge labels G on the demo trajectories through ``interp label
--judge``, a pilot of the ``JUDGE_E2E_ITEMS`` (default 4) boundaries with the
shortest prompts (``--max-items``), 12 answer tokens (the label line comes
first); whatever the model answers, every item ends as a label the model gave
or as missing with the reason (never a 0 it did not give), and its agreement
with the demo annotations is printed as measured, not asserted. A few minutes
on two loaded CPU cores; the whole demo set (193 G items) takes hours there.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from interp.annotation.judge import folder_for
from interp.data.labels import annotation_labels, pair_agreement, read_labels_csv
from interp.data.trajectory import load_trajectories
from interp.pipelines.cli import app
from interp.sensor.models import ModelUnavailable, resolve_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_smollm2_judges_demo_boundaries_end_to_end(tmp_path, capsys):
    try:
        resolve_spec("smollm2-135m")
    except ModelUnavailable as exc:
        pytest.skip(str(exc))
    from tests.annotation._local_chat import LocalChat

    n_items = int(os.environ.get("JUDGE_E2E_ITEMS", "4"))
    trajs_path = ROOT / "data/demo/trajectories.jsonl"
    trajs = load_trajectories(trajs_path)
    out = tmp_path / "judge.csv"
    with LocalChat("smollm2-135m") as chat:
        result = CliRunner().invoke(app, ["label", "--judge", "--trajectories", str(trajs_path), "--labels", str(out),
                                          "--base-url", chat.base_url, "--model", "smollm2-135m", "--task", "g",
                                          "--max-items", str(n_items), "--max-chars", "300", "--max-tokens", "12",
                                          "--timeout", "1800"])
        assert result.exit_code == 0, result.output
        assert chat.served == n_items  # one request per item, no retries needed on a healthy endpoint
    journal = [json.loads(x) for x in (folder_for(out) / "journal.jsonl").read_text().splitlines()]
    answers = {(e["task_id"], e["after_step"]): e for e in journal if e["event"] == "answer"}
    assert len(answers) == n_items
    labels = read_labels_csv(out, "externalization_gap")
    rows = {(r["task_id"], int(r["after_step"])): r for r in csv.DictReader(out.open())}
    for key, rec in answers.items():
        assert rec["served_model"] == "smollm2-135m" and rows[key]["annotator"] == "judge:smollm2-135m"
        if rec["label"] is None:  # missing: an empty cell and the reason, never a 0
            assert key not in labels and rec["problem"] and rows[key]["externalization_gap"] == ""
            assert rows[key]["missing"].startswith("G: ")
        else:
            assert labels[key] == rec["label"] and not rec["problem"]
    truth = {k: v for k, v in annotation_labels(trajs, "externalization_gap").items() if k in answers}
    report = pair_agreement(labels, truth, n_boot=200, names=("smollm2-135m", "annotations"))
    reasons = sorted({a["problem"][:70] for a in answers.values() if a["problem"]})[:3]
    with capsys.disabled():
        print(f"\nSmolLM2-135M judge, G on the {n_items} shortest demo boundaries {sorted(answers)}: "
              f"{len(labels)} of {n_items} items labelled "
              f"({n_items - len(labels)} missing: {reasons}); "
              f"vs annotations kappa {report['kappa']} {report['kappa_note']} accuracy {report['accuracy']} "
              f"on {report['n']} shared")
