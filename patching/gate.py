"""DRSR's learned set-risk gate: predict the harm of deleting a *set* of history units from online-visible
information, and delete the largest set predicted safe, abstaining when none is.

**Supervision** (:func:`supervision`): from DRSR boundary records (``patching.drsr.boundary_record``: the
per-boundary parts ``interp drsr`` writes under ``<out>/parts/drsr.*/``), one row per (boundary, candidate set
whose members were all captured): the exact harm (``patching.harm``), the unsafe label ``harm > UNSAFE``
(``patching.granularity.UNSAFE`` = 0.020 nats/token, DRSR's margin; one home), the set size and the tokens its
deletion removes from the request. :func:`split_tasks` splits trajectories (never rows) into train / validation /
test (seeded; fractions ``SPLIT`` = 80:10:10 as DRSR, at least one trajectory in each part).

**Features** (:func:`set_features`) read only :func:`online_view` of a record: what the sensor sees at the
boundary before the next output exists (the candidates' pooled representations, the boundary state, the boundary
token's attention rows, the units, span sizes and the request size). The recorded next output, its NLL and the
harms are labels only: ``online_view`` drops them, and a test changes the next step's text and finds the features
unchanged while the harms change. Per candidate ``u`` (at ``FeatureSpec.layers``, the full-attention layers, at
most ``MAX_LAYERS`` of them evenly spaced): ``r_u``, ``r_u * s``, ``abs(r_u - s)``, ``cos(r_u, s)``
(``patching.relations``: the relation to the boundary state ``s``), its unit kind (one-hot), recency
``b - step``, position ``step / b``, ``log1p`` span tokens, and per full-attention layer the boundary token's mean
and max head attention mass on the span and the mean mass per span token. Per set: the members' features pooled
(mean and max; *deleted units*), the mean features of the candidates the deletion leaves (*retained context*;
zero when none), the mean over member pairs of ``r_i * r_j`` and ``cos(r_i, r_j)`` per layer, same step, step
distance and same kind (*pair pooling*; zero for a singleton), and the set's size, span tokens and span
tokens / request tokens.

**Scorer** (:class:`SetRiskScorer`, a scikit-learn regressor): ``n_members`` bootstrap replicates of
``StandardScaler`` + ``RidgeCV`` (alphas ``patching.relations.ALPHAS``) fitted to the exact harm; the prediction
is their mean. Each member's unsafe probability is ``P(harm > unsafe)`` under a normal with the member's
prediction as mean and the out-of-bag residual standard deviation as spread; the unsafe score is the mean over
members and the uncertainty their standard deviation. It is stored as JSON (:meth:`SetRiskScorer.to_json`:
arrays as lists; no pickle), with the feature spec, the gate's setting and the split: the *scorer file*
(``gate_scorer.json``, ``SCORER_FORMAT``).

**Gate** (:func:`choose`): at a boundary the structurally valid candidate sets are those of at most ``K``
non-overlapping units of the kinds ``GATE_KINDS`` (reasoning blocks, observations, tool exchanges: a call is
deleted with its result, ``interp.data.deletions``), none of the latest step (recency: protected by default),
removing at most ``MAX_REMOVAL`` = 20 % of the request's tokens (budget). Those with ``score + beta *
uncertainty < tau`` are feasible; the gate deletes the feasible set with the largest direct token saving (ties:
the lower score) and abstains when none is feasible. Online (:class:`SetGate`, ``gate.decide(traj, b)``), the
features come from one forward of the render at b, every valid set is enumerated, and the tokens removed are
measured by rendering the edited history; a set that would leave a step empty (removed whole) is not valid there,
so the gated history keeps its boundary (the ``drsr_gate`` history condition, ``interp.data.conditions``).

Fields of the scorer file (``SCORER_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``format`` | ``[]`` | str | - | SCORER_FORMAT: what reads this file |
| ``spec`` | ``{layers, attention_layers, retained, pairs}`` | object | 0-based layers | the features: representation layers, attention rows, retained-context and pair blocks on or off |
| ``scorer`` | ``{params, n_features_in, resid_sd, mean, scale, coef, intercept}`` | object | harm: nats/token | the fitted SetRiskScorer: per member [n_members, n_features] scaler mean and scale, ridge coef, [n_members] intercept; resid_sd the out-of-bag residual spread |
| ``setting`` | ``{k, beta, tau, max_removal, protect_latest, abstain}`` | object | tau: unsafe score; max_removal: fraction of request tokens | the decision rule selected on validation (tau null: abstain always) |
| ``split`` | ``{train, validation, test}`` | object | - | the task_ids of each part |
| ``model`` | ``{spec, d_model, proj_dim}`` | object | dims | the sensor the representations came from and their projection (proj_dim null: not projected) |
| ``unit_kinds`` | ``[n_kinds]`` | str | - | the unit kinds the gate may delete |

**Selection** (:func:`select`) on validation: ``K`` in ``K_GRID``, ``beta`` in ``BETA_GRID``, ``tau`` just above each
observed validation score (at most ``TAU_POINTS`` observed quantiles); a setting is admissible when the deletions it makes have an empirical unsafe rate
<= ``MAX_UNSAFE_RATE`` and a mean exact harm <= ``MAX_MEAN_HARM`` (abstaining everywhere is always admissible).
The unsafe rate is smoothed add-one, ``(n_unsafe + 1) / (n_deleted + 2)`` (DRSR states the plain empirical
rate): the search maximises removal, so it stops where the validation rate meets the limit, and the held-out
rate then scatters around the limit; the smoothing keeps the selected rate below it (tested on planted harms)
and needs 8 safe deletions before any deletion is admitted. On a harm no feature predicts, a small validation
split can still admit a tau whose few deletions happen to be safe (``gate.json`` notes small splits; the null
test of ``tests/gate`` uses ~80 validation boundaries, where the gate abstains).
the admissible one with the largest mean direct removal wins (ties: smaller K, beta, tau). Evaluation:
``patching.gate_eval``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from interp.data.deletions import DRSR_UNIT_KINDS, UNIT_KINDS, Unit, delete_units, history_units, units_overlap
from interp.data.render import render
from interp.data.trajectory import Trajectory
from interp.io import atomic_write_json, read_json
from interp.schema import Field, schema_dict
from patching.config import GateConfig
from patching.granularity import UNSAFE
from patching.relations import ALPHAS, capture_plan, captured, projection

GATE_KINDS = DRSR_UNIT_KINDS
SPLIT = (0.8, 0.1, 0.1)  # train, validation, test fractions of trajectories (DRSR's 80:10:10)
K_GRID = (2, 3)
BETA_GRID = (0.0, 0.25, 0.5, 1.0, 2.0)
MAX_UNSAFE_RATE = 0.100
MAX_MEAN_HARM = 0.020  # nats/token
MAX_REMOVAL = 0.20  # fraction of the request's tokens
MAX_LAYERS = 4
N_MEMBERS = GateConfig.n_members
TAU_POINTS = 256  # thresholds searched on validation: every observed score, or this many observed quantiles
SCORER_FORMAT = "interp.gate_scorer/1"
SCORER_FIELDS = (
    Field('schema', '{...}', 'object', '-', 'this table: {field: {shape, dtype, units, doc}}'),
    Field('format', '[]', 'str', '-', 'SCORER_FORMAT: what reads this file'),
    Field('spec', '{layers, attention_layers, retained, pairs}', 'object', '0-based layers', 'the features: representation layers, attention rows, retained-context and pair blocks on or off'),
    Field('scorer', '{params, n_features_in, resid_sd, mean, scale, coef, intercept}', 'object', 'harm: nats/token', 'the fitted SetRiskScorer: per member [n_members, n_features] scaler mean and scale, ridge coef, [n_members] intercept; resid_sd the out-of-bag residual spread'),
    Field('setting', '{k, beta, tau, max_removal, protect_latest, abstain}', 'object', 'tau: unsafe score; max_removal: fraction of request tokens', 'the decision rule selected on validation (tau null: abstain always)'),
    Field('split', '{train, validation, test}', 'object', '-', 'the task_ids of each part'),
    Field('model', '{spec, d_model, proj_dim}', 'object', 'dims', 'the sensor the representations came from and their projection (proj_dim null: not projected)'),
    Field('unit_kinds', '[n_kinds]', 'str', '-', 'the unit kinds the gate may delete'),
)
_ONLINE = ("task_id", "after_step", "layers", "attention_layers", "prompt_tokens", "state", "candidates")


# ------------------------------------------------------------------ supervision and split

def online_view(record: dict[str, Any]) -> dict[str, Any]:
    """What of a DRSR boundary record the sensor sees before the next output: the one source of every feature."""
    missing = [k for k in _ONLINE if k not in record]
    if missing:
        raise ValueError(f"{record.get('task_id')}@{record.get('after_step')}: record lacks {', '.join(missing)} "
                         "(parts of an older interp drsr: delete its parts folder and re-run interp drsr)")
    return {k: record[k] for k in _ONLINE}


@dataclass
class Supervision:
    """One row per (boundary, captured candidate set): the labels and where its features come from."""

    views: list[dict[str, Any]]  # per boundary: online_view
    boundary: np.ndarray  # [n] int: index into views
    task: np.ndarray  # [n] str
    members: list[list[int]]  # per row: indices into its boundary's candidates
    harm: np.ndarray  # [n] nats/token
    unsafe: np.ndarray  # [n] bool: harm > threshold
    tokens_removed: np.ndarray  # [n] tokens of the request removed (exact, from the renders)
    singles: list[dict[int, float]]  # per boundary: candidate index -> singleton harm
    threshold: float = UNSAFE

    @property
    def size(self) -> np.ndarray:
        """Set sizes [n]."""
        return np.array([len(m) for m in self.members], int)

    def rows_of(self, tasks: Sequence[str]) -> np.ndarray:
        """Row indices of the given trajectories."""
        return np.flatnonzero(np.isin(self.task, list(tasks)))


def supervision(records: Sequence[dict[str, Any]], unsafe: float = UNSAFE) -> Supervision:
    """The supervision rows of DRSR boundary records (skipped boundaries left out)."""
    views: list[dict[str, Any]] = []
    singles: list[dict[int, float]] = []
    members: list[list[int]] = []
    bidx: list[int] = []
    task: list[str] = []
    harm: list[float] = []
    removed: list[int] = []
    for rec in (r for r in records if not r.get("skipped")):
        view = online_view(rec)
        index = {tuple(c["unit"]): j for j, c in enumerate(view["candidates"])}
        i = len(views)
        views.append(view)
        singles.append({index[tuple(s["members"][0])]: float(s["harm"]) for s in rec["sets"]
                        if len(s["members"]) == 1 and tuple(s["members"][0]) in index})
        for s in rec["sets"]:
            ms = [tuple(m) for m in s["members"]]
            if ms and all(m in index for m in ms):
                bidx.append(i)
                task.append(rec["task_id"])
                members.append([index[m] for m in ms])
                harm.append(float(s["harm"]))
                removed.append(int(s["tokens_removed"]))
    h = np.array(harm, float)
    return Supervision(views, np.array(bidx, int), np.array(task, dtype=object), members, h, h > unsafe,
                       np.array(removed, int), singles, unsafe)


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


# ------------------------------------------------------------------ features

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


def candidate_features(view: dict[str, Any], spec: FeatureSpec) -> np.ndarray:
    """Per candidate features ``[n_candidates, F]`` (module docstring) of one boundary's online view."""
    cands = view["candidates"]
    if not cands:
        return np.zeros((0, 0))
    li = [view["layers"].index(x) for x in spec.layers]
    ai = [view["attention_layers"].index(x) for x in spec.attention_layers]
    reps = np.array([c["rep"] for c in cands], float)[:, li]  # [n, L, d]
    state = np.array(view["state"], float)[li]  # [L, d]
    b = view["after_step"]
    parts = [reps.reshape(len(cands), -1), (reps * state).reshape(len(cands), -1),
             np.abs(reps - state).reshape(len(cands), -1), _cos(reps, state)]
    steps = np.array([c["unit"][1] for c in cands], float)
    tokens = np.array([c["n_tokens"] for c in cands], float)
    kinds = np.array([[c["unit"][0] == k for k in UNIT_KINDS] for c in cands], float)
    att = np.array([[c["attention"][i] for i in ai] for c in cands], float).reshape(len(cands), len(ai), -1)
    parts += [kinds, (b - steps)[:, None], (steps / b)[:, None], np.log1p(tokens)[:, None],
              att.mean(-1), att.max(-1) if att.size else att.mean(-1), att.mean(-1) / tokens[:, None]]
    return np.concatenate(parts, axis=1)


