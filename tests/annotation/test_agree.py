"""``interp labels agree``: Cohen's kappa as scikit-learn computes it, a task-bootstrap CI, the disagreements."""

from __future__ import annotations

import json
from pathlib import Path
import re

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score
from typer.testing import CliRunner

from interp.data.labels import pair_agreement, write_labels_csv
from interp.pipelines.cli import app

pytestmark = pytest.mark.parity


def annotators(rng: np.random.Generator, n_tasks: int, flip: float) -> tuple[dict, dict]:
    """Two label sets over ``n_tasks`` tasks of 3-9 boundaries; the second flips each label with prob ``flip``
    (0.5: independent of the first)."""
    a, b = {}, {}
    for t in range(n_tasks):
        for s in range(1, int(rng.integers(3, 10)) + 1):
            a[(f"task{t:02d}", s)] = int(rng.random() < 0.45)
            b[(f"task{t:02d}", s)] = a[(f"task{t:02d}", s)] ^ int(rng.random() < flip)
    return a, b


def confusion(a: dict, b: dict, keys: list) -> list[list[int]]:
    """The 2x2 table counted by hand: rows a's class, columns b's."""
    return [[sum(1 for k in keys if (a[k], b[k]) == (r, c)) for c in (0, 1)] for r in (0, 1)]


def reference_bootstrap(a: dict, b: dict, n_boot: int, seed: int) -> list[float]:
    """The task bootstrap, written out: draw tasks with replacement, pool their boundaries, kappa (defined ones)."""
    rng = np.random.default_rng(seed)
    tasks = sorted({k[0] for k in a})
    by_task = {t: sorted(k for k in a if k[0] == t) for t in tasks}
    kappas = []
    for _ in range(n_boot):
        keys = [k for i in rng.integers(len(tasks), size=len(tasks)) for k in by_task[tasks[i]]]
        x, y = [a[k] for k in keys], [b[k] for k in keys]
        if len(set(x) | set(y)) > 1:
            k = cohen_kappa_score(x, y, labels=[0, 1])
            if k == k:
                kappas.append(k)
    return kappas


def test_kappa_equals_sklearn_and_its_ci_is_a_task_bootstrap():
    a, b = annotators(np.random.default_rng(0), 20, 0.2)
    del b[("task03", 1)]  # boundaries only one annotator labelled are counted, not compared
    report = pair_agreement(a, b, n_boot=300, seed=1)
    keys = sorted(set(a) & set(b))
    assert report["kappa"] == round(cohen_kappa_score([a[k] for k in keys], [b[k] for k in keys]), 4)
    ref = reference_bootstrap({k: a[k] for k in keys}, b, 300, 1)
    assert report["n_boot_defined"] == len(ref)
    assert report["kappa_ci"] == [round(float(np.percentile(ref, 2.5)), 4), round(float(np.percentile(ref, 97.5)), 4)]
    assert report["only_first"] == 1 and report["only_second"] == 0 and report["n_tasks"] == 20
    (n00, n01), (n10, n11) = report["confusion"]
    assert (n00, n01, n10, n11) == tuple(sum(1 for k in keys if (a[k], b[k]) == p) for p in ((0, 0), (0, 1), (1, 0), (1, 1)))
    assert report["disagreements"] == [{"task_id": k[0], "after_step": k[1], "first": a[k], "second": b[k]}
                                       for k in keys if a[k] != b[k]]


@pytest.mark.parametrize("flip, agree", [(0.1, True), (0.5, False)])
def test_the_ci_finds_agreement_only_where_there_is_some(flip, agree):
    a, b = annotators(np.random.default_rng(3), 30, flip)
    lo, hi = pair_agreement(a, b, n_boot=400, seed=0)["kappa_ci"]
    assert (lo > 0.3) if agree else (lo < 0 < hi)


def test_the_command_prints_and_writes_the_report(tmp_path):
    a, b = annotators(np.random.default_rng(5), 8, 0.3)
    for name, labels in (("alice", a), ("bob", b)):
        write_labels_csv(tmp_path / f"{name}.csv", [{"task_id": k[0], "after_step": k[1], "future_necessity": v,
                                                     "annotator": name} for k, v in labels.items()],
                         "future_necessity", ["annotator"])
    result = CliRunner().invoke(app, ["labels", "agree", str(tmp_path / "alice.csv"), str(tmp_path / "bob.csv"),
                                      "--n-boot", "200", "--out", str(tmp_path / "agree.json")])
    assert result.exit_code == 0, result.output
    keys = sorted(a)
    kappa = round(cohen_kappa_score([a[k] for k in keys], [b[k] for k in keys]), 4)
    assert f"future_necessity: {len(keys)} shared boundaries of 8 tasks" in result.output
    assert f"Cohen's kappa {kappa}, 95% CI [" in result.output
    (n00, n01), (n10, n11) = confusion(a, b, keys)
    assert "confusion (rows: alice.csv, columns: bob.csv; boundaries)" in result.output
    assert re.search(rf"alice\.csv 0 +{n00} +{n01}\n", result.output)
    assert re.search(rf"alice\.csv 1 +{n10} +{n11}\n", result.output)
    assert re.search(r"bob\.csv 0 +bob\.csv 1\n", result.output)
    n_disagree = sum(a[k] != b[k] for k in keys)
    assert result.output.count("disagree ") == n_disagree
    doc = json.loads((tmp_path / "agree.json").read_text())
    assert doc["fields"]["future_necessity"]["kappa"] == kappa and "externalization_gap" not in doc["fields"]
    bad = CliRunner().invoke(app, ["labels", "agree", str(tmp_path / "alice.csv"), str(tmp_path / "bob.csv"),
                                   "--field", "externalization_gap"])
    assert bad.exit_code != 0 and "missing column" in str(bad.exception)


