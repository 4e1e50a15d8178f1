"""Training and held-out evaluation of DRSR's set-risk gate (``patching.gate``): the scorer file and ``gate.json``.

:func:`patching.drsr.drsr_records` reads the per-boundary parts of an ``interp drsr`` run. :func:`train` builds the supervision,
splits trajectories, scores the train and validation trajectories cross-fitted (:func:`cross_fit`: task-level
folds, each trajectory scored by a model that never saw it), selects (K, beta, tau) on the pooled out-of-fold
scores (``patching.gate.select``: the finite-sample bound or DRSR's empirical rule) and refits the scorer on all
of them.
Everything is computed over the pool the online gate enumerates (``patching.gate.supervision``: the same pool
rule, the same feature function ``set_matrix`` and the same choice as ``SetGate``), with DRSR's exact harm for the
sets its stage measured; the others are unmeasured: they can be chosen (as online) but carry no harm, and the
unsafe rate and mean harm are over the measured deletions (``n_measured`` of ``n_deleted``).
:func:`evaluate` scores the test trajectories, never seen in training or selection:

- prediction: MAE and Spearman rank correlation of predicted vs exact harm over the test sets;
- pair ordering at the margin (``patching.harm.ordered_pairs``: pairs of sets of two or more units of one
  boundary whose exact harms differ by at least the margin) by the scorer, by each singleton aggregator
  (sum, mean, max, min of the members' singleton harms, ``patching.harm.AGGREGATORS``) and by the surface
  baseline (``patching.relations.surface_features`` + RidgeCV fitted on train);
- the unsafe-score distributions of validation and test sets with their labels (Fig 7);
- the operating curve on test: coverage, mean direct removal, unsafe rate and mean harm against tau (Fig 8);
- per beta (its tau selected on calibration by the empirical rule, the selected K): the test gate metrics (Fig 9);
- both rules' settings with their calibration and test metrics, and why the gate abstains (``calibration``);
- ablations as rows: without retained-context features, without pair pooling (scorer re-fitted and the setting
  re-selected), without abstention (the selected scorer forced to delete its lowest-score valid set).

The reference configuration and values are in ``interp.reporting.reference`` (``DRSR_GATE``), shown
beside ours by the figures and the report. CIs are 95 % task bootstraps over the test trajectories (``interp.stats.task_resamples``; null with fewer than
3 test trajectories). Fewer than 3 trajectories cannot be split: :func:`train` raises.

Fields of ``gate.json`` (``FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``settings`` | ``{unsafe_threshold, max_unsafe_rate, delta, max_mean_harm, max_removal, k_grid, beta_grid, split_fractions, seed, n_members, margin, layers, attention_layers, unit_kinds}`` | object | harm: nats/token; removal: fraction of request tokens | the rules the gate was trained, selected and evaluated under (max_unsafe_rate: alpha; delta: the error probability of the bound) |
| ``split`` | ``{train, validation, test: {tasks, n_boundaries, n_pool, n_sets, n_unsafe}}`` | object | - | trajectories of each part (no trajectory in two parts): n_pool sets the online gate enumerates at their boundaries, n_sets of them DRSR measured, n_unsafe of those unsafe |
| ``selected`` | ``{k, beta, tau, rule, calibration: {coverage, removal, unsafe_rate, mean_harm, n_boundaries, n_deleted, n_measured}}`` | object | tau: unsafe score | the setting the rule of the scorer file selected on the cross-fitted calibration scores (tau null: abstain everywhere) and its calibration metrics |
| ``calibration`` | ``{split_rule, rule, alpha, delta, smooth, folds_asked, n_folds, folds, n_tasks, n_boundaries, n_sets, n_unsafe, needed_boundaries, missing_boundaries, abstain, labels, rules: {bound, empirical: {k, beta, tau, needed_boundaries, calibration, test}}}`` | object | alpha: unsafe rate; boundaries: count | how the setting was calibrated (``calibration_summary``): the cross-fitting rule and its folds, the calibration boundaries and measured sets, the boundaries an admissible setting needs and how many are missing, why the gate abstains (data / no_safe_setting / null), one-class labels, and both rules' settings with their calibration and test metrics |
| ``prediction`` | ``{mae, mae_ci, spearman, spearman_ci, n_sets, n_tasks}`` | object | mae: nats/token | predicted vs exact harm on the test sets |
| ``pair_ordering`` | ``[n_methods] of {method, pair_accuracy, ci, n_pairs}`` | object | accuracy: fraction | methods: scorer, sum, mean, max, min, surface; test sets of 2+ units, pairs at the margin |
| ``scores`` | ``{calibration, test: {score [n], unsafe [n], size [n]}}`` | object | score: probability | unsafe scores of the measured pool sets with their exact unsafe labels (Fig 7; calibration: out-of-fold) |
| ``operating_curve`` | ``[n_tau] of {tau, coverage, removal, unsafe_rate, mean_harm, n_deleted, n_measured}`` | object | removal: fraction | the selected K and beta on test at each tau (Fig 8) |
| ``beta_sweep`` | ``[n_beta] of {beta, tau, coverage, removal, unsafe_rate, mean_harm, n_deleted}`` | object | removal: fraction | per beta, tau selected on calibration by the empirical rule at the selected K, metrics on test (Fig 9) |
| ``gate`` | ``{coverage, removal, unsafe_rate, mean_harm, n_boundaries, n_deleted, n_measured, ci: {metric: [lo, hi] or null}}`` | object | removal: fraction; harm: nats/token | the selected gate on test, deciding over the online pool: unsafe_rate and mean_harm over the n_measured of its n_deleted deletions whose set DRSR measured |
| ``ablations`` | ``[n_rows] of {name, k, beta, tau, mae, spearman, pair_accuracy, coverage, removal, unsafe_rate, mean_harm}`` | object | as above | full, no_retained_context, no_pair_pooling, no_abstention |
| ``notes`` | ``[n_notes]`` | str | - | what limits this run's evidence (tiny splits, abstention for lack of data or of a safe setting, one-class labels) |
| ``scorer`` | ``{file, kind, train_seconds, n_features}`` | object | seconds | the scorer file evaluated (kind: ridge or set-mlp; n_features: per set for ridge, per candidate for set-mlp) |
| ``model`` | ``{...}`` | object or null | - | the sensor's describe() from drsr.json |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from interp.record import RECORD_FIELDS
from interp.schema import Field, schema_dict
from interp.stats import percentile_ci, task_resamples
from patching.gate import (BETA_GRID, GATE_KINDS, K_GRID, MAX_MEAN_HARM, RULES,
                           SPLIT, Calibration, FeatureSpec, GateModel, GateSetting, Scored, Supervision, decisions,
                           gate_metrics, make_scorer, needed_boundaries, predict_rows, restrict, score_split, select,
                           select_empirical, split_tasks, supervision)
from patching.granularity import UNSAFE
from patching.harm import AGGREGATORS, MARGIN, ordered_pairs
from patching.relations import ALPHAS, accuracy_ci, surface_features

FIELDS = (
    Field('schema', '{...}', 'object', '-', 'this table: {field: {shape, dtype, units, doc}}'),
    Field('settings', '{unsafe_threshold, max_unsafe_rate, delta, max_mean_harm, max_removal, k_grid, beta_grid, split_fractions, seed, n_members, margin, layers, attention_layers, unit_kinds}', 'object', 'harm: nats/token; removal: fraction of request tokens', 'the rules the gate was trained, selected and evaluated under (max_unsafe_rate: alpha; delta: the error probability of the bound)'),
    Field('split', '{train, validation, test: {tasks, n_boundaries, n_pool, n_sets, n_unsafe}}', 'object', '-', 'trajectories of each part (no trajectory in two parts): n_pool sets the online gate enumerates at their boundaries, n_sets of them DRSR measured, n_unsafe of those unsafe'),
    Field('selected', '{k, beta, tau, rule, calibration: {coverage, removal, unsafe_rate, mean_harm, n_boundaries, n_deleted, n_measured}}', 'object', 'tau: unsafe score', 'the setting the rule of the scorer file selected on the cross-fitted calibration scores (tau null: abstain everywhere) and its calibration metrics'),
    Field('calibration', '{split_rule, rule, alpha, delta, smooth, folds_asked, n_folds, folds, n_tasks, n_boundaries, n_sets, n_unsafe, needed_boundaries, missing_boundaries, abstain, labels, rules: {bound, empirical: {k, beta, tau, needed_boundaries, calibration, test}}}', 'object', 'alpha: unsafe rate; boundaries: count', "how the setting was calibrated (``calibration_summary``): the cross-fitting rule and its folds, the calibration boundaries and measured sets, the boundaries an admissible setting needs and how many are missing, why the gate abstains (data / no_safe_setting / null), one-class labels, and both rules' settings with their calibration and test metrics"),
    Field('prediction', '{mae, mae_ci, spearman, spearman_ci, n_sets, n_tasks}', 'object', 'mae: nats/token', 'predicted vs exact harm on the test sets'),
    Field('pair_ordering', '[n_methods] of {method, pair_accuracy, ci, n_pairs}', 'object', 'accuracy: fraction', 'methods: scorer, sum, mean, max, min, surface; test sets of 2+ units, pairs at the margin'),
    Field('scores', '{calibration, test: {score [n], unsafe [n], size [n]}}', 'object', 'score: probability', 'unsafe scores of the measured pool sets with their exact unsafe labels (Fig 7; calibration: out-of-fold)'),
    Field('operating_curve', '[n_tau] of {tau, coverage, removal, unsafe_rate, mean_harm, n_deleted, n_measured}', 'object', 'removal: fraction', 'the selected K and beta on test at each tau (Fig 8)'),
    Field('beta_sweep', '[n_beta] of {beta, tau, coverage, removal, unsafe_rate, mean_harm, n_deleted}', 'object', 'removal: fraction', 'per beta, tau selected on calibration by the empirical rule at the selected K, metrics on test (Fig 9)'),
    Field('gate', '{coverage, removal, unsafe_rate, mean_harm, n_boundaries, n_deleted, n_measured, ci: {metric: [lo, hi] or null}}', 'object', 'removal: fraction; harm: nats/token', 'the selected gate on test, deciding over the online pool: unsafe_rate and mean_harm over the n_measured of its n_deleted deletions whose set DRSR measured'),
    Field('ablations', '[n_rows] of {name, k, beta, tau, mae, spearman, pair_accuracy, coverage, removal, unsafe_rate, mean_harm}', 'object', 'as above', 'full, no_retained_context, no_pair_pooling, no_abstention'),
    Field('notes', '[n_notes]', 'str', '-', "what limits this run's evidence (tiny splits, abstention for lack of data or of a safe setting, one-class labels)"),
    Field('scorer', '{file, kind, train_seconds, n_features}', 'object', 'seconds', 'the scorer file evaluated (kind: ridge or set-mlp; n_features: per set for ridge, per candidate for set-mlp)'),
    Field('model', '{...}', 'object or null', '-', "the sensor's describe() from drsr.json"),
    *RECORD_FIELDS,
)
GATE_METRICS = ("coverage", "removal", "unsafe_rate", "mean_harm")
OPERATING_POINTS = 41


def _spec(sup: Supervision, retained: bool = True, pairs: bool = True) -> FeatureSpec:
    if not sup.views:
        raise ValueError("no boundary with captured candidate sets to train the gate on")
    return FeatureSpec.for_view(sup.views[0], retained, pairs)


SPLIT_RULE = ("cross-fitted: sklearn GroupKFold by trajectory over the train and validation trajectories (each "
              "trajectory's sets scored by the fold model fitted without it); the setting selected on the pooled "
              "out-of-fold scores; the deployed scorer refitted on all of them; the test trajectories held out")


def calibration_tasks(split: dict[str, list[str]]) -> list[str]:
    """The trajectories the setting is calibrated on: train and validation (the test part stays held out)."""
    return sorted({*split["train"], *split["validation"]})


def cross_fit(sup: Supervision, tasks: Sequence[str], spec: FeatureSpec, kind: str, n_members: int | None,
              seed: int, folds: int) -> tuple[Scored, list[list[str]]]:
    """Out-of-fold gate scores of the pool sets of ``tasks``: ``min(folds, trajectories)`` task-level folds
    (sklearn ``GroupKFold`` over the measured sets, grouped by trajectory), each scored by a scorer fitted on the
    other folds' measured sets; and the folds' trajectories. Trajectories without a measured set are left out."""
    from sklearn.model_selection import GroupKFold

    rows = sup.rows_of(tasks, measured=True)
    groups = sup.task[rows]
    n_groups = len(set(groups))
    if n_groups < 2:
        raise ValueError(f"cross-fitting needs measured sets in at least 2 trajectories; {n_groups} of the "
                         f"{len(set(tasks))} calibration trajectories have one")
    parts, held_tasks = [], []
    for fit_i, held_i in GroupKFold(n_splits=min(folds, n_groups)).split(rows, groups=groups):
        held = sorted(set(groups[held_i]))
        scorer = make_scorer(kind, n_members, sup.threshold, seed).fit_rows(sup, rows[fit_i], spec)
        parts.append(score_split(sup, held, scorer, spec))
        held_tasks.append(held)
    all_rows = np.concatenate([p.rows for p in parts])
    order = np.argsort(all_rows, kind="stable")
    out_rows = all_rows[order]
    return Scored(out_rows, np.concatenate([p.risk for p in parts])[order],
                  np.concatenate([p.uncertainty for p in parts])[order], np.unique(sup.boundary[out_rows]),
                  sup.boundary[out_rows]), sorted(held_tasks)


def fit_select(sup: Supervision, split: dict[str, list[str]], spec: FeatureSpec, n_members: int | None,
               seed: int, kind: str, cal: Calibration, abstain: bool = True
               ) -> tuple[Any, GateSetting, dict[str, Any], Scored, list[list[str]]]:
    """The scorer (``kind``: ``patching.gate.SCORERS``) fitted on the measured sets of the calibration
    trajectories (train and validation), the setting ``cal.rule`` selects on their cross-fitted scores
    (:func:`cross_fit`) with its calibration metrics, the out-of-fold scores and the folds."""
    tasks = calibration_tasks(split)
    rows = sup.rows_of(tasks, measured=True)
    if not len(rows):
        raise ValueError(f"no measured pool set in the {len(tasks)} calibration trajectories (train and validation)")
    oof, folds = cross_fit(sup, tasks, spec, kind, n_members, seed, cal.folds)
    scorer = make_scorer(kind, n_members, sup.threshold, seed).fit_rows(sup, rows, spec)
    setting, metrics = select(sup, oof, cal, abstain=abstain)
    return scorer, setting, metrics, oof, folds


def calibration_summary(sup: Supervision, oof: Scored, folds: list[list[str]], cal: Calibration,
                        setting: GateSetting) -> dict[str, Any]:
    """What the setting was calibrated on and why the gate abstains when it does: the split rule, the folds, the
    calibration boundaries and sets, both rules' settings, the boundaries an admissible setting needs
    (:func:`patching.gate.needed_boundaries`) and how many are missing; ``abstain`` "data" when there are fewer
    calibration boundaries than that, "no_safe_setting" when there are enough but none was admissible, null
    when the gate deletes; ``labels`` names one-class harms (no unsafe or no safe measured set)."""
    known = oof.rows[sup.measured[oof.rows]]
    n_bound = int(len(np.unique(sup.boundary[known])))
    need = needed_boundaries(cal)
    n_unsafe = int(sup.unsafe[known].sum())
    rules = {}
    for rule in RULES:
        s, m = select(sup, oof, replace(cal, rule=rule))
        rules[rule] = {"k": s.k, "beta": s.beta, "tau": s.tau, "needed_boundaries": needed_boundaries(
            replace(cal, rule=rule)), "calibration": m}
    one_class = None
    if len(known) and n_unsafe in (0, len(known)):
        one_class = (f"one class: {len(known)} measured calibration sets, {n_unsafe} unsafe (harm above "
                     f"{sup.threshold} nats/token): the scorer cannot learn to separate them")
    return {"split_rule": SPLIT_RULE, "rule": cal.rule, "alpha": cal.alpha, "delta": cal.delta,
            "smooth": cal.smooth, "folds_asked": cal.folds, "n_folds": len(folds), "folds": folds, "n_tasks": int(len(set(sup.task[known]))),
            "n_boundaries": n_bound, "n_sets": int(len(known)), "n_unsafe": n_unsafe,
            "needed_boundaries": need, "missing_boundaries": max(0, need - n_bound),
            "abstain": None if setting.tau is not None else ("data" if n_bound < need else "no_safe_setting"),
            "labels": one_class, "rules": rules}


def train(records: Sequence[dict[str, Any]], model: dict[str, Any] | None = None, proj_dim: int | None = None,
          seed: int = 0, n_members: int | None = None, unsafe: float = UNSAFE,
          fractions: Sequence[float] = SPLIT, scorer: str = "ridge", calibration: Calibration | None = None
          ) -> tuple[GateModel, dict[str, Any]]:
    """A trained gate (the scorer file's content) from DRSR records, and what training measured: the scorer is
    fitted on the measured sets of the online pool (``patching.gate.supervision``) of the calibration
    trajectories and the setting selected on their cross-fitted scores (``calibration``: the rule, alpha, delta,
    folds; default ``GateConfig``'s). One-class harms are trained on with a warning naming the count, recorded
    in the scorer file (``calibration.labels``)."""
    from patching.config import GateConfig

    cal = calibration or GateConfig().calibration()
    t0 = time.perf_counter()
    sup = supervision(records, unsafe)
    split = split_tasks(list(sup.task), seed, fractions)
    spec = _spec(sup)
    fitted, setting, metrics, oof, folds = fit_select(sup, split, spec, n_members, seed, scorer, cal)
    summary = calibration_summary(sup, oof, folds, cal, setting)
    if summary["labels"]:
        warnings.warn(f"gate train: {summary['labels']}", stacklevel=2)
    kinds = tuple(k for k in GATE_KINDS if any(c["unit"][0] == k for v in sup.views for c in v["candidates"]))
    gate = GateModel(spec, fitted, setting, split,
                     {"spec": (model or {}).get("spec"), "d_model": (model or {}).get("d_model"),
                      "proj_dim": proj_dim}, kinds or GATE_KINDS, summary)
    return gate, {"calibration": metrics, "train_seconds": time.perf_counter() - t0,
                  "n_rows": int(sup.measured.sum()), "n_pool": int(len(sup.harm)), "summary": summary}


def _boot(per_task: dict[str, Any], stat: Any, n_boot: int, seed: int) -> list[float] | None:
    """Task-bootstrap 95% CI of ``stat(list of task items)`` (None with < 3 tasks or undefined draws)."""
    tasks = sorted(per_task)
    if len(tasks) < 3 or n_boot == 0:
        return None
    draws = []
    for r in task_resamples(np.arange(len(tasks)), n_boot, np.random.default_rng(seed)):
        v = stat([per_task[tasks[i]] for i in r])
        if v is not None and np.isfinite(v):
            draws.append(v)
    return [float(x) for x in percentile_ci(draws)] if draws else None


def _spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    from scipy.stats import spearmanr

    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return float(spearmanr(a, b)[0])


def _pairs(sup: Supervision, rows: np.ndarray, pred: np.ndarray, margin: float) -> dict[str, tuple[float, int]]:
    """Per task (score, counted) of ``pred`` ordering each boundary's sets of 2+ units (rows: test rows)."""
    out: dict[str, list[float]] = {}
    multi = sup.size[rows] >= 2
    for bi in np.unique(sup.boundary[rows]):
        mine = np.flatnonzero((sup.boundary[rows] == bi) & multi)
        score, counted = ordered_pairs(sup.harm[rows[mine]].tolist(), pred[mine].tolist(), margin)
        t = out.setdefault(sup.views[bi]["task_id"], [0.0, 0])
        t[0] += score
        t[1] += counted
    return {k: (v[0], int(v[1])) for k, v in out.items()}


def _aggregate(sup: Supervision, rows: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The aggregator's predictions for rows whose members all have a singleton harm (and those rows)."""
    agg = AGGREGATORS[name]
    keep = np.array([all(m in sup.singles[sup.boundary[r]] for m in sup.members[r]) for r in rows], bool)
    kept = rows[keep] if len(rows) else rows
    return kept, np.array([agg([sup.singles[sup.boundary[r]][m] for m in sup.members[r]]) for r in kept], float)


def _surface(sup: Supervision, rows: np.ndarray) -> np.ndarray:
    out = []
    for r in rows:
        view = sup.views[sup.boundary[r]]
        cs = [view["candidates"][m] for m in sup.members[r]]
        out.append(surface_features([tuple(c["unit"]) for c in cs], view["after_step"], [c["n_tokens"] for c in cs]))
    return np.array(out, float)


def _metrics_ci(sup: Supervision, chosen: dict[int, int | None], n_boot: int, seed: int) -> dict[str, Any]:
    m = gate_metrics(sup, chosen)
    by_task: dict[str, dict[int, int | None]] = {}
    for bi, r in chosen.items():
        by_task.setdefault(sup.views[bi]["task_id"], {})[bi] = r

    def stat(name: str) -> Callable[[list[dict[int, int | None]]], float | None]:
        def f(items: list[dict[int, int | None]]) -> float | None:
            merged: dict[Any, int | None] = {}
            for i, d in enumerate(items):  # a task drawn twice counts twice
                merged.update({(i, bi): r for bi, r in d.items()})
            picked = [r for r in merged.values() if r is not None]
            if name == "coverage":
                return len(picked) / len(merged)
            if name == "removal":
                return float(np.mean([0.0 if r is None else sup.saving[r] / sup.views[k[1]]["prompt_tokens"]
                                      for k, r in merged.items()]))
            picked = [r for r in picked if sup.measured[r]]
            if not picked:
                return None
            return float(np.mean((sup.unsafe if name == "unsafe_rate" else sup.harm)[picked]))
        return f

    m["ci"] = {name: _boot(by_task, stat(name), n_boot, seed) for name in GATE_METRICS}
    return m


def _row(setting: GateSetting, metrics: dict[str, Any]) -> dict[str, Any]:
    return {"k": setting.k, "beta": setting.beta, "tau": setting.tau, **{k: metrics[k] for k in GATE_METRICS}}


def _prediction(sup: Supervision, rows: np.ndarray, pred: np.ndarray, margin: float) -> dict[str, Any]:
    per = _pairs(sup, rows, pred, margin)
    acc, _, _ = accuracy_ci(per, 0)
    return {"mae": float(np.mean(np.abs(pred - sup.harm[rows]))) if len(rows) else None,
            "spearman": _spearman(pred, sup.harm[rows]), "pair_accuracy": acc}


def evaluate(records: Sequence[dict[str, Any]], gate: GateModel, model: dict[str, Any] | None = None,
             *, n_boot: int, margin: float = MARGIN, seed: int = 0, scorer_file: str | None = None,
             train_seconds: float | None = None) -> dict[str, Any]:
    """The ``gate.json`` document (``FIELDS``): the gate of a scorer file on its held-out test trajectories."""
    sup = supervision(records, gate.scorer.unsafe)
    split = gate.split
    overlap = set(split["train"]) & set(split["test"]) | set(split["train"]) & set(split["validation"]) | \
        set(split["validation"]) & set(split["test"])
    if overlap:
        raise ValueError(f"the scorer file's split has trajectories in two parts: {sorted(overlap)}")
    unknown = sorted(set(split["test"]) - set(sup.task))
    if unknown:
        raise ValueError(f"the scorer's test trajectories {unknown} are not in these DRSR records")
    notes: list[str] = []
    spec, scorer, setting = gate.spec, gate.scorer, gate.setting
    test_rows = sup.rows_of(split["test"], measured=True)
    pred = predict_rows(scorer, sup, test_rows, spec) if len(test_rows) else np.zeros(0)
    per_task_rows: dict[str, np.ndarray] = {t: np.flatnonzero(sup.task[test_rows] == t) for t in split["test"]}

    def mae(items: list[np.ndarray]) -> float | None:
        idx = np.concatenate(items) if items else np.zeros(0, int)
        return float(np.mean(np.abs(pred[idx] - sup.harm[test_rows[idx]]))) if len(idx) else None

    def rho(items: list[np.ndarray]) -> float | None:
        idx = np.concatenate(items) if items else np.zeros(0, int)
        return _spearman(pred[idx], sup.harm[test_rows[idx]])

    prediction = {"mae": mae(list(per_task_rows.values())), "mae_ci": _boot(per_task_rows, mae, n_boot, seed),
                  "spearman": rho(list(per_task_rows.values())), "spearman_ci": _boot(per_task_rows, rho, n_boot, seed),
                  "n_sets": int(len(test_rows)), "n_tasks": len(split["test"])}
    # pair ordering: the scorer, the singleton aggregators, the surface baseline (fitted on train)
    ordering = []
    acc, ci, n = accuracy_ci(_pairs(sup, test_rows, pred, margin), n_boot, seed)
    ordering.append({"method": "scorer", "pair_accuracy": acc, "ci": ci, "n_pairs": n})
    for name in AGGREGATORS:
        rows, agg = _aggregate(sup, test_rows, name)
        acc, ci, n = accuracy_ci(_pairs(sup, rows, agg, margin), n_boot, seed) if len(rows) else (None, None, 0)
        ordering.append({"method": name, "pair_accuracy": acc, "ci": ci, "n_pairs": n})
    train_rows = sup.rows_of(split["train"], measured=True)
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    surface = make_pipeline(StandardScaler(), RidgeCV(alphas=ALPHAS)).fit(_surface(sup, train_rows),
                                                                        sup.harm[train_rows])
    spred = surface.predict(_surface(sup, test_rows)) if len(test_rows) else np.zeros(0)
    acc, ci, n = accuracy_ci(_pairs(sup, test_rows, spred, margin), n_boot, seed)
    ordering.append({"method": "surface", "pair_accuracy": acc, "ci": ci, "n_pairs": n})
    # calibration (the cross-fitted scores the setting was selected on), the gate on test, both rules
    cal = gate.rule()
    val, folds = cross_fit(sup, calibration_tasks(split), spec, scorer.kind, scorer.n_members, scorer.seed, cal.folds)
    summary = calibration_summary(sup, val, folds, cal, setting)
    test = score_split(sup, split["test"], scorer, spec)
    val_metrics = gate_metrics(sup, decisions(sup, restrict(sup, val, setting.k), setting))
    val_known, test_known = (s_.rows[sup.measured[s_.rows]] for s_ in (val, test))
    test_k = restrict(sup, test, setting.k)
    chosen = decisions(sup, test_k, setting)
    gate_doc = _metrics_ci(sup, chosen, n_boot, seed)
    for rule, row in summary["rules"].items():
        rs = GateSetting(k=row["k"], beta=row["beta"], tau=row["tau"])
        row["test"] = gate_metrics(sup, decisions(sup, restrict(sup, test, rs.k), rs))
    pooled = np.concatenate([val.risk + setting.beta * val.uncertainty, test.risk + setting.beta * test.uncertainty])
    taus = sorted({float(x) for x in np.quantile(pooled, np.linspace(0, 1, OPERATING_POINTS))} | (
        {setting.tau} if setting.tau is not None else set())) if len(pooled) else []
    curve = [{"tau": t, **{k: v for k, v in gate_metrics(sup, decisions(sup, test_k, replace(setting, tau=t))).items()
                           if k != "n_boundaries"}} for t in [float(np.nextafter(x, np.inf)) for x in taus]]
    sweep = []
    for beta in BETA_GRID:
        s, _ = select_empirical(sup, val, cal, [setting.k], [beta])
        m = gate_metrics(sup, decisions(sup, test_k, s))
        sweep.append({"beta": beta, "tau": s.tau, **{k: m[k] for k in (*GATE_METRICS, "n_deleted")}})
    # ablations
    full_pred = _prediction(sup, test_rows, pred, margin)
    ablations = [{"name": "full", **_row(setting, gate_doc), **full_pred}]
    for name, aspec in (("no_retained_context", replace(spec, retained=False)),
                        ("no_pair_pooling", replace(spec, pairs=False))):
        a_scorer, a_setting, _, _, _ = fit_select(sup, split, aspec, scorer.n_members, scorer.seed, scorer.kind, cal)
        a_pred = predict_rows(a_scorer, sup, test_rows, aspec) if len(test_rows) else np.zeros(0)
        a_test = restrict(sup, score_split(sup, split["test"], a_scorer, aspec), a_setting.k)
        ablations.append({"name": name, **_row(a_setting, gate_metrics(sup, decisions(sup, a_test, a_setting))),
                          **_prediction(sup, test_rows, a_pred, margin)})
    forced = replace(setting, abstain=False)
    ablations.append({"name": "no_abstention",
                      **_row(forced, gate_metrics(sup, decisions(sup, restrict(sup, test, forced.k), forced))),
                      **full_pred})
    # what limits the evidence
    if len(split["test"]) < 3:
        notes.append(f"{len(split['test'])} test trajectories: no bootstrap CIs (they need 3)")
    if summary["abstain"] == "data":
        notes.append(f"the gate abstains for lack of calibration data: an admissible setting under the "
                     f"{cal.rule} rule needs at least {summary['needed_boundaries']} calibration boundaries with a "
                     f"measured set, all deletions safe; there are {summary['n_boundaries']} "
                     f"({summary['missing_boundaries']} missing)")
    elif summary["abstain"] == "no_safe_setting":
        notes.append(f"no setting made an admissible deletion on the {summary['n_boundaries']} calibration "
                     f"boundaries (enough for one: {summary['needed_boundaries']}): the gate abstains everywhere")
    if summary["labels"]:
        notes.append(summary["labels"])
    if not sup.unsafe[test_rows].any():
        notes.append("no unsafe set among the measured test sets: the unsafe rate cannot separate gates here")
    if gate_doc["n_deleted"] and gate_doc["n_measured"] < gate_doc["n_deleted"]:
        notes.append(f"{gate_doc['n_measured']} of the gate's {gate_doc['n_deleted']} test deletions are sets DRSR "
                     "measured: unsafe rate and mean harm are over those only (the others are unmeasured, not guessed)")
    return {
        "schema": schema_dict(FIELDS),
        "settings": {"unsafe_threshold": sup.threshold, "max_unsafe_rate": cal.alpha, "delta": cal.delta,
                     "max_mean_harm": MAX_MEAN_HARM, "max_removal": setting.max_removal, "k_grid": list(K_GRID),
                     "beta_grid": list(BETA_GRID), "split_fractions": list(SPLIT), "seed": scorer.seed,
                     "n_members": scorer.n_members, "margin": margin, "layers": list(spec.layers),
                     "attention_layers": list(spec.attention_layers), "unit_kinds": list(gate.unit_kinds)},
        "split": {part: {"tasks": list(tasks), "n_boundaries": int(len(np.unique(sup.boundary[sup.rows_of(tasks)]))),
                         "n_pool": int(len(sup.rows_of(tasks))), "n_sets": int(len(sup.rows_of(tasks, True))),
                         "n_unsafe": int(sup.unsafe[sup.rows_of(tasks)].sum())}
                  for part, tasks in split.items()},
        "selected": {"k": setting.k, "beta": setting.beta, "tau": setting.tau, "rule": cal.rule,
                     "calibration": val_metrics},
        "calibration": summary,
        "prediction": prediction,
        "pair_ordering": ordering,
        "scores": {name: {"score": (s.risk + setting.beta * s.uncertainty)[sup.measured[s.rows]].tolist(),
                          "unsafe": sup.unsafe[known].tolist(), "size": sup.size[known].tolist()}
                   for name, s, known in (("calibration", val, val_known), ("test", test, test_known))},
        "operating_curve": curve,
        "beta_sweep": sweep,
        "gate": gate_doc,
        "ablations": ablations,
        "notes": notes,
        "scorer": {"file": scorer_file, "kind": scorer.kind, "train_seconds": train_seconds,
                   "n_features": scorer.n_features_in_},
        "model": model,
    }
