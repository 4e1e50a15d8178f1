"""DRSR's learned set-risk gate: predict the harm of deleting a *set* of history units from online-visible
information, and delete the largest set predicted safe, abstaining when none is.

**One pool, offline and online.** At a boundary b the gate's candidates are the units of the kinds
``GATE_KINDS`` (reasoning blocks, observations, tool exchanges: a call is deleted with its result,
``interp.data.deletions``) with a span to delete, none of the latest step (protected by default):
:func:`pool_members`. Its valid sets (:func:`grow_sets`) hold at most ``K`` pairwise non-overlapping members,
remove no step whole (``interp.data.deletions.empties_step`` on the view's step shapes) and at most
``MAX_REMOVAL`` = 20 % of the request's tokens (the saving: the members' span tokens). Supervision, selection,
``gate.json`` and the online :class:`SetGate` all use this pool, the one feature function :func:`set_matrix` and
the one choice :func:`choose`; the view they read comes from the same forward of the prompt at b
(``patching.relations.prompt_capture``), so the offline feature vector of a set is the online one bit for bit.

**Supervision** (:func:`supervision`): from DRSR boundary records (``patching.drsr.boundary_record``: the
per-boundary parts ``interp drsr`` writes under ``<out>/parts/drsr.*/``), one row per (boundary, pool set up to
``max(K_GRID)``): the exact harm (``patching.harm``) where DRSR's stage measured the set, NaN (*unmeasured*)
otherwise; never a guess. The unsafe label is ``harm > UNSAFE`` (``patching.granularity.UNSAFE`` = 0.020
nats/token, the toolkit's assumption; one home). Scorers are fitted on the measured rows; the gate may choose an
unmeasured set (as it would online), which then counts as a deletion without a harm. :func:`split_tasks` splits
trajectories (never rows) into train / validation / test (seeded; fractions ``SPLIT`` = 80:10:10 as DRSR, at
least one trajectory in each part).

**Features** (:func:`set_matrix`) read only :func:`online_view` of a record: what the sensor sees at the
boundary before the next output exists (the candidates' pooled representations, the boundary state, the boundary
token's attention rows, the units, span sizes, the request size and the step shapes). The recorded next output,
its NLL and the harms are labels only: ``online_view`` drops them, and a test changes the next step's text and
finds the features unchanged while the harms change. Per candidate ``u`` (:func:`candidate_features`; at
``FeatureSpec.layers``, the full-attention layers, at most ``MAX_LAYERS`` of them evenly spaced): ``r_u``,
``r_u * s``, ``abs(r_u - s)``, ``cos(r_u, s)`` (``patching.relations``: the relation to the boundary state
``s``), its unit kind (one-hot), recency ``b - step``, position ``step / b``, ``log1p`` span tokens, and per
full-attention layer the boundary token's mean and max head attention mass on the span and the mean mass per
span token. Per set: the members' features pooled (mean and max; *deleted units*), the mean features of the pool
members the deletion leaves (*retained context*; zero when none), the mean over member pairs of ``r_i * r_j`` and
``cos(r_i, r_j)`` per layer, same step, step distance and same kind (*pair pooling*; zero for a singleton), and
the set's size, span tokens and span tokens / request tokens.

**Scorer** (:class:`SetRiskScorer`, a scikit-learn regressor; ``kind`` "ridge"): ``n_members`` bootstrap
replicates of ``StandardScaler`` + ``RidgeCV`` (alphas ``patching.relations.ALPHAS``) fitted to the exact harm;
the prediction is their mean. Each member's unsafe probability is ``P(harm > unsafe)`` under a normal with the
member's prediction as mean and the out-of-bag residual standard deviation as spread; the unsafe score is the
mean over members and the uncertainty their standard deviation. The second scorer, DRSR's Table 7 set model
(``patching.gate_mlp.SetMLPScorer``, ``kind`` "set-mlp"), reads the same candidate features and pool; both
answer ``fit_rows``, ``harm_sets`` and ``risk_sets`` (:func:`make_scorer`). Stored as JSON (``to_json``: arrays
as lists; no pickle), with the feature spec, the gate's setting and the split: the *scorer file*
(``gate_scorer.json``, ``SCORER_FORMAT``).

**Gate** (:func:`choose`): among the pool's sets of at most ``K`` units, those with ``score + beta *
uncertainty < tau`` are feasible; the gate deletes the feasible set with the largest saving (ties: the lower
score, then the first in canonical order) and abstains when none is feasible. Online (:class:`SetGate`,
``gate.decide(traj, b)``: one forward of the prompt at b, then :func:`decide_view`) the sets are scored largest
saving first and scoring stops once no unscored set could win: the exhaustive choice at agent speed. The
``drsr_gate`` history condition (``interp.data.conditions``) runs it after every step with memory.

Fields of the scorer file (``SCORER_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``format`` | ``[]`` | str | - | SCORER_FORMAT: what reads this file |
| ``spec`` | ``{layers, attention_layers, retained, pairs}`` | object | 0-based layers | the features: representation layers, attention rows, retained-context and pair blocks on or off |
| ``kind`` | ``[]`` | str | - | the scorer: ridge (SetRiskScorer) or set-mlp (patching.gate_mlp.SetMLPScorer); absent: ridge |
| ``scorer`` | ``{params, n_features_in, resid_sd, ...}`` | object | harm: nats/token | the fitted scorer. ridge: per member [n_members, n_features] scaler mean and scale, ridge coef, [n_members] intercept; set-mlp: members [{mu, sd [n_features], w1 [64, n_features], b1, w2 [64, 259], b2, w3 [1, 64], b3}]; resid_sd the out-of-bag residual spread |
| ``setting`` | ``{k, beta, tau, max_removal, protect_latest, abstain}`` | object | tau: unsafe score; max_removal: fraction of request tokens | the decision rule selected on the cross-fitted calibration scores (tau null: abstain always) |
| ``split`` | ``{train, validation, test}`` | object | - | the task_ids of each part |
| ``model`` | ``{spec, d_model, proj_dim}`` | object | dims | the sensor the representations came from and their projection (proj_dim null: not projected) |
| ``unit_kinds`` | ``[n_kinds]`` | str | - | the unit kinds the gate may delete |
| ``calibration`` | ``{split_rule, rule, alpha, delta, smooth, folds_asked, n_folds, folds, n_tasks, n_boundaries, n_sets, n_unsafe, needed_boundaries, missing_boundaries, abstain, labels, rules}`` | object | alpha: unsafe rate; boundaries: count | how the setting was calibrated (patching.gate_eval.calibration_summary): the cross-fitting rule and folds, the calibration boundaries and measured sets, the boundaries an admissible setting needs and how many are missing, why the gate abstains (data / no_safe_setting / null), one-class labels named, and both rules' settings (bound, empirical); absent in older files |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |

**Selection** (:func:`select`) on calibration scores: the train and validation trajectories scored cross-fitted
(``patching.gate_eval.cross_fit``: each trajectory by a model that never saw it). tau runs over ``TAU_GRID``, fixed
exact decimals (the same thresholds on every machine; scores compared in float64), and :func:`sweep` counts every
tau's deletions at once. Two rules (:class:`Calibration`, defaults in ``patching.config.GateConfig``):

- ``bound`` (default, :func:`select_bound`): Learn then Test. Per K (beta 0) the taus are tested in ascending
  fixed sequence by the binomial p-value ``P(Bin(n, alpha) <= n_bad)`` of their ``n`` deletions (``n_bad``: unsafe
  or unmeasured) at level ``delta / len(K_GRID)``, skipping taus with fewer deletions than
  :func:`needed_boundaries` (a function of the scores only) and stopping at the first not rejected; every tau
  passed has an unsafe rate of deletions <= alpha with probability >= 1 - delta, assuming exchangeable
  boundaries. Among them (mean harm <= ``MAX_MEAN_HARM``) the largest mean direct removal wins.
- ``empirical`` (:func:`select_empirical`, DRSR's rule): K in ``K_GRID``, beta in ``BETA_GRID``; a setting is
  :func:`admissible` when its measured deletions' unsafe rate is <= alpha and their mean exact harm <=
  ``MAX_MEAN_HARM`` (a setting whose deletions were never measured is not). The rate is add-one smoothed,
  ``(n_unsafe + 1) / (n_measured + 2)``, unless ``smooth`` is off (DRSR states the plain rate: a departure,
  ``interp.reporting.reference.DEPARTURES["smoothing"]``): the search maximises removal, so with the plain rate
  it stops where a lucky run of safe deletions meets the limit.

The admissible setting with the largest mean direct removal wins (ties: smaller K, beta, tau); none: abstain
everywhere. ``patching.gate_eval.calibration_summary`` records why (too few calibration boundaries for any
admissible setting, or none safe) and how many boundaries are missing. Evaluation: ``patching.gate_eval``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from interp.data.deletions import (DRSR_UNIT_KINDS, UNIT_KINDS, Unit, delete_units, empties_step, history_units,
                                   step_shapes, unit_is_empty, units_overlap)
from interp.data.render import render
from interp.data.trajectory import Trajectory
from interp.io import atomic_write_json, read_json
from interp.record import RECORD_FIELDS
from interp.schema import Field, schema_dict
from patching.config import GATE_RULES, GATE_SCORERS, N_MEMBERS, GateConfig
from patching.granularity import UNSAFE
from patching.relations import ALPHAS, projection, prompt_capture

if TYPE_CHECKING:
    from patching.gate_mlp import SetMLPScorer

GATE_KINDS = DRSR_UNIT_KINDS
SPLIT = (0.8, 0.1, 0.1)  # train, validation, test fractions of trajectories (DRSR's 80:10:10)
K_GRID = (2, 3)
BETA_GRID = (0.0, 0.25, 0.5, 1.0, 2.0)
MAX_UNSAFE_RATE = GateConfig.alpha  # the default unsafe-rate limit (alpha)
MAX_MEAN_HARM = 0.020  # nats/token
MAX_REMOVAL = 0.20  # fraction of the request's tokens
MAX_LAYERS = 4
MAX_SETS = 20_000  # the online gate's candidate cap (decide_view): sets grown at most
SCORE_CHUNK = 512  # sets scored per vectorised batch (bounds memory; the pruned gate stops between batches)
MEMO = 4096  # online decisions a SetGate remembers (oldest dropped first)
# thresholds searched (ascending, fixed before any score is seen; exact decimals, the same bits on every machine)
TAU_GRID = tuple(sorted({i / 10 ** j for j in (6, 5, 4) for i in range(1, 10)} | {i / 1000 for i in range(1, 2001)}))
RULES = GATE_RULES
SCORER_FORMAT = "interp.gate_scorer/1"
SCORER_FIELDS = (
    Field('schema', '{...}', 'object', '-', 'this table: {field: {shape, dtype, units, doc}}'),
    Field('format', '[]', 'str', '-', 'SCORER_FORMAT: what reads this file'),
    Field('spec', '{layers, attention_layers, retained, pairs}', 'object', '0-based layers', 'the features: representation layers, attention rows, retained-context and pair blocks on or off'),
    Field('kind', '[]', 'str', '-', 'the scorer: ridge (SetRiskScorer) or set-mlp (patching.gate_mlp.SetMLPScorer); absent: ridge'),
    Field('scorer', '{params, n_features_in, resid_sd, ...}', 'object', 'harm: nats/token', 'the fitted scorer. ridge: per member [n_members, n_features] scaler mean and scale, ridge coef, [n_members] intercept; set-mlp: members [{mu, sd [n_features], w1 [64, n_features], b1, w2 [64, 259], b2, w3 [1, 64], b3}]; resid_sd the out-of-bag residual spread'),
    Field('setting', '{k, beta, tau, max_removal, protect_latest, abstain}', 'object', 'tau: unsafe score; max_removal: fraction of request tokens', 'the decision rule selected on the cross-fitted calibration scores (tau null: abstain always)'),
    Field('split', '{train, validation, test}', 'object', '-', 'the task_ids of each part'),
    Field('model', '{spec, d_model, proj_dim}', 'object', 'dims', 'the sensor the representations came from and their projection (proj_dim null: not projected)'),
    Field('unit_kinds', '[n_kinds]', 'str', '-', 'the unit kinds the gate may delete'),
    Field('calibration', '{split_rule, rule, alpha, delta, smooth, folds_asked, n_folds, folds, n_tasks, n_boundaries, n_sets, n_unsafe, needed_boundaries, missing_boundaries, abstain, labels, rules}', 'object', 'alpha: unsafe rate; boundaries: count', "how the setting was calibrated (patching.gate_eval.calibration_summary): the cross-fitting rule and folds, the calibration boundaries and measured sets, the boundaries an admissible setting needs and how many are missing, why the gate abstains (data / no_safe_setting / null), one-class labels named, and both rules' settings (bound, empirical); absent in older files"),
    *RECORD_FIELDS,
)
_ONLINE = ("task_id", "after_step", "layers", "attention_layers", "prompt_tokens", "state", "candidates", "shapes")


# ------------------------------------------------------------------ the candidate pool (one rule, offline and online)

@dataclass(frozen=True)
class GateSetting:
    """The gate's decision rule: largest set size K, uncertainty coefficient beta, risk threshold tau (None:
    abstain always), the removal cap, whether the latest step is protected and whether the gate may abstain."""

    k: int = 3
    beta: float = 0.0
    tau: float | None = None
    max_removal: float = MAX_REMOVAL
    protect_latest: bool = True
    abstain: bool = True


def online_view(record: dict[str, Any]) -> dict[str, Any]:
    """What of a DRSR boundary record the sensor sees before the next output: the one source of every feature."""
    missing = [k for k in _ONLINE if k not in record]
    if missing:
        raise ValueError(f"{record.get('task_id')}@{record.get('after_step')}: record lacks {', '.join(missing)} "
                         "(parts of an older interp drsr: delete its parts folder and re-run interp drsr)")
    return {k: record[k] for k in _ONLINE}


def unit_admissible(unit: Sequence[Any], b: int, setting: GateSetting, kinds: Sequence[str] = GATE_KINDS) -> bool:
    """Whether a unit may be a member of a gate set at boundary b: a gate kind, not of the protected latest step."""
    return unit[0] in kinds and unit[0] in GATE_KINDS and not (setting.protect_latest and unit[1] == b)


def pool_members(view: dict[str, Any], setting: GateSetting, kinds: Sequence[str] = GATE_KINDS) -> np.ndarray:
    """The view's admissible candidates (indices, history order): :func:`unit_admissible` with a span to delete."""
    b = view["after_step"]
    return np.array([j for j, c in enumerate(view["candidates"])
                     if c["n_tokens"] > 0 and unit_admissible(c["unit"], b, setting, kinds)], int)


