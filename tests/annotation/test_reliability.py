"""Percent agreement, Krippendorff's alpha and Gwet's AC1 against published worked examples, hand computations and
an installed package (``krippendorff``) and Gwet's formula written out unit by unit (``ac1_by_units``; irrCAC, which
pins scipy 1.12 and so numpy < 2, cannot be installed beside pyarrow); their task-bootstrap CIs and the notes on
degenerate CIs;
``interp labels agree`` on degenerate input answers with a sentence."""

from __future__ import annotations

import krippendorff
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from interp.data.labels import write_labels_csv
from interp.data.reliability import (
    gwet_ac1,
    krippendorff_alpha,
    percent_agreement,
    reliability,
    unit_counts,
)
from interp.pipelines.cli import app

pytestmark = pytest.mark.parity

N = None
# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: nominal data, 4 observers (A-D),
# 12 units, missing values; alpha = 0.743. The same data are Gwet's cac.raw4raters (AC1 = 0.7754).
KRIPPENDORFF_2011 = {"A": [1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N],
                     "B": [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3],
                     "C": [N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N],
                     "D": [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N]}


def as_sets(matrix: dict[str, list]) -> dict[str, dict[tuple[str, int], int]]:
    """Observer rows as label sets, unit u at boundary (``u<u>``, 1)."""
    return {o: {(f"u{u:02d}", 1): v for u, v in enumerate(row) if v is not None} for o, row in matrix.items()}


def ac1_by_units(matrix: dict[str, list], categories: list) -> float:
    """Gwet's AC1 for several raters with missing ratings (Gwet 2014, Handbook of Inter-Rater Reliability, eq. 4.5
    and 4.6), a loop over units: p_a averages, over the units rated twice or more, the share of agreeing rater
    pairs; pi_k averages each unit's share of category k over the units rated at least once;
    p_e = sum_k pi_k (1 - pi_k) / (q - 1)."""
    units = list(zip(*matrix.values()))
    rated = [[v for v in unit if v is not None] for unit in units]
    twice = [r for r in rated if len(r) >= 2]
    p_a = sum(sum(r.count(k) * (r.count(k) - 1) for k in categories) / (len(r) * (len(r) - 1))
              for r in twice) / len(twice)
    once = [r for r in rated if r]
    pi = [sum(r.count(k) / len(r) for r in once) / len(once) for k in categories]
    p_e = sum(p * (1 - p) for p in pi) / (len(categories) - 1)
    return (p_a - p_e) / (1 - p_e)


def test_krippendorffs_worked_example_and_gwets_ac1_on_it():
    _, counts, cats = unit_counts(as_sets(KRIPPENDORFF_2011))
    alpha, ac1, pa = krippendorff_alpha(counts), gwet_ac1(counts), percent_agreement(counts)
    assert round(alpha, 3) == 0.743  # the paper's value
    reference = krippendorff.alpha(reliability_data=[[np.nan if v is None else v for v in row]
                                                     for row in KRIPPENDORFF_2011.values()],
                                   level_of_measurement="nominal")
    assert abs(alpha - reference) < 1e-9
    assert round(ac1, 4) == 0.7754  # Gwet's value for cac.raw4raters
    assert abs(ac1 - ac1_by_units(KRIPPENDORFF_2011, list(cats))) < 1e-9
    # by hand: 11 units with two or more values; agreeing pairs 1 everywhere but units 2 and 8 (1/2) and 6 (0)
    assert abs(pa - 9 / 11) < 1e-12


def test_two_raters_by_hand():
    """A 2x2 table (both 1: 40, A1 B0: 9, A0 B1: 6, both 0: 45), by the textbook formulas."""
    pairs = [(1, 1)] * 40 + [(1, 0)] * 9 + [(0, 1)] * 6 + [(0, 0)] * 45
    sets = {"A": {(f"t{i}", 1): a for i, (a, _) in enumerate(pairs)}, "B": {(f"t{i}", 1): b for i, (_, b) in
                                                                             enumerate(pairs)}}
    _, counts, _ = unit_counts(sets, (0, 1))
    p_a = 85 / 100
    pi = (49 + 46) / 200
    ac1 = (p_a - 2 * pi * (1 - pi)) / (1 - 2 * pi * (1 - pi))
    n1, n0 = 49 + 46, 51 + 54  # values pooled over both raters
    alpha = 1 - (200 - 1) * (9 + 6) * 2 / (2 * n1 * n0)  # Krippendorff: 1 - (n-1) sum o_ck / sum n_c n_k, c != k
    assert abs(percent_agreement(counts) - p_a) < 1e-12
    assert abs(gwet_ac1(counts) - ac1) < 1e-12 and abs(krippendorff_alpha(counts) - alpha) < 1e-12


@pytest.mark.parametrize("seed", range(6))
def test_alpha_and_ac1_equal_the_packages_on_random_data_with_missing_labels(seed):
    rng = np.random.default_rng(seed)
    n_raters, n_units = int(rng.integers(2, 6)), int(rng.integers(5, 40))
    truth = rng.integers(0, 2, n_units)
    matrix = {f"r{r}": [None if rng.random() < 0.3 else int(t ^ (rng.random() < 0.25)) for t in truth]
              for r in range(n_raters)}
    _, counts, _ = unit_counts(as_sets(matrix), (0, 1))
    alpha = krippendorff_alpha(counts)
    reference = krippendorff.alpha(reliability_data=[[np.nan if v is None else v for v in row]
                                                     for row in matrix.values()], level_of_measurement="nominal",
                                   value_domain=[0, 1])
    assert alpha is not None and abs(alpha - reference) < 1e-9
    assert abs(gwet_ac1(counts) - ac1_by_units(matrix, [0, 1])) < 1e-9