def _pair_features(view: dict[str, Any], spec: FeatureSpec, ms: Sequence[int]) -> np.ndarray:
    li = [view["layers"].index(x) for x in spec.layers]
    cands = view["candidates"]
    rows = []
    for i, j in itertools.combinations(ms, 2):
        ri, rj = (np.array(cands[k]["rep"], float)[li] for k in (i, j))
        ui, uj = cands[i]["unit"], cands[j]["unit"]
        rows.append(np.concatenate([(ri * rj).ravel(), _cos(ri, rj),
                                    [float(ui[1] == uj[1]), abs(ui[1] - uj[1]), float(ui[0] == uj[0])]]))
    width = len(li) * (len(cands[ms[0]]["rep"][0]) + 1) + 3
    return np.concatenate([np.mean(rows, 0) if rows else np.zeros(width), [float(len(rows))]])


def set_features(view: dict[str, Any], cand: np.ndarray, ms: Sequence[int], spec: FeatureSpec) -> np.ndarray:
    """The features of deleting candidates ``ms`` at one boundary (``cand``: its :func:`candidate_features`)."""
    units = [tuple(c["unit"]) for c in view["candidates"]]
    member = cand[list(ms)]
    parts = [member.mean(0), member.max(0)]
    if spec.retained:
        left = [k for k, u in enumerate(units) if not any(units_overlap(u, units[m]) for m in ms)]
        parts.append(cand[left].mean(0) if left else np.zeros(cand.shape[1]))
    if spec.pairs:
        parts.append(_pair_features(view, spec, ms))
    span = float(sum(view["candidates"][m]["n_tokens"] for m in ms))
    parts.append(np.array([len(ms), np.log1p(span), span / view["prompt_tokens"]]))
    return np.concatenate(parts)