def grow_sets(view: dict[str, Any], members: Sequence[int], setting: GateSetting,
              max_sets: int | None = None) -> tuple[list[tuple[int, ...]], np.ndarray, bool]:
    """The valid sets of at most ``setting.k`` of ``members`` (candidate indices) and their saving (span tokens).

    Valid: members pairwise non-overlapping (a call goes with its result: ``units_overlap``), no step removed
    whole (``empties_step`` on the view's step shapes), at most ``max_removal`` of the prompt's tokens. Each rule
    is monotone (a subset of a valid set is valid), so growing size k+1 only from valid sets of size k (adding a
    later member) yields exactly every valid set. ``max_sets``: stop once that many are grown (sizes ascending,
    members in the order given; the third value says whether it stopped). Sets are returned in canonical order
    (size, then ascending candidate indices), each as ascending indices."""
    cands = view["candidates"]
    units = [tuple(c["unit"]) for c in cands]
    tokens = [int(c["n_tokens"]) for c in cands]
    limit = setting.max_removal * view["prompt_tokens"]
    shapes = view["shapes"]
    order = list(members)
    after = {m: order[i + 1:] for i, m in enumerate(order)}
    conflict = {m: {x for x in order if units_overlap(units[m], units[x])} for m in order}
    emptied: dict[tuple[int, ...], bool] = {}  # the members of one step -> whether they empty it

    def fine(s: tuple[int, ...], m: int) -> bool:
        key = tuple(sorted(x for x in (*s, m) if units[x][1] == units[m][1]))
        if key not in emptied:
            emptied[key] = empties_step(shapes, [units[x] for x in key])
        return not emptied[key]

    level: list[tuple[tuple[int, ...], int]] = [((m,), tokens[m]) for m in order if tokens[m] <= limit and fine((), m)]
    out = list(level)
    capped = max_sets is not None and len(out) >= max_sets
    out = out[:max_sets] if max_sets is not None else out
    for _ in range(2, setting.k + 1):
        if capped:
            break
        nxt: list[tuple[tuple[int, ...], int]] = []
        for st, n in level:
            for m in after[st[-1]]:
                if n + tokens[m] > limit or any(m in conflict[x] for x in st) or not fine(st, m):
                    continue
                nxt.append(((*st, m), n + tokens[m]))
                if max_sets is not None and len(out) + len(nxt) >= max_sets:
                    capped = True
                    break
            if capped:
                break
        out += nxt
        level = nxt
    sets = sorted((tuple(sorted(st)) for st, _ in out), key=lambda x: (len(x), x))
    saving = np.array([sum(tokens[m] for m in st) for st in sets], int)
    return sets, saving, capped


