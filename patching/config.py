"""Settings of the patching analyses, one frozen config per analysis, checked on construction: the CLI, the sweep,
the demo, notebooks and ``interp.pipelines.stages`` build the same object and get the same error for the same bad
value.

Each config is the one home of its analysis's study defaults (the field defaults: DRSR's set size, budget, margin
and unsafe threshold are written here and nowhere else; the modules that compute read them from here) and of its
**precision**: ``precision`` is the dtype ``--dtype auto`` loads the sensor in on CUDA for this analysis (float32
off CUDA for every analysis), ``analysis`` the registry's name for it (``interp.reporting.analyses``).

Each error is a ``ValueError`` whose message starts with the field's name (``positions must be ...``), so the
CLI's ``build()`` (``interp.pipelines.cli.common``) names the option (``--positions``).

Why float32 for all three model analyses (the precision table of benchmarks/RESULTS.md, "## Precision"): they read
small differences of distributions, and a half-precision layer stack moves those by as much as the effects measured
(KL Repair's d of a few hundredths of a nat with a bfloat16 noise of ~1e-4..1e-3 nats vs ~1e-7 in float32, per-layer
mean Repair moved by up to 0.2 on the tiny model; harm pairs ordered at a margin of 0.02 nats/token).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from interp.data.conditions import check_condition_name
from interp.params import (LAYERS_NOTE, N_BOOT, Check, ConfigError, Flag, Integer, Items, Maybe, Options, Real, Text,
                           field_of, param, validate)
from interp.data.deletions import DRSR_UNIT_KINDS, UNIT_KINDS, parse_unit_kinds
from interp.sensor.limits import DEFAULT_MAX_TOKENS

if TYPE_CHECKING:
    from interp.data.trajectory import Trajectory
    from patching.gate import Calibration

PATCH_SITES = ("resid_pre", "attn_out", "mlp_out")
PATCH_METHODS = ("fast", "reference", "attribution")
GATE_SCORERS = ("ridge", "set-mlp")  # patching.gate.make_scorer: the bootstrap ridge ensemble, DRSR's set model
GATE_RULES = ("bound", "empirical")  # patching.gate.select: the finite-sample bound, DRSR's empirical rule
N_MEMBERS = 8  # the ridge ensemble's bootstrap members when none are given (set-mlp: patching.gate_mlp.N_MEMBERS)


def _unit_kinds(value: str) -> None:
    """ValueError with the reason unless ``value`` is one unit kind (``parse_unit_kinds``'s rule)."""
    parse_unit_kinds(value)


UNIT_KIND = Check(_unit_kinds, "a unit kind (" + ", ".join(UNIT_KINDS) + ")")
BOUNDARY = Text("a boundary task_id@b")
TOKEN_LIMIT = Integer(1)
TOKEN_LIMIT_HELP = "Boundaries with longer renders are skipped and recorded, never truncated."


def _boundary_keys(boundaries: tuple[str, ...] | None, trajectories: Sequence[Trajectory]) -> list[str]:
    """``boundaries`` checked against ``trajectories`` (ValueError naming the field), or the middle boundary of
    each trajectory (``patching.harm``'s rules)."""
    from patching.harm import check_boundaries, default_boundaries  # harm reads its defaults from here

    if boundaries is None:
        return default_boundaries(trajectories)
    try:
        return check_boundaries(list(boundaries), trajectories)
    except ValueError as exc:
        raise ConfigError("boundaries", str(exc)) from None


@dataclass(frozen=True)
class NoiseRule:
    """KL Repair's noise rule, from :class:`PatchConfig`: keep a boundary when ``d > max(min_kl, factor x noise)``;
    ``d_error = d_error_factor x noise`` bounds d's error against float64 (``patching.kl_repair``)."""

    factor: float
    d_error_factor: float
    min_kl: float

    def threshold(self, noise: float) -> float:
        """The d a boundary must exceed to be kept (``min_kl`` when the noise was not measured)."""
        return max(self.min_kl, self.factor * noise) if math.isfinite(noise) else self.min_kl


@dataclass(frozen=True)
class PatchConfig:
    """KL Repair (``interp patch``): the deletion condition giving P_del, the site kind patched and the layers
    (resolved on the model by the stage), the method (``attribution``: ``patching.attribution``'s first-order map
    with its exact checks, ``exact_sites`` of them at sampled history positions), how many final positions are
    patched, the trajectories (None: all) and the token limit of a boundary's render (longer ones are skipped and
    listed), and the noise rule (:attr:`noise_rule`: a boundary is kept when d exceeds ``max(min_kl, noise_factor x
    its measured noise)``; d's recorded error bound is ``d_error_factor x noise``; ``patching.kl_repair``'s module
    docstring says why)."""

    analysis: ClassVar[str] = "kl_repair"
    precision: ClassVar[str] = "float32"

    condition: str = param("delete_all_reasoning", Check(check_condition_name, "a condition name"),
                           "Deletion condition giving P_del.")
    site: str = param("resid_pre", Options(PATCH_SITES), "Site kind patched.")
    layers: str = param("all", Text("a layer spec (all, full_attention, 0,4,8 or 1based:4,8,32)"),
                        "Layers patched: all, full_attention, a comma list (0,4,8) or 1based:4,8,32. " + LAYERS_NOTE)
    method: str = param("fast", Options(PATCH_METHODS), "fast: the full-history prefix cached once per boundary; "
                        "reference: one plain forward per site (the slow check); attribution: the first-order "
                        "estimate at every layer and history position (attribution.json) beside the exact values.")
    positions: int = param(1, Integer(1), "Final positions patched (the boundary token and the ones before it).",
                           "tokens")
    task_ids: tuple[str, ...] | None = param(None, Maybe(Items(Text("a task id"), unique=True), "every trajectory"),
                                             "Trajectories patched (comma list of task ids).")
    max_tokens: int = param(DEFAULT_MAX_TOKENS, TOKEN_LIMIT, TOKEN_LIMIT_HELP, "tokens")
    n_boot: int = param(N_BOOT, Integer(0), "Task-bootstrap resamples of the per-layer Repair CIs (0: none).")
    noise_factor: float = param(10.0, Real(0, low_open=True), "A boundary is kept when d exceeds this many times "
                                "its measured noise (and min_kl).")
    d_error_factor: float = param(20.0, Real(0, low_open=True), "d's recorded error bound against float64, in "
                                  "multiples of the measured noise (validated: the largest ratio seen is 11.2 on the "
                                  "tiny model, 14 on SmolLM2).")
    min_kl: float = param(1e-6, Real(0), "Floor of the exclusion threshold on d.", "nats")
    exact_sites: int = param(8, Integer(0), "Method attribution: history sites per boundary also patched exactly "
                             "(the oracle; one forward each).", "sites")

    def __post_init__(self) -> None:
        validate(self)  # the layer spec's syntax and range are checked on the model, by the stage

    @property
    def noise_rule(self) -> NoiseRule:
        """The exclusion rule and d's error bound these fields set (what ``patching.kl_repair`` applies)."""
        return NoiseRule(self.noise_factor, self.d_error_factor, self.min_kl)

    def check_task_ids(self, trajectories: Iterable[Trajectory]) -> tuple[str, ...] | None:
        """``task_ids`` after checking each names one of ``trajectories`` (ValueError naming the field)."""
        known = {t.task_id for t in trajectories}
        unknown = [k for k in self.task_ids or () if k not in known]
        if unknown:
            raise ConfigError("task_ids", f"{', '.join(unknown)} not in the trajectory file")
        return self.task_ids


@dataclass(frozen=True)
class DrsrConfig:
    """DRSR's mechanistic appendix (``interp drsr``) and, through :class:`HarmConfig`, set-level harm: the
    boundaries (``task_id@b``; None: the middle boundary of each trajectory), the largest set size (DRSR reports
    sets up to 4 units), sampled sets per size >= 2, the sampling seed, the unit kinds deleted (default: all four
    kinds; granularity needs ``step`` and a block kind), the pair-ordering margin (nats/token; DRSR's) and the
    unsafe-harm threshold (nats/token; the toolkit's assumption: DRSR states 0.020 as its pair margin and mean-harm
    limit, not as an unsafe cut), the layer of the margin curve and of semantic overlap (None: the middle
    layer), the stored representation size (seeded Gaussian projection; 0: none), task-bootstrap resamples and the
    token limit of a boundary's render."""

    analysis: ClassVar[str] = "drsr"
    precision: ClassVar[str] = "float32"

    boundaries: tuple[str, ...] | None = param(None, Maybe(Items(BOUNDARY, unique=True),
                                                           "the middle boundary of each trajectory"),
                                               "Boundaries task_id@b (comma list).")
    max_k: int = param(4, Integer(1), "Largest set size (DRSR reports sets up to 4 units).", "units")
    budget: int = param(10, Integer(0), "Sampled sets per size >= 2 (singletons: all).", "sets")
    seed: int = param(0, Integer(0), "Seed of the set sampling.")
    units: tuple[str, ...] = param(UNIT_KINDS, Items(UNIT_KIND, unique=True),
                                   "Unit kinds deleted (comma list; granularity needs step and a block kind).")
    margin: float = param(0.020, Real(0), "Pair-ordering margin (DRSR's).", "nats/token")
    unsafe: float = param(0.020, Real(0), "Unsafe-harm threshold (the toolkit's assumption).", "nats/token")
    relation_layer: int | None = param(None, Maybe(Integer(0), "the middle layer"),
                                       "Layer of the margin curve and of semantic overlap.")
    proj_dim: int = param(64, Integer(0), "Stored representation size (seeded Gaussian projection; 0: none).")
    n_boot: int = param(N_BOOT, Integer(1), "Task-bootstrap resamples of the CIs.")
    max_tokens: int = param(DEFAULT_MAX_TOKENS, TOKEN_LIMIT, TOKEN_LIMIT_HELP, "tokens")

    def __post_init__(self) -> None:
        validate(self)

    def boundary_keys(self, trajectories: Sequence[Trajectory]) -> list[str]:
        """The ``task_id@b`` boundaries run on ``trajectories``: ``boundaries`` checked, or the default."""
        return _boundary_keys(self.boundaries, trajectories)


@dataclass(frozen=True)
class HarmConfig:
    """Set-level deletion harm (``interp harm``): the boundaries (``task_id@b``; None: the middle boundary of each
    trajectory), the largest set size, sampled sets per size >= 2, the sampling seed (DRSR's defaults,
    :class:`DrsrConfig`), the unit kinds deleted (default DRSR's: reasoning, observations, tool exchanges), the
    pair-ordering margin (nats/token) and the token limit of a boundary's render."""

    analysis: ClassVar[str] = "harm"
    precision: ClassVar[str] = DrsrConfig.precision  # harm is DRSR's set-level measurement

    boundaries: tuple[str, ...] | None = field_of(DrsrConfig, "boundaries")
    max_k: int = field_of(DrsrConfig, "max_k")
    budget: int = field_of(DrsrConfig, "budget")
    seed: int = field_of(DrsrConfig, "seed")
    units: tuple[str, ...] = param(DRSR_UNIT_KINDS, Items(UNIT_KIND, unique=True),
                                   "Unit kinds deleted (comma list; default DRSR's block kinds).")
    margin: float = field_of(DrsrConfig, "margin")
    max_tokens: int = field_of(DrsrConfig, "max_tokens")

    def __post_init__(self) -> None:
        validate(self)

    def boundary_keys(self, trajectories: Sequence[Trajectory]) -> list[str]:
        """The ``task_id@b`` boundaries run on ``trajectories``: ``boundaries`` checked, or the default."""
        return _boundary_keys(self.boundaries, trajectories)


@dataclass(frozen=True)
class GateConfig:
    """DRSR's set-risk gate (``interp gate train/eval``, no model forward): the scorer kind, the seed of the split
    and the ensemble, the ensemble size (bootstrap members; None: the scorer's own, ``N_MEMBERS`` for ridge), the
    unsafe-harm threshold of the gate's labels (nats/token; the toolkit's assumption, as ``DrsrConfig.unsafe``),
    the task-bootstrap resamples of the held-out metrics, and the calibration (``patching.gate.Calibration``):
    the rule selecting the setting (``GATE_RULES``: "bound", an unsafe rate of deletions <= ``alpha`` with
    confidence ``1 - delta``; "empirical", DRSR's rule), the unsafe-rate limit ``alpha`` (DRSR's 0.10), the
    bound's ``delta``, the task-level ``folds`` of the cross-fitted scoring and whether the empirical rate is
    add-one ``smooth``ed (DRSR states the plain rate)."""

    analysis: ClassVar[str] = "gate"
    precision: ClassVar[str | None] = None  # reads DRSR's parts; runs no model

    scorer: str = param("ridge", Options(GATE_SCORERS), "Set-harm scorer: ridge (a bootstrap ridge ensemble) or "
                        "set-mlp (DRSR's set model).")
    seed: int = param(0, Integer(0), "Seed of the trajectory split and of the ensemble.")
    n_members: int | None = param(None, Maybe(Integer(1), "the scorer's own"), "Ensemble members.")
    unsafe: float = field_of(DrsrConfig, "unsafe")
    n_boot: int = param(N_BOOT, Integer(0), "Task-bootstrap resamples of the held-out metrics (0: no CIs).")
    rule: str = param("bound", Options(GATE_RULES), "Calibration rule: bound (unsafe rate of deletions <= alpha "
                      "with confidence 1 - delta) or empirical (DRSR's rule).")
    alpha: float = param(0.100, Real(0, 1, low_open=True, high_open=True), "Unsafe-rate limit of the gate's "
                         "deletions.", "fraction")
    delta: float = param(0.100, Real(0, 1, low_open=True, high_open=True), "The bound's error probability "
                         "(rule bound).", "probability")
    folds: int = param(5, Integer(2), "Task-level folds of the cross-fitted calibration scores.")
    smooth: bool = param(True, Flag(), "Empirical rule: the add-one smoothed unsafe rate, or DRSR's plain rate.",
                         option="--smooth/--plain-rate")

    def __post_init__(self) -> None:
        validate(self)

    def calibration(self) -> Calibration:
        """The gate's calibration rule of this config (``patching.gate.Calibration``)."""
        from patching.gate import Calibration

        return Calibration(self.rule, float(self.alpha), float(self.delta), self.folds, self.smooth)