def write(path, labels: dict, field: str = "future_necessity", annotator: str | None = None) -> None:
    write_labels_csv(path, [{"task_id": k[0], "after_step": k[1], field: v, "annotator": annotator or path.stem}
                            for k, v in labels.items()], field, ["annotator"])


@pytest.mark.parametrize("a_class, b_class, note", [
    (1, 1, "kappa undefined: a.csv and b.csv both used only class 1 on the 12 shared boundaries"),
    (0, None, "kappa is 0 by construction: a.csv used only class 0 on the 12 shared boundaries"),
])
def test_the_command_says_why_kappa_says_nothing_when_an_annotator_used_one_class(tmp_path, a_class, b_class, note):
    keys = [(f"t{t}", s) for t in range(4) for s in (1, 2, 3)]
    a = {k: a_class for k in keys}
    b = {k: (b_class if b_class is not None else i % 2) for i, k in enumerate(keys)}
    write(tmp_path / "a.csv", a)
    write(tmp_path / "b.csv", b)
    result = CliRunner().invoke(app, ["labels", "agree", str(tmp_path / "a.csv"), str(tmp_path / "b.csv"),
                                      "--n-boot", "50", "--level", "0.9"])
    assert result.exit_code == 0, result.output
    assert note in result.output and "90% CI [" in result.output
    report = pair_agreement(a, b, n_boot=50, level=0.9, names=("a.csv", "b.csv"))
    sk = cohen_kappa_score([a[k] for k in keys], [b[k] for k in keys])
    assert (report["kappa"] is None) == (sk != sk) and report["level"] == 0.9
    assert report["kappa"] is None or report["kappa"] == 0.0


def test_a_judge_against_the_demo_annotations_and_the_status_of_three_sources(tmp_path):
    """SECOND omitted: the trajectories' own annotations; status counts who labelled what and the overlaps."""
    from interp.data.labels import annotation_labels
    from interp.data.trajectory import load_trajectories

    demo = Path(__file__).resolve().parents[2] / "data" / "demo" / "trajectories.jsonl"
    truth = annotation_labels(load_trajectories(demo), "externalization_gap")
    keys = sorted(truth)
    judge = {k: (1 - v if i % 5 == 0 else v) for i, (k, v) in enumerate(sorted(truth.items())) if i % 7}
    write(tmp_path / "judge.csv", judge, "externalization_gap", "judge:m")
    person = {k: truth[k] for k in keys[:40]}
    write(tmp_path / "ann.csv", person, "externalization_gap", "ann")
    result = CliRunner().invoke(app, ["labels", "agree", str(tmp_path / "judge.csv"), "--trajectories", str(demo),
                                      "--n-boot", "100"])
    assert result.exit_code == 0, result.output
    shared = sorted(set(judge) & set(truth))
    kappa = round(cohen_kappa_score([judge[k] for k in shared], [truth[k] for k in shared]), 4)
    assert f"externalization_gap: {len(shared)} shared boundaries of 25 tasks" in result.output
    assert f"Cohen's kappa {kappa}, 95% CI [" in result.output and "rows: judge.csv, columns: annotations" in result.output
    assert result.output.count("disagree ") == sum(judge[k] != truth[k] for k in shared)

    lost = [k for i, k in enumerate(keys) if not i % 7]  # the judge's missing items: an empty cell and the reason
    write_labels_csv(tmp_path / "judge.csv", [
        *({"task_id": k[0], "after_step": k[1], "externalization_gap": v, "annotator": "judge:m", "missing": ""}
          for k, v in judge.items()),
        *({"task_id": k[0], "after_step": k[1], "externalization_gap": "", "annotator": "judge:m",
           "missing": "G: timeout after 60 s after 5 attempts"} for k in lost)], "externalization_gap",
        ["annotator", "missing"])
    status = CliRunner().invoke(app, ["labels", "status", str(tmp_path / "judge.csv"), str(tmp_path / "ann.csv"),
                                      "--trajectories", str(demo), "--annotations"])
    assert status.exit_code == 0, status.output
    n = len(keys)
    assert f"judge.csv: G {len(judge)}/{n}, y 0/{n - 25} labelled, 25 tasks of 25" in status.output
    assert f"  judge:m: G {len(judge)}/{n}, y 0/{n - 25}" in status.output
    assert f"  missing (the judge's failed or unusable answers): G {len(lost)}, y 0" in status.output
    assert "annotations: 25 y labels at final boundaries (undefined there) not counted" in status.output
    assert f"annotations: G {n}/{n}, y {n - 25}/{n - 25} labelled" in status.output
    assert f"ann.csv: G 40/{n}" in status.output and f"annotations: G {n}/{n}" in status.output
    assert f"judge.csv & ann.csv: G {len(set(judge) & set(person))}, y 0" in status.output
    assert f"judge.csv & annotations: G {len(shared)}" in status.output