def reference_bootstrap(sets: dict, fn, n_boot: int, seed: int) -> list[float]:
    """The task bootstrap written out: draw tasks with replacement, pool their boundaries' counts, the statistic."""
    units, counts, _ = unit_counts(sets, (0, 1))
    tasks = sorted({u[0] for u in units})
    rows = {t: [i for i, u in enumerate(units) if u[0] == t] for t in tasks}
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_boot):
        picked = [i for t in rng.integers(len(tasks), size=len(tasks)) for i in rows[tasks[t]]]
        value = fn(counts[picked])
        if value is not None:
            out.append(value)
    return out


def three_annotators(rng: np.random.Generator, n_tasks: int, flip: float) -> dict:
    sets: dict = {"a": {}, "b": {}, "c": {}}
    for t in range(n_tasks):
        for s in range(1, int(rng.integers(2, 6)) + 1):
            truth = int(rng.random() < 0.4)
            for name in sets:
                if rng.random() < 0.85:
                    sets[name][(f"task{t:02d}", s)] = truth ^ int(rng.random() < flip)
    return sets


def test_the_cis_are_a_task_bootstrap_and_say_when_they_are_degenerate():
    sets = three_annotators(np.random.default_rng(3), 15, 0.15)
    report = reliability(sets, (0, 1), n_boot=200, seed=4)
    for name, fn in (("krippendorff_alpha", krippendorff_alpha), ("gwet_ac1", gwet_ac1),
                     ("percent_agreement", percent_agreement)):
        draws = reference_bootstrap(sets, fn, 200, 4)
        assert report[name]["ci"] == pytest.approx([np.percentile(draws, 2.5), np.percentile(draws, 97.5)], abs=1e-12)
        assert report[name]["note"] == "" and report[name]["ci"][0] < report[name]["value"] < report[name]["ci"][1]
    two = reliability({n: {k: v for k, v in s.items() if k[0] in ("task00", "task01")} for n, s in sets.items()},
                      (0, 1), n_boot=100)
    assert "only 2 tasks (fewer than 10)" in two["gwet_ac1"]["note"]
    one_class = {n: {k: 1 for k in s} for n, s in sets.items()}
    flat = reliability(one_class, (0, 1), n_boot=100)
    assert flat["krippendorff_alpha"]["value"] is None and flat["krippendorff_alpha"]["ci"] is None
    assert flat["krippendorff_alpha"]["note"].startswith("undefined: every label on the shared boundaries is 1")
    assert flat["gwet_ac1"]["value"] == 1.0 and "every resample gave the same value" in flat["gwet_ac1"]["note"]
    single = reliability({n: {k: v for k, v in s.items() if k[0] == "task00"} for n, s in sets.items()}, (0, 1),
                         n_boot=100)
    assert single["gwet_ac1"]["ci"] is None and single["gwet_ac1"]["note"].startswith("no CI: 1 task")


def write(path, labels: dict, field: str = "future_necessity") -> None:
    write_labels_csv(path, [{"task_id": k[0], "after_step": k[1], field: v, "annotator": path.stem}
                            for k, v in labels.items()], field, ["annotator"])


def test_the_command_prints_alpha_and_ac1_with_cis_for_any_number_of_annotators(tmp_path):
    sets = three_annotators(np.random.default_rng(8), 12, 0.2)
    for name, labels in sets.items():
        write(tmp_path / f"{name}.csv", labels)
    result = CliRunner().invoke(app, ["labels", "agree", *(str(tmp_path / f"{n}.csv") for n in sets),
                                      "--n-boot", "100"])
    assert result.exit_code == 0, result.output
    ref = reliability({f"{n}.csv": s for n, s in sets.items()}, (0, 1), n_boot=100)
    for title, name in (("Krippendorff's alpha (nominal)", "krippendorff_alpha"), ("Gwet's AC1", "gwet_ac1"),
                        ("percent agreement", "percent_agreement")):
        lo, hi = ref[name]["ci"]
        assert f"  {title} {ref[name]['value']:.4f}, 95% CI [{lo:.4f}, {hi:.4f}]" in result.output
    assert result.output.count("Cohen's kappa") == 3  # every pair


def test_degenerate_input_is_answered_with_a_sentence(tmp_path):
    runner = CliRunner()
    write(tmp_path / "a.csv", {("t1", 1): 1, ("t1", 2): 0, ("t2", 1): 1})
    header = "task_id,after_step,future_necessity\n"
    (tmp_path / "h1.csv").write_text(header)
    (tmp_path / "h2.csv").write_text(header)
    cases = {
        ("a.csv", "a.csv"): "given twice",
        ("h1.csv", "h2.csv"): "nothing to compare",
        ("h1.csv", "h2.csv", "--field", "future_necessity"): "agreement needs two annotators' labels",
        ("a.csv", "h1.csv", "--field", "future_necessity"): "agreement needs two annotators' labels",
        ("a.csv",): "--trajectories: needed",
    }
    for args, message in cases.items():
        result = runner.invoke(app, ["labels", "agree",
                                     *(str(tmp_path / a) if a.endswith(".csv") else a for a in args)])
        assert result.exit_code != 0 and isinstance(result.exception, ValueError), (args, result.output)
        assert message in str(result.exception), (args, str(result.exception))
    write(tmp_path / "a2.csv", {("t1", 1): 1, ("t1", 2): 1, ("t2", 1): 0})
    two_tasks = runner.invoke(app, ["labels", "agree", str(tmp_path / "a.csv"), str(tmp_path / "a2.csv")])
    assert two_tasks.exit_code == 0 and "only 2 tasks (fewer than 10)" in two_tasks.output