# ------------------------------------------------------------------ supervision and split

@dataclass
class Supervision:
    """One row per (boundary, set of its candidate pool): the exact harm DRSR measured or NaN (unmeasured)."""

    views: list[dict[str, Any]]  # per boundary: online_view
    pools: list[np.ndarray]  # per boundary: its pool members (candidate indices)
    boundary: np.ndarray  # [n] int: index into views
    task: np.ndarray  # [n] str
    members: list[tuple[int, ...]]  # per row: ascending indices into its boundary's candidates
    harm: np.ndarray  # [n] nats/token; NaN where DRSR's stage did not measure the set
    measured: np.ndarray  # [n] bool
    saving: np.ndarray  # [n] int: span tokens the set deletes (the gate's saving)
    singles: list[dict[int, float]]  # per boundary: candidate index -> measured singleton harm
    threshold: float = UNSAFE

    @property
    def size(self) -> np.ndarray:
        """Set sizes [n]."""
        return np.array([len(m) for m in self.members], int)

    @property
    def unsafe(self) -> np.ndarray:
        """[n] bool: measured and harm above the threshold (False where unmeasured: read with ``measured``)."""
        return self.measured & (np.nan_to_num(self.harm, nan=-np.inf) > self.threshold)

    def rows_of(self, tasks: Sequence[str], measured: bool = False) -> np.ndarray:
        """Row indices of the given trajectories (``measured``: only rows with an exact harm)."""
        keep = np.isin(self.task, list(tasks))
        return np.flatnonzero(keep & self.measured if measured else keep)


def supervision(records: Sequence[dict[str, Any]], unsafe: float = UNSAFE, k: int = max(K_GRID),
                max_removal: float = MAX_REMOVAL, kinds: Sequence[str] = GATE_KINDS) -> Supervision:
    """The gate's pool at every boundary of DRSR records (skipped ones left out; rows in task, boundary order),
    with DRSR's exact harms where it measured a set: the sets the online gate enumerates (:func:`grow_sets`,
    K = ``k``), never others. ValueError naming the boundaries and how many sets when a measured harm is NaN or
    infinite (before any fit)."""
    setting = GateSetting(k=k, max_removal=max_removal)
    views: list[dict[str, Any]] = []
    pools: list[np.ndarray] = []
    singles: list[dict[int, float]] = []
    members: list[tuple[int, ...]] = []
    bidx: list[int] = []
    task: list[str] = []
    harm: list[float] = []
    saving: list[int] = []
    kept = sorted((r for r in records if not r.get("skipped")), key=lambda r: (str(r["task_id"]), int(r["after_step"])))
    bad = {f"{r['task_id']}@{r['after_step']}": n for r in kept
           if (n := sum(st.get("harm") is None or not np.isfinite(float(st["harm"])) for st in r["sets"]))}
    if bad:
        where = ", ".join(f"{k} ({n} sets)" for k, n in bad.items())
        raise ValueError(f"harm: {sum(bad.values())} measured sets at {len(bad)} boundaries have a NaN, infinite or "
                         f"missing harm: {where} (a DRSR part is corrupt: re-run interp drsr on those boundaries)")
    for rec in kept:  # in (task, boundary) order: the rows do not depend on the order the parts were read in
        view = online_view(rec)
        index = {tuple(c["unit"]): j for j, c in enumerate(view["candidates"])}
        exact = {tuple(sorted(index[tuple(m)] for m in st["members"])): float(st["harm"]) for st in rec["sets"]
                 if all(tuple(m) in index for m in st["members"])}
        pool = pool_members(view, setting, kinds)
        sets, save, _ = grow_sets(view, pool.tolist(), setting)
        i = len(views)
        views.append(view)
        pools.append(pool)
        singles.append({st[0]: h for st, h in exact.items() if len(st) == 1})
        for st, n in zip(sets, save):
            bidx.append(i)
            task.append(rec["task_id"])
            members.append(st)
            harm.append(exact.get(st, np.nan))
            saving.append(int(n))
    h = np.array(harm, float)
    return Supervision(views, pools, np.array(bidx, int), np.array(task, dtype=object), members, h, ~np.isnan(h),
                       np.array(saving, int), singles, unsafe)


def split_tasks(tasks: Sequence[str], seed: int = 0, fractions: Sequence[float] = SPLIT) -> dict[str, list[str]]:
    """Trajectories into train / validation / test, seeded; each part gets at least one (ValueError with < 3)."""
    unique = sorted(set(tasks))
    if len(unique) < 3:
        raise ValueError(f"the gate needs at least 3 trajectories (train, validation, test); got {len(unique)}")
    order = [unique[i] for i in np.random.default_rng(seed).permutation(len(unique))]
    n_val = max(1, round(fractions[1] * len(unique)))
    n_test = max(1, round(fractions[2] * len(unique)))
    n_val, n_test = min(n_val, len(unique) - 2), min(n_test, len(unique) - 1 - min(n_val, len(unique) - 2))
    return {"train": sorted(order[n_val + n_test:]), "validation": sorted(order[:n_val]),
            "test": sorted(order[n_val:n_val + n_test])}


# ------------------------------------------------------------------ features (one function, offline and online)