def feature_matrix(sup: Supervision, rows: np.ndarray, spec: FeatureSpec) -> np.ndarray:
    """Set features ``[len(rows), dim]`` of supervision rows."""
    cache: dict[int, np.ndarray] = {}
    out = []
    for r in rows:
        bi = int(sup.boundary[r])
        if bi not in cache:
            cache[bi] = candidate_features(sup.views[bi], spec)
        out.append(set_features(sup.views[bi], cache[bi], sup.members[r], spec))
    return np.array(out, float)


# ------------------------------------------------------------------ scorer

def _normal_sf(z: np.ndarray) -> np.ndarray:
    return 0.5 * np.vectorize(math.erfc)(z / math.sqrt(2.0))


class SetRiskScorer(RegressorMixin, BaseEstimator):
    """Bootstrap ensemble of StandardScaler + RidgeCV: predicted harm (mean), unsafe score and its uncertainty
    (module docstring); scikit-learn compatible (fit/predict, get_params, clone)."""

    def __init__(self, n_members: int = N_MEMBERS, unsafe: float = UNSAFE, seed: int = 0) -> None:
        self.n_members = n_members
        self.unsafe = unsafe
        self.seed = seed

    def fit(self, X: Any, y: Any) -> SetRiskScorer:
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
        check_is_fitted(self, "coef_")
        X = validate_data(self, X, dtype=float, reset=False)  # refuses another number of features
        return np.einsum("mnp,mp->mn", (X[None] - self.mean_[:, None]) / self.scale_[:, None], self.coef_) + \
            self.intercept_[:, None]

    def predict(self, X: Any) -> np.ndarray:
        """Predicted harm [n] (nats/token): the members' mean."""
        return self._members(X).mean(0)

    def predict_risk(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
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


def valid_rows(sup: Supervision, rows: np.ndarray, setting: GateSetting) -> np.ndarray:
    """Which of ``rows`` are structurally valid gate candidates (size, kinds, recency, budget)."""
    ok = []
    for r in rows:
        view = sup.views[sup.boundary[r]]
        units = [view["candidates"][m]["unit"] for m in sup.members[r]]
        ok.append(len(units) <= setting.k and all(u[0] in GATE_KINDS for u in units)
                  and not (setting.protect_latest and any(u[1] == view["after_step"] for u in units))
                  and sup.tokens_removed[r] <= setting.max_removal * view["prompt_tokens"])
    return np.array(ok, bool)


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
    """One split's valid candidate rows with their gate scores."""

    rows: np.ndarray  # supervision rows (valid ones)
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
    saving = sup.tokens_removed[scored.rows].astype(float)
    out: dict[int, int | None] = {}
    for bi, mine in scored.groups().items():
        pick = choose(score[mine], saving[mine], setting.tau, setting.abstain)
        out[bi] = None if pick is None else int(scored.rows[mine[pick]])
    return out


def gate_metrics(sup: Supervision, chosen: dict[int, int | None]) -> dict[str, Any]:
    """Coverage (fraction of boundaries deleting), mean direct removal (fraction of request tokens; 0 when
    abstaining), empirical unsafe rate and mean exact harm of the deletions made (None without one)."""
    picked = [r for r in chosen.values() if r is not None]
    removal = [0.0 if r is None else sup.tokens_removed[r] / sup.views[bi]["prompt_tokens"] for bi, r in chosen.items()]
    return {"coverage": len(picked) / len(chosen) if chosen else None,
            "removal": float(np.mean(removal)) if removal else None,
            "unsafe_rate": float(np.mean(sup.unsafe[picked])) if picked else None,
            "mean_harm": float(np.mean(sup.harm[picked])) if picked else None,
            "n_boundaries": len(chosen), "n_deleted": len(picked)}


def admissible(m: dict[str, Any], smooth: bool = True) -> bool:
    """The selection constraints: no deletion, or the unsafe rate (add-one smoothed unless ``smooth`` is off)
    and the mean harm of the deletions within their limits."""
    n = m["n_deleted"]
    if not n:
        return True
    rate = (m["unsafe_rate"] * n + 1) / (n + 2) if smooth else m["unsafe_rate"]
    return rate <= MAX_UNSAFE_RATE and m["mean_harm"] <= MAX_MEAN_HARM


def score_split(sup: Supervision, tasks: Sequence[str], scorer: SetRiskScorer, spec: FeatureSpec,
                k_max: int = max(K_GRID)) -> Scored:
    """Gate scores of the valid candidate sets (size <= k_max) of the given trajectories."""
    rows = sup.rows_of(tasks)
    rows = rows[valid_rows(sup, rows, GateSetting(k=k_max))] if len(rows) else rows
    bounds = np.unique(sup.boundary[sup.rows_of(tasks)])
    if not len(rows):
        return Scored(rows, np.zeros(0), np.zeros(0), bounds, np.zeros(0, int))
    risk, unc = scorer.predict_risk(feature_matrix(sup, rows, spec))
    return Scored(rows, risk, unc, bounds, sup.boundary[rows])


def restrict(sup: Supervision, scored: Scored, k: int) -> Scored:
    """The scored rows of sets of at most ``k`` units."""
    keep = sup.size[scored.rows] <= k
    return Scored(scored.rows[keep], scored.risk[keep], scored.uncertainty[keep], scored.boundaries,
                  sup.boundary[scored.rows[keep]])


def tau_grid(score: np.ndarray, n: int = TAU_POINTS) -> list[float]:
    """Thresholds from observed scores: just above each (at most ``n``, evenly spaced observed quantiles)."""
    if len(score) > n:
        score = np.quantile(score, np.linspace(0, 1, n), method="inverted_cdf")
    return sorted({float(np.nextafter(s, np.inf)) for s in score})


def select(sup: Supervision, val: Scored, k_grid: Sequence[int] = K_GRID, beta_grid: Sequence[float] = BETA_GRID,
           abstain: bool = True) -> tuple[GateSetting, dict[str, Any]]:
    """The admissible (K, beta, tau) with the largest mean direct removal on validation (module docstring), and
    its validation metrics."""
    best: tuple[tuple[float, ...], GateSetting, dict[str, Any]] | None = None
    for k in sorted(k_grid):
        mine = restrict(sup, val, k)
        for beta in sorted(beta_grid):
            score = mine.risk + beta * mine.uncertainty
            for tau in [None, *tau_grid(score)]:
                setting = GateSetting(k=k, beta=beta, tau=tau, abstain=abstain)
                m = gate_metrics(sup, decisions(sup, mine, setting))
                if not admissible(m):
                    continue
                key = (-(m["removal"] or 0.0), k, beta, -1.0 if tau is None else tau)
                if best is None or key < best[0]:
                    best = (key, setting, m)
    if best is None:  # without abstention nothing may be admissible: the smallest forced setting
        setting = GateSetting(k=min(k_grid), beta=min(beta_grid), tau=None, abstain=abstain)
        return setting, gate_metrics(sup, decisions(sup, restrict(sup, val, setting.k), setting))
    return best[1], best[2]


# ------------------------------------------------------------------ the scorer file and the online gate

@dataclass
class GateModel:
    """A trained gate: its features, scorer and decision rule, the split it was trained on and the sensor's
    representation settings (projection) it reads."""

    spec: FeatureSpec
    scorer: SetRiskScorer
    setting: GateSetting
    split: dict[str, list[str]] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)  # spec, d_model, proj_dim (null: not projected)
    unit_kinds: tuple[str, ...] = GATE_KINDS

    def to_json(self) -> dict[str, Any]:
        """The scorer file's document (``SCORER_FORMAT``)."""
        return {"schema": schema_dict(SCORER_FIELDS), "format": SCORER_FORMAT, "spec": asdict(self.spec), "scorer": self.scorer.to_json(),
                "setting": asdict(self.setting), "split": self.split, "model": self.model,
                "unit_kinds": list(self.unit_kinds)}

    def save(self, path: Path) -> Path:
        """Write the scorer file atomically."""
        atomic_write_json(Path(path), self.to_json())
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
                       SetRiskScorer.from_json(doc["scorer"]), GateSetting(**doc["setting"]), doc["split"],
                       doc["model"], tuple(doc["unit_kinds"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: corrupt gate scorer file ({type(exc).__name__}: {exc})") from None


@dataclass
class Decision:
    """What the online gate decided at a boundary: the units deleted (empty: abstained) and why."""

    units: list[Unit]
    score: float | None
    tokens_removed: int
    n_valid: int
    n_feasible: int


class SetGate:
    """The online gate: ``gate.decide(traj, b)`` (or ``gate(traj, b)``, a ``drsr_gate`` condition's parameter)
    scores every valid set from one forward of the render at b and returns the set to delete."""

    def __init__(self, model: GateModel, sensor: Any) -> None:
        d = model.model.get("d_model")
        if d is not None and d != sensor.d_model:
            raise ValueError(f"the gate was trained on a model with d_model {d}; this sensor has {sensor.d_model}")
        self.model = model
        self.sensor = sensor
        self.proj = projection(sensor.d_model, model.model["proj_dim"]) if model.model.get("proj_dim") else None

    def view(self, traj: Trajectory, b: int, units: Sequence[Unit]) -> dict[str, Any]:
        """The online view of boundary b (the same fields a DRSR record's capture holds), from one forward."""
        from interp.sensor.forward import run_plan

        prompt = render(traj, b, self.sensor.tokenizer)
        spec = self.model.spec
        cap = capture_plan(prompt, prompt.n_tokens, units, sorted(set(spec.layers)), list(spec.attention_layers))
        cap.outputs = run_plan(self.sensor, prompt.input_ids, cap.plan)
        return {"task_id": traj.task_id, "after_step": b, **captured(cap, self.proj)}

    def decide(self, traj: Trajectory, b: int) -> Decision:
        """The set the gate deletes at boundary b (``units`` empty: it abstains)."""
        s = self.model.setting
        kinds = [k for k in self.model.unit_kinds if k in GATE_KINDS]
        units = [u for u in history_units(traj, b, kinds) if not (s.protect_latest and u[1] == b)]
        if not units or (s.tau is None and s.abstain):
            return Decision([], None, 0, 0, 0)
        view = self.view(traj, b, units)
        cand = candidate_features(view, self.model.spec)
        sets = [c for k in range(1, s.k + 1) for c in itertools.combinations(range(len(units)), k)
                if not any(units_overlap(units[i], units[j]) for i, j in itertools.combinations(c, 2))]
        x = np.array([set_features(view, cand, c, self.model.spec) for c in sets])
        risk, unc = self.model.scorer.predict_risk(x)
        score = risk + s.beta * unc
        full = view["prompt_tokens"]

        def saving(i: int) -> int | None:  # tokens removed, or None when the set empties a step or breaks the cap
            edited, b2, _ = delete_units(traj, b, [units[j] for j in sets[i]])
            n = full - render(edited, b2, self.sensor.tokenizer).n_tokens
            return n if b2 == b and n <= s.max_removal * full else None

        feasible = [i for i in np.argsort(score, kind="stable") if s.tau is not None and score[i] < s.tau]
        measured = [(i, n) for i in feasible if (n := saving(i)) is not None]
        if not measured and not s.abstain:  # forced: the lowest-score valid set
            measured = next(([(i, n)] for i in np.argsort(score, kind="stable") if (n := saving(i)) is not None), [])
        if not measured:
            return Decision([], None, 0, len(sets), 0)
        i, n = max(measured, key=lambda m: m[1])  # largest saving; ties: the first, i.e. the lower score
        return Decision([units[j] for j in sets[i]], float(score[i]), n, len(sets), len(measured))

    def __call__(self, traj: Trajectory, b: int) -> list[Unit] | None:
        """The units to delete at b, or None to abstain (the ``SetGate`` protocol of ``drsr_gate``)."""
        return self.decide(traj, b).units or None