@dataclass(frozen=True)
class FeatureSpec:
    """Which layers the candidate features read and which set blocks are on (the ablations turn blocks off)."""

    layers: tuple[int, ...]
    attention_layers: tuple[int, ...]
    retained: bool = True
    pairs: bool = True

    @classmethod
    def for_view(cls, view: dict[str, Any], retained: bool = True, pairs: bool = True) -> FeatureSpec:
        """The default spec for a boundary's captures: the full-attention layers (at most MAX_LAYERS, evenly
        spaced; the middle layer when there is none) and every attention row."""
        att = [a for a in view["attention_layers"] if a in view["layers"]] or [view["layers"][len(view["layers"]) // 2]]
        pick = sorted({att[round(i)] for i in np.linspace(0, len(att) - 1, min(MAX_LAYERS, len(att)))})
        return cls(tuple(int(x) for x in pick), tuple(int(x) for x in view["attention_layers"]), retained, pairs)


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-12)


def _reps(view: dict[str, Any], spec: FeatureSpec) -> np.ndarray:
    li = [view["layers"].index(x) for x in spec.layers]
    return np.array([c["rep"] for c in view["candidates"]], float)[:, li]  # [n, L, d]


def candidate_features(view: dict[str, Any], spec: FeatureSpec) -> np.ndarray:
    """Per candidate features ``[n_candidates, F]`` (module docstring) of one boundary's online view; each row
    depends on its candidate and the boundary state only."""
    cands = view["candidates"]
    if not cands:
        return np.zeros((0, 0))
    li = [view["layers"].index(x) for x in spec.layers]
    ai = [view["attention_layers"].index(x) for x in spec.attention_layers]
    reps = _reps(view, spec)
    state = np.array(view["state"], float)[li]  # [L, d]
    b = view["after_step"]
    parts = [reps.reshape(len(cands), -1), (reps * state).reshape(len(cands), -1),
             np.abs(reps - state).reshape(len(cands), -1), _cos(reps, state)]
    steps = np.array([c["unit"][1] for c in cands], float)
    tokens = np.array([c["n_tokens"] for c in cands], float)
    kinds = np.array([[c["unit"][0] == k for k in UNIT_KINDS] for c in cands], float)
    att = np.array([[c["attention"][i] for i in ai] for c in cands], float).reshape(len(cands), len(ai), -1)
    parts += [kinds, (b - steps)[:, None], (steps / b)[:, None], np.log1p(tokens)[:, None],
              att.mean(-1), att.max(-1) if att.size else att.mean(-1), att.mean(-1) / np.maximum(tokens, 1)[:, None]]
    return np.concatenate(parts, axis=1)


def set_matrix(view: dict[str, Any], cand: np.ndarray, pool: Sequence[int] | np.ndarray, sets: Sequence[Sequence[int]],
               spec: FeatureSpec) -> np.ndarray:
    """The features ``[len(sets), D]`` of deleting each set (ascending candidate indices, members of ``pool``) at
    one boundary (``cand``: its :func:`candidate_features`; ``pool``: its :func:`pool_members`): the one feature
    function of supervision, selection, evaluation and the online gate. Each row depends on its set, the pool
    and the view only (never on the other rows), so a set's features are the same bits in any batch."""
    cands = view["candidates"]
    units = [tuple(c["unit"]) for c in cands]
    tokens = np.array([c["n_tokens"] for c in cands], float)
    pool = [int(x) for x in pool]
    n_f = cand.shape[1]
    total = cand[pool].sum(0) if pool else np.zeros(n_f)
    reps = _reps(view, spec) if spec.pairs else np.zeros((len(cands), 0, 0))
    steps = np.array([u[1] for u in units], float)
    kind = np.array([UNIT_KINDS.index(u[0]) if u[0] in UNIT_KINDS else -1 for u in units])
    width = reps.shape[1] * (reps.shape[2] + 1) + 3
    out: np.ndarray | None = None
    conf_sum, conf_n = np.zeros_like(cand), np.zeros(len(cands))  # per member: the pool members it takes along
    for m in {m for st in sets for m in st}:  # (itself, a call's result): disjoint between a set's members
        xs = [x for x in pool if units_overlap(units[m], units[x])]
        conf_sum[m], conf_n[m] = cand[xs].sum(0), len(xs)
    for k in sorted({len(s) for s in sets}):
        rows = np.array([i for i, s in enumerate(sets) if len(s) == k], int)
        idx = np.array([sets[i] for i in rows], int).reshape(len(rows), k)
        summed, top = cand[idx[:, 0]], cand[idx[:, 0]]
        for j in range(1, k):
            nxt = cand[idx[:, j]]
            summed, top = summed + nxt, np.maximum(top, nxt)
        parts = [summed / k, top]
        if spec.retained:  # the mean over the pool members the deletion leaves
            gone, left = conf_sum[idx[:, 0]], len(pool) - conf_n[idx[:, 0]]
            for j in range(1, k):
                gone, left = gone + conf_sum[idx[:, j]], left - conf_n[idx[:, j]]
            parts.append(np.where(left[:, None] > 0, (total - gone) / np.maximum(left, 1)[:, None], 0.0))
        if spec.pairs:
            if k >= 2:
                pi, pj = (np.array(x, int) for x in zip(*itertools.combinations(range(k), 2)))
                a, c = idx[:, pi], idx[:, pj]  # [n, P]
                ri, rj = reps[a], reps[c]  # [n, P, L, d]
                pair = np.concatenate([(ri * rj).reshape(len(rows), len(pi), -1), _cos(ri, rj),
                                       (steps[a] == steps[c]).astype(float)[..., None],
                                       np.abs(steps[a] - steps[c])[..., None],
                                       (kind[a] == kind[c]).astype(float)[..., None]], -1)
                parts += [pair.mean(1), np.full((len(rows), 1), float(len(pi)))]
            else:
                parts += [np.zeros((len(rows), width)), np.zeros((len(rows), 1))]
        span = tokens[idx].sum(1)
        parts.append(np.stack([np.full(len(rows), float(k)), np.log1p(span), span / view["prompt_tokens"]], 1))
        block = np.concatenate(parts, 1)
        if out is None:
            out = np.empty((len(sets), block.shape[1]))
        out[rows] = block
    return out if out is not None else np.zeros((0, 0))


def feature_matrix(sup: Supervision, rows: np.ndarray, spec: FeatureSpec) -> np.ndarray:
    """Set features ``[len(rows), D]`` of supervision rows (:func:`set_matrix`, boundary by boundary)."""
    rows = np.asarray(rows, int)
    out: np.ndarray | None = None
    for bi in np.unique(sup.boundary[rows]):
        mine = np.flatnonzero(sup.boundary[rows] == bi)
        view = sup.views[bi]
        x = set_matrix(view, candidate_features(view, spec), sup.pools[bi], [sup.members[r] for r in rows[mine]],
                       spec)
        if out is None:
            out = np.empty((len(rows), x.shape[1]))
        out[mine] = x
    return out if out is not None else np.zeros((0, 0))


# ------------------------------------------------------------------ scorer

def _normal_sf(z: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    return np.asarray(ndtr(-z), float)


class SetRiskScorer(RegressorMixin, BaseEstimator):
    """Bootstrap ensemble of StandardScaler + RidgeCV: predicted harm (mean), unsafe score and its uncertainty
    (module docstring); scikit-learn compatible (fit/predict, get_params, clone)."""

    def __init__(self, n_members: int = N_MEMBERS, unsafe: float = UNSAFE, seed: int = 0) -> None:
        self.n_members = n_members
        self.unsafe = unsafe
        self.seed = seed

    def fit(self, X: np.ndarray, y: np.ndarray) -> SetRiskScorer:
        """Fit every bootstrap member to (X, harm); the out-of-bag residual spread sets the unsafe score's scale."""
        from sklearn.linear_model import RidgeCV

        X, y = validate_data(self, X, y, dtype=float, y_numeric=True)  # sets n_features_in_
        n, p = X.shape
        rng = np.random.default_rng(self.seed)
        means, scales, coefs, icpts, resid = [], [], [], [], []
        for m in range(self.n_members):
            rows = np.arange(n) if self.n_members == 1 else rng.integers(n, size=n)
            mu = X[rows].mean(0)
            sd = X[rows].std(0)
            sd[sd < 1e-12] = 1.0
            z = (X[rows] - mu) / sd
            if n >= 3:
                model = RidgeCV(alphas=ALPHAS).fit(z, y[rows])
                coef, icpt = np.asarray(model.coef_, float), float(model.intercept_)
            else:
                coef, icpt = np.zeros(p), float(np.mean(y[rows]))
            out = np.setdiff1d(np.arange(n), rows)
            resid.extend((y[out] - (((X[out] - mu) / sd) @ coef + icpt)).tolist())
            means.append(mu)
            scales.append(sd)
            coefs.append(coef)
            icpts.append(icpt)
        self.mean_, self.scale_, self.coef_ = np.array(means), np.array(scales), np.array(coefs)
        self.intercept_ = np.array(icpts)
        if len(resid) < 2:  # no out-of-bag rows: the in-sample spread of the ensemble mean
            resid = (y - self._members(X).mean(0)).tolist()
        self.resid_sd_ = float(max(np.std(resid), 1e-6))
        return self

    def _members(self, X: Any) -> np.ndarray:
        """Per member predictions [n_members, n]; each row of X is reduced on its own (numpy's einsum loop, no
        BLAS blocking), so a set's prediction is the same bits in any batch."""
        check_is_fitted(self, "coef_")
        X = validate_data(self, X, dtype=float, reset=False)  # refuses another number of features
        w = self.coef_ / self.scale_
        return np.einsum("np,mp->mn", X, w, optimize=False) + \
            (self.intercept_ - np.einsum("mp,mp->m", self.mean_, w, optimize=False))[:, None]

    kind = "ridge"

    def fit_rows(self, sup: Supervision, rows: np.ndarray, spec: FeatureSpec) -> SetRiskScorer:
        """Fit to the exact harm of supervision ``rows`` (their :func:`feature_matrix`)."""
        return self.fit(feature_matrix(sup, rows, spec), sup.harm[rows])

    def harm_sets(self, view: dict[str, Any], cand: np.ndarray, pool: Sequence[int] | np.ndarray,
                  sets: Sequence[Sequence[int]], spec: FeatureSpec) -> np.ndarray:
        """Predicted harm of a boundary's sets (their :func:`set_matrix`)."""
        return self.predict(set_matrix(view, cand, pool, sets, spec))

    def risk_sets(self, view: dict[str, Any], cand: np.ndarray, pool: Sequence[int] | np.ndarray,
                  sets: Sequence[Sequence[int]], spec: FeatureSpec) -> tuple[np.ndarray, np.ndarray]:
        """(unsafe score, uncertainty) of a boundary's sets (their :func:`set_matrix`)."""
        return self.predict_risk(set_matrix(view, cand, pool, sets, spec))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predicted harm [n] (nats/token): the members' mean."""
        return self._members(X).mean(0)

    def predict_risk(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(unsafe score [n], uncertainty [n]): mean and standard deviation over members of P(harm > unsafe)."""
        p = _normal_sf((self.unsafe - self._members(X)) / self.resid_sd_)
        return p.mean(0), p.std(0)

    def to_json(self) -> dict[str, Any]:
        """The fitted scorer as JSON-able arrays (no pickle)."""
        check_is_fitted(self, "coef_")
        return {"params": self.get_params(), "n_features_in": int(self.n_features_in_),
                "resid_sd": self.resid_sd_, "mean": self.mean_.tolist(), "scale": self.scale_.tolist(),
                "coef": self.coef_.tolist(), "intercept": self.intercept_.tolist()}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SetRiskScorer:
        """A fitted scorer from :meth:`to_json`'s form; ValueError on inconsistent arrays."""
        est = cls(**doc["params"])
        est.mean_, est.scale_, est.coef_ = (np.array(doc[k], float) for k in ("mean", "scale", "coef"))
        est.intercept_ = np.array(doc["intercept"], float)
        est.n_features_in_, est.resid_sd_ = int(doc["n_features_in"]), float(doc["resid_sd"])
        shape = (est.n_members, est.n_features_in_)
        if any(a.shape != shape for a in (est.mean_, est.scale_, est.coef_)) or est.intercept_.shape != shape[:1]:
            raise ValueError(f"scorer arrays do not match n_members x n_features {shape}")
        return est


# ------------------------------------------------------------------ the gate's rule

def choose(score: np.ndarray, saving: np.ndarray, tau: float | None, abstain: bool = True) -> int | None:
    """Index of the set the gate deletes among one boundary's valid candidates: the largest saving with
    ``score < tau`` (ties: lower score, then first); None to abstain. Without abstention the lowest score wins
    when nothing is under tau."""
    if not len(score):
        return None
    feasible = np.flatnonzero(score < tau) if tau is not None else np.array([], int)
    if not len(feasible):
        return None if abstain else int(np.lexsort((-saving, score))[0])
    return int(feasible[np.lexsort((score[feasible], -saving[feasible]))[0]])


@dataclass
class Scored:
    """One split's pool rows with their gate scores."""

    rows: np.ndarray  # supervision rows
    risk: np.ndarray
    uncertainty: np.ndarray
    boundaries: np.ndarray  # every boundary of the split (abstaining ones included)
    bnd: np.ndarray | None = None  # the boundary of each row (sup.boundary[rows]); set by score_split

    def groups(self) -> dict[int, np.ndarray]:
        """Per boundary of the split: the positions of its rows in ``rows`` (empty when it has none)."""
        bnd = self.bnd if self.bnd is not None else np.zeros(0, int)
        order = np.argsort(bnd, kind="stable")
        starts = np.searchsorted(bnd[order], self.boundaries)
        ends = np.searchsorted(bnd[order], self.boundaries, side="right")
        return {int(b): order[a:e] for b, a, e in zip(self.boundaries, starts, ends)}


def decisions(sup: Supervision, scored: Scored, setting: GateSetting) -> dict[int, int | None]:
    """Per boundary of the split: the supervision row the gate deletes, or None."""
    score = scored.risk + setting.beta * scored.uncertainty
    saving = sup.saving[scored.rows].astype(float)
    out: dict[int, int | None] = {}
    for bi, mine in scored.groups().items():
        pick = choose(score[mine], saving[mine], setting.tau, setting.abstain)
        out[bi] = None if pick is None else int(scored.rows[mine[pick]])
    return out


def gate_metrics(sup: Supervision, chosen: dict[int, int | None]) -> dict[str, Any]:
    """Coverage (fraction of boundaries deleting), mean direct removal (span tokens / request tokens; 0 when
    abstaining), and over the deletions whose set DRSR measured: empirical unsafe rate and mean exact harm (None
    without one); n_measured of n_deleted (an unmeasured deletion is counted, never guessed)."""
    picked = [r for r in chosen.values() if r is not None]
    known = [r for r in picked if sup.measured[r]]
    removal = [0.0 if r is None else sup.saving[r] / sup.views[bi]["prompt_tokens"] for bi, r in chosen.items()]
    return {"coverage": len(picked) / len(chosen) if chosen else None,
            "removal": float(np.mean(removal)) if removal else None,
            "unsafe_rate": float(np.mean(sup.unsafe[known])) if known else None,
            "mean_harm": float(np.mean(sup.harm[known])) if known else None,
            "n_boundaries": len(chosen), "n_deleted": len(picked), "n_measured": len(known)}


def admissible(n_deleted: np.ndarray, n_measured: np.ndarray, n_unsafe: np.ndarray, harm: np.ndarray,
               cal: Calibration) -> np.ndarray:
    """DRSR's empirical constraints, elementwise over settings: no deletion, or, over the measured deletions, the
    unsafe rate (add-one smoothed when ``cal.smooth``) <= ``cal.alpha`` and the mean harm (``harm``: their sum)
    <= ``MAX_MEAN_HARM`` (a setting whose deletions were never measured is not admissible: its harm is
    unknown)."""
    n = np.asarray(n_measured, float)
    rate = (n_unsafe + 1) / (n + 2) if cal.smooth else n_unsafe / np.maximum(n, 1)
    return (np.asarray(n_deleted) == 0) | ((n > 0) & (rate <= cal.alpha) & (harm <= MAX_MEAN_HARM * n))


def _by_boundary(sup: Supervision, rows: np.ndarray, spec: FeatureSpec, fn: Any, width: int) -> np.ndarray:
    """``fn(view, cand, pool, sets, spec)`` boundary by boundary over supervision ``rows``: [width, len(rows)]."""
    rows = np.asarray(rows, int)
    out = np.zeros((width, len(rows)))
    for bi in np.unique(sup.boundary[rows]):
        mine = np.flatnonzero(sup.boundary[rows] == bi)
        view = sup.views[bi]
        out[:, mine] = np.reshape(fn(view, candidate_features(view, spec), sup.pools[bi],
                                     [sup.members[r] for r in rows[mine]], spec), (width, len(mine)))
    return out



Scorer: TypeAlias = "SetRiskScorer | SetMLPScorer"  # the two kinds of ``SCORERS`` (``make_scorer``)


def predict_rows(scorer: Scorer, sup: Supervision, rows: np.ndarray, spec: FeatureSpec) -> np.ndarray:
    """A scorer's predicted harm of supervision rows (either scorer: ``harm_sets`` per boundary)."""
    return _by_boundary(sup, rows, spec, scorer.harm_sets, 1)[0]


def risk_rows(scorer: Scorer, sup: Supervision, rows: np.ndarray, spec: FeatureSpec) -> tuple[np.ndarray, np.ndarray]:
    """A scorer's (unsafe score, uncertainty) of supervision rows (``risk_sets`` per boundary)."""
    risk, unc = _by_boundary(sup, rows, spec, lambda *a: np.stack(scorer.risk_sets(*a)), 2)
    return risk, unc


def score_split(sup: Supervision, tasks: Sequence[str], scorer: Scorer, spec: FeatureSpec) -> Scored:
    """Gate scores of the pool sets of the given trajectories."""
    rows = sup.rows_of(tasks)
    bounds = np.unique(sup.boundary[rows])
    if not len(rows):
        return Scored(rows, np.zeros(0), np.zeros(0), bounds, np.zeros(0, int))
    risk, unc = risk_rows(scorer, sup, rows, spec)
    return Scored(rows, risk, unc, bounds, sup.boundary[rows])


def restrict(sup: Supervision, scored: Scored, k: int) -> Scored:
    """The scored rows of sets of at most ``k`` units."""
    keep = sup.size[scored.rows] <= k
    return Scored(scored.rows[keep], scored.risk[keep], scored.uncertainty[keep], scored.boundaries,
                  sup.boundary[scored.rows[keep]])


@dataclass(frozen=True)
class Calibration:
    """How the gate's threshold is calibrated: the rule that picks the setting (``RULES``: "bound", a
    finite-sample guarantee, or "empirical", DRSR's rule), the unsafe-rate limit ``alpha``, the confidence
    ``delta`` of the bound, the folds of the cross-fitted scoring and whether the empirical rate is add-one
    smoothed (``patching.config.GateConfig`` holds the defaults)."""

    rule: str
    alpha: float
    delta: float
    folds: int
    smooth: bool


def sweep(sup: Supervision, scored: Scored, k: int, beta: float, taus: Sequence[float] = TAU_GRID
          ) -> dict[str, np.ndarray]:
    """The gate's deletions at every tau of ``taus`` (ascending) for one (K, beta), vectorised: per tau the
    number of deleting boundaries, of measured deletions, of unsafe measured ones, the summed exact harm of the
    measured ones and the summed removal (span tokens / request tokens). Per boundary the sets are ordered as
    :func:`choose` ranks them (saving descending, score ascending, then canonical order); the set chosen at tau
    is the first whose running minimum score is under tau, found by bisection over the running minima: the
    same choice as :func:`decisions` at every tau (tested), in float64."""
    mine = restrict(sup, scored, k)
    score = np.asarray(mine.risk, np.float64) + float(beta) * np.asarray(mine.uncertainty, np.float64)
    grid = np.asarray(taus, np.float64)
    n_t = len(grid)
    out = {name: np.zeros(n_t) for name in ("n_deleted", "n_measured", "n_unsafe", "harm", "removal")}
    measured, unsafe = sup.measured, sup.unsafe
    for bi, pos in mine.groups().items():
        if not len(pos):
            continue
        rows = mine.rows[pos]
        order = np.lexsort((np.arange(len(pos)), score[pos], -sup.saving[rows]))
        s = score[pos][order]
        low = np.minimum.accumulate(s)
        record = np.flatnonzero(np.r_[True, low[1:] < low[:-1]])  # positions where the running minimum drops
        ascending = s[record][::-1]
        n_ge = len(record) - np.searchsorted(ascending, grid, side="left")  # records with score >= tau
        hit = n_ge < len(record)
        if not hit.any():
            continue
        chosen = rows[order[record[np.minimum(n_ge, len(record) - 1)]]]
        prompt = sup.views[bi]["prompt_tokens"]
        out["n_deleted"] += hit
        out["n_measured"] += hit & measured[chosen]
        out["n_unsafe"] += hit & unsafe[chosen]
        out["harm"] += np.where(hit & measured[chosen], np.nan_to_num(sup.harm[chosen]), 0.0)
        out["removal"] += np.where(hit, sup.saving[chosen] / prompt, 0.0)
    out["n_boundaries"] = np.full(n_t, float(len(mine.boundaries)))
    return out


def needed_boundaries(cal: Calibration, n_hypotheses: int = len(K_GRID)) -> int:
    """The fewest calibration boundaries whose deletions, all measured and all safe, could admit a setting:
    ``ceil(log(delta / n_hypotheses) / log(1 - alpha))`` under the bound (``delta`` split over its
    ``n_hypotheses`` sequences), ``1 / alpha - 2`` (add-one smoothed) or 1 (plain rate) under the empirical rule."""
    if cal.rule == "bound":
        return int(np.ceil(np.log(cal.delta / n_hypotheses) / np.log1p(-cal.alpha)))
    return max(1, int(np.ceil(1 / cal.alpha - 2 - 1e-9))) if cal.smooth else 1


def _setting_metrics(sup: Supervision, scored: Scored, setting: GateSetting) -> dict[str, Any]:
    return gate_metrics(sup, decisions(sup, restrict(sup, scored, setting.k), setting))


def select_empirical(sup: Supervision, scored: Scored, cal: Calibration, k_grid: Sequence[int] = K_GRID,
                     beta_grid: Sequence[float] = BETA_GRID, abstain: bool = True
                     ) -> tuple[GateSetting, dict[str, Any]]:
    """DRSR's rule on calibration scores: the (K, beta, tau of ``TAU_GRID``) with the largest mean direct removal
    whose deletions' empirical unsafe rate (add-one smoothed when ``cal.smooth``) is <= ``cal.alpha`` and mean
    harm <= ``MAX_MEAN_HARM`` (module docstring; ties: smaller K, beta, tau); abstaining when none is."""
    best: tuple[tuple[float, ...], GateSetting] | None = None
    for k in sorted(k_grid):
        for beta in sorted(beta_grid):
            sw = sweep(sup, scored, k, beta)
            ok = (sw["n_deleted"] > 0) & admissible(sw["n_deleted"], sw["n_measured"], sw["n_unsafe"], sw["harm"], cal)
            if not ok.any():
                continue
            removal = np.where(ok, sw["removal"] / np.maximum(sw["n_boundaries"], 1), -np.inf)
            i = int(np.argmax(removal))  # the first (smallest tau) of the largest removal
            key = (-float(removal[i]), k, beta, TAU_GRID[i])
            if best is None or key < best[0]:
                best = (key, GateSetting(k=k, beta=beta, tau=TAU_GRID[i], abstain=abstain))
    setting = best[1] if best is not None else GateSetting(k=min(k_grid), beta=min(beta_grid), tau=None,
                                                           abstain=abstain)
    return setting, _setting_metrics(sup, scored, setting)


def select_bound(sup: Supervision, scored: Scored, cal: Calibration, k_grid: Sequence[int] = K_GRID,
                 abstain: bool = True) -> tuple[GateSetting, dict[str, Any]]:
    """The guaranteed rule (Learn then Test, module docstring): per K (beta 0), taus of ``TAU_GRID`` ascending are
    tested in a fixed sequence, each by the binomial p-value ``P(Bin(n, alpha) <= n_bad)`` of its ``n``
    deletions (``n_bad``: unsafe or unmeasured), at level ``delta / len(k_grid)``; the sequence skips the taus
    with fewer deletions than :func:`needed_boundaries` (a function of the scores alone) and stops at the first
    it cannot reject. Every tau it passes has an unsafe rate of deletions <= alpha with probability >= 1 - delta
    (all K together); among them the largest mean direct removal with mean harm <= ``MAX_MEAN_HARM`` wins."""
    from scipy.stats import binom

    level = cal.delta / len(k_grid)
    n_min = needed_boundaries(cal, len(k_grid))
    best: tuple[tuple[float, ...], GateSetting] | None = None
    for k in sorted(k_grid):
        sw = sweep(sup, scored, k, 0.0)
        n, bad = sw["n_deleted"], sw["n_deleted"] - sw["n_measured"] + sw["n_unsafe"]
        p = binom.cdf(bad, n, cal.alpha)
        tested = n >= n_min
        failed = np.flatnonzero(tested & (p > level))
        stop = int(failed[0]) if len(failed) else len(TAU_GRID)
        ok = tested & (np.arange(len(TAU_GRID)) < stop) & (sw["harm"] <= MAX_MEAN_HARM * np.maximum(sw["n_measured"], 1))
        if not ok.any():
            continue
        removal = np.where(ok, sw["removal"] / np.maximum(sw["n_boundaries"], 1), -np.inf)
        i = int(np.argmax(removal))
        key = (-float(removal[i]), k, 0.0, TAU_GRID[i])
        if best is None or key < best[0]:
            best = (key, GateSetting(k=k, beta=0.0, tau=TAU_GRID[i], abstain=abstain))
    setting = best[1] if best is not None else GateSetting(k=min(k_grid), beta=0.0, tau=None, abstain=abstain)
    return setting, _setting_metrics(sup, scored, setting)


def select(sup: Supervision, scored: Scored, cal: Calibration, k_grid: Sequence[int] = K_GRID,
           beta_grid: Sequence[float] = BETA_GRID, abstain: bool = True) -> tuple[GateSetting, dict[str, Any]]:
    """The setting ``cal.rule`` selects on calibration scores (:func:`select_bound` or :func:`select_empirical`)."""
    if cal.rule == "bound":
        return select_bound(sup, scored, cal, k_grid, abstain)
    return select_empirical(sup, scored, cal, k_grid, beta_grid, abstain)


# ------------------------------------------------------------------ the scorer file and the online gate

SCORERS = GATE_SCORERS


def make_scorer(kind: str, n_members: int | None = None, unsafe: float = UNSAFE, seed: int = 0) -> Scorer:
    """An unfitted scorer of ``kind`` (``SCORERS``): the ridge ensemble or DRSR's set model
    (``patching.gate_mlp``); ValueError naming the kinds otherwise."""
    if kind == "ridge":
        return SetRiskScorer(n_members=n_members or N_MEMBERS, unsafe=unsafe, seed=seed)
    if kind == "set-mlp":
        from patching.gate_mlp import N_MEMBERS as MLP_MEMBERS, SetMLPScorer

        return SetMLPScorer(n_members=n_members or MLP_MEMBERS, unsafe=unsafe, seed=seed)
    raise ValueError(f"unknown scorer {kind!r}; known: {', '.join(SCORERS)}")


@dataclass
class GateModel:
    """A trained gate: its features, scorer and decision rule, the split it was trained on and the sensor's
    representation settings (projection) it reads."""

    spec: FeatureSpec
    scorer: Any  # SetRiskScorer (kind "ridge") or patching.gate_mlp.SetMLPScorer ("set-mlp")
    setting: GateSetting
    split: dict[str, list[str]] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)  # spec, d_model, proj_dim (null: not projected)
    unit_kinds: tuple[str, ...] = GATE_KINDS
    calibration: dict[str, Any] = field(default_factory=dict)  # patching.gate_eval.calibration_summary

    def to_json(self) -> dict[str, Any]:
        """The scorer file's document (``SCORER_FORMAT``)."""
        return {"schema": schema_dict(SCORER_FIELDS), "format": SCORER_FORMAT, "spec": asdict(self.spec),
                "kind": self.scorer.kind, "scorer": self.scorer.to_json(),
                "setting": asdict(self.setting), "split": self.split, "model": self.model,
                "unit_kinds": list(self.unit_kinds), "calibration": self.calibration}

    def rule(self) -> Calibration:
        """The calibration this gate was selected under (a scorer file without one: ``GateConfig``'s defaults)."""
        c = self.calibration
        if not c:
            return GateConfig().calibration()
        return Calibration(c["rule"], float(c["alpha"]), float(c["delta"]), int(c["folds_asked"]), bool(c["smooth"]))

    def save(self, path: Path, made: Mapping[str, Any]) -> Path:
        """Write the scorer file atomically, with the record of the training run that made it (``made``:
        ``interp.record.record`` of its ``GateConfig``)."""
        atomic_write_json(Path(path), {**self.to_json(), **made})
        return Path(path)

    @classmethod
    def load(cls, path: Path) -> GateModel:
        """Read a scorer file; FileNotFoundError / ValueError naming the file when it is missing or not one."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no gate scorer file (write one with `interp gate train`)")
        doc = read_json(path)
        if not isinstance(doc, dict) or doc.get("format") != SCORER_FORMAT:
            raise ValueError(f"{path}: not a gate scorer file (expected format {SCORER_FORMAT!r})")
        try:
            spec = doc["spec"]
            return cls(FeatureSpec(tuple(spec["layers"]), tuple(spec["attention_layers"]), bool(spec["retained"]),
                                   bool(spec["pairs"])),
                       make_scorer(doc.get("kind", "ridge")).from_json(doc["scorer"]), GateSetting(**doc["setting"]),
                       doc["split"],
                       doc["model"], tuple(doc["unit_kinds"]), dict(doc.get("calibration") or {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: corrupt gate scorer file ({type(exc).__name__}: {exc})") from None


@dataclass
class ViewDecision:
    """The gate's choice from one boundary's view: the set (candidate indices; None: abstain), its score and
    saving, how many valid sets were scored, how many were feasible, and whether the candidate cap was hit."""

    members: tuple[int, ...] | None
    score: float | None
    saving: int
    n_scored: int
    n_feasible: int
    capped: bool = False


def _scores(model: GateModel, view: dict[str, Any], cand: np.ndarray, pool: np.ndarray,
            sets: Sequence[tuple[int, ...]]) -> np.ndarray:
    """score + beta * uncertainty of each set, computed in chunks of SCORE_CHUNK sets (row-wise: chunking does not
    change a bit)."""
    out = np.empty(len(sets))
    for a in range(0, len(sets), SCORE_CHUNK):
        risk, unc = model.scorer.risk_sets(view, cand, pool, sets[a:a + SCORE_CHUNK], model.spec)
        out[a:a + SCORE_CHUNK] = risk + model.setting.beta * unc
    return out


def decide_view(model: GateModel, view: dict[str, Any], prune: bool = True,
                max_sets: int | None = MAX_SETS) -> ViewDecision:
    """The gate's decision from an online view (no model run): the pool, the valid sets, their scores, the choice.

    The valid sets are grown from the pool's admissible members only (``grow_sets``; members in order of span
    tokens, largest first, so a cap at ``max_sets`` keeps every smaller set and the larger sets of the longest
    units: the ones that could save most). Exhaustive (``prune=False``): every set is scored. Pruned (the
    default): sets are scored in order of saving, largest first, one vectorised chunk at a time, and scoring
    stops once a chunk holds a set under tau and every set of that saving is scored: no set left unscored could
    be chosen (a smaller saving never wins), so the choice is the exhaustive one, bit for bit (tested)."""
    s = model.setting
    pool = pool_members(view, s, model.unit_kinds)
    if not len(pool) or (s.tau is None and s.abstain):
        return ViewDecision(None, None, 0, 0, 0)
    tokens = [int(c["n_tokens"]) for c in view["candidates"]]
    members = sorted(pool.tolist(), key=lambda m: (-tokens[m], m))
    sets, saving, capped = grow_sets(view, members, s, max_sets)
    cand = candidate_features(view, model.spec)
    score = np.full(len(sets), np.inf)
    order = np.lexsort((np.arange(len(sets)), -saving)) if prune else np.arange(len(sets))
    done, stop = 0, None
    while done < len(order):
        chunk = order[done:done + SCORE_CHUNK]
        if stop is not None:
            chunk = chunk[saving[chunk] >= stop]
            if not len(chunk):
                break
        score[chunk] = _scores(model, view, cand, pool, [sets[i] for i in chunk])
        done += len(chunk)
        under = chunk[score[chunk] < s.tau] if prune and s.tau is not None else chunk[:0]
        if stop is None and len(under):
            stop = int(saving[under].max())
    scored = np.sort(order[:done])
    pick = choose(score[scored], saving[scored].astype(float), s.tau, s.abstain)
    n_feasible = int(np.sum(score[scored] < s.tau)) if s.tau is not None else 0
    if pick is None:
        return ViewDecision(None, None, 0, len(scored), n_feasible, capped)
    i = int(scored[pick])
    return ViewDecision(sets[i], float(score[i]), int(saving[i]), len(scored), n_feasible, capped)


@dataclass
class Decision:
    """What the online gate decided at a boundary: the units deleted (empty: abstained) and why (``tokens_removed``:
    measured on the edited render)."""

    units: list[Unit]
    score: float | None
    tokens_removed: int
    n_valid: int
    n_feasible: int
    capped: bool = False


class SetGate:
    """The online gate: ``gate.decide(traj, b)`` (or ``gate(traj, b)``, a ``drsr_gate`` condition's parameter)
    runs one forward of the prompt at b (``patching.relations.prompt_capture``, the forward DRSR's records come
    from) and decides with :func:`decide_view`, the rule offline evaluation applies to the same view."""

    def __init__(self, model: GateModel, sensor: Any, prune: bool = True, max_sets: int | None = MAX_SETS) -> None:
        d = model.model.get("d_model")
        if d is not None and d != sensor.d_model:
            raise ValueError(f"the gate was trained on a model with d_model {d}; this sensor has {sensor.d_model}")
        self.model = model
        self.sensor = sensor
        self.prune = prune
        self.max_sets = max_sets
        self.proj = projection(sensor.d_model, model.model["proj_dim"]) if model.model.get("proj_dim") else None
        self._memo: dict[tuple[Any, ...], Decision] = {}  # (task_id, b, prompt ids) -> decision, at most MEMO
        self.lock: AbstractContextManager[Any] = nullcontext()  # taken around a forward (interp serve's sensor lock)


    def units(self, traj: Trajectory, b: int) -> list[Unit]:
        """The pool's units at b: admissible (``unit_admissible``) and with text to delete."""
        return [u for u in history_units(traj, b, list(GATE_KINDS))
                if unit_admissible(u, b, self.model.setting, self.model.unit_kinds) and not unit_is_empty(traj, u)]

    def view(self, traj: Trajectory, b: int, units: Sequence[Unit] | None = None) -> dict[str, Any]:
        """The online view of boundary b (the fields of a DRSR record's view), from one forward of the prompt."""
        spec = self.model.spec
        units = self.units(traj, b) if units is None else units
        cap = prompt_capture(self.sensor, traj, b, units, sorted(set(spec.layers)), list(spec.attention_layers),
                             self.proj)
        return {"task_id": traj.task_id, "after_step": b, **cap, "shapes": step_shapes(traj, b)}

    def decide(self, traj: Trajectory, b: int) -> Decision:
        """The set the gate deletes at boundary b (``units`` empty: it abstains); a prompt decided before (the
        same task, boundary and tokens: ``drsr_gate`` replays steps 1..t at every later boundary) is answered
        from memory, without a forward."""
        key = (traj.task_id, b, tuple(render(traj, b, self.sensor.tokenizer).input_ids))
        if key not in self._memo:
            if len(self._memo) >= MEMO:
                self._memo.pop(next(iter(self._memo)))
            with self.lock:
                self._memo[key] = self._decide(traj, b)
        return self._memo[key]

    def _decide(self, traj: Trajectory, b: int) -> Decision:
        s = self.model.setting
        units = self.units(traj, b)
        if not units or (s.tau is None and s.abstain):
            return Decision([], None, 0, 0, 0)
        view = self.view(traj, b, units)
        d = decide_view(self.model, view, self.prune, self.max_sets)
        if d.members is None:
            return Decision([], None, 0, d.n_scored, d.n_feasible, d.capped)
        chosen = [tuple(view["candidates"][m]["unit"]) for m in d.members]
        chosen_units = [(str(u[0]), int(u[1]), u[2]) for u in chosen]
        edited, _, _ = delete_units(traj, b, chosen_units)
        removed = view["prompt_tokens"] - render(edited, b, self.sensor.tokenizer).n_tokens
        return Decision(chosen_units, d.score, removed, d.n_scored, d.n_feasible, d.capped)

    def __call__(self, traj: Trajectory, b: int) -> list[Unit] | None:
        """The units to delete at b, or None to abstain (the ``SetGate`` protocol of ``drsr_gate``)."""
        return self.decide(traj, b).units or None
