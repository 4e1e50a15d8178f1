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
from interp.data.deletions import DRSR_UNIT_KINDS, UNIT_KINDS, parse_unit_kinds
from interp.sensor.limits import DEFAULT_MAX_TOKENS

if TYPE_CHECKING:
    from interp.data.trajectory import Trajectory
    from patching.gate import Calibration

PATCH_SITES = ("resid_pre", "attn_out", "mlp_out")
PATCH_METHODS = ("fast", "reference")
GATE_SCORERS = ("ridge", "set-mlp")  # patching.gate.make_scorer: the bootstrap ridge ensemble, DRSR's set model
GATE_RULES = ("bound", "empirical")  # patching.gate.select: the finite-sample bound, DRSR's empirical rule
N_MEMBERS = 8  # the ridge ensemble's bootstrap members when none are given (set-mlp: patching.gate_mlp.N_MEMBERS)


def _count(name: str, value: object, low: int) -> None:
    """ValueError naming ``name`` unless ``value`` is an int >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}: must be an integer >= {low}, got {value!r}")


def _nonnegative(name: str, value: object, unit: str) -> None:
    """ValueError naming ``name`` unless ``value`` is a finite number >= 0."""
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name}: must be a finite number >= 0 ({unit}), got {value!r}")


def _names(name: str, value: object) -> tuple[str, ...] | None:
    """``value`` (None, a comma list or a sequence of names) as a tuple of non-blank names; ValueError naming
    ``name`` otherwise."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) for v in items):
        raise ValueError(f"{name}: must be a comma list of names, got {value!r}")
    names = tuple(v.strip() for v in items if v.strip())
    if not names:
        raise ValueError(f"{name}: must name at least one item, got {value!r}")
    return names


def _boundary_keys(boundaries: tuple[str, ...] | None, trajectories: Sequence[Trajectory]) -> list[str]:
    """``boundaries`` checked against ``trajectories`` (ValueError naming the field), or the middle boundary of
    each trajectory (``patching.harm``'s rules)."""
    from patching.harm import check_boundaries, default_boundaries  # harm reads its defaults from here

    if boundaries is None:
        return default_boundaries(trajectories)
    try:
        return check_boundaries(list(boundaries), trajectories)
    except ValueError as exc:
        raise ValueError(f"boundaries: {exc}") from None


def _units(value: object) -> tuple[str, ...]:
    """Unit kinds (a comma list or names) normalised by ``parse_unit_kinds``; ValueError naming ``units``."""
    try:
        return tuple(parse_unit_kinds(value))  # type: ignore[arg-type]  # checked there, message names the kind
    except (ValueError, TypeError) as exc:
        raise ValueError(f"units: {exc}") from None


@dataclass(frozen=True)
class PatchConfig:
    """KL Repair (``interp patch``): the deletion condition giving P_del, the site kind patched and the layers
    (``all`` | ``full_attention`` | ``0,4,8`` | ``1based:4,8,32``, resolved on the model), the method, how many
    final positions are patched, the trajectories (None: all) and the token limit of a boundary's render (longer
    ones are skipped and listed). The noise rule (a boundary is kept when d exceeds ``NOISE_FACTOR`` times its
    measured noise) is ``patching.kl_repair``'s."""

    analysis: ClassVar[str] = "kl_repair"
    precision: ClassVar[str] = "float32"

    condition: str = "delete_all_reasoning"
    site: str = "resid_pre"
    layers: str = "all"
    method: str = "fast"
    positions: int = 1
    task_ids: tuple[str, ...] | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS

    def __post_init__(self) -> None:
        check_condition_name(self.condition)  # its message names the condition
        if self.site not in PATCH_SITES:
            raise ValueError(f"site {self.site!r}: use {', '.join(PATCH_SITES[:-1])} or {PATCH_SITES[-1]}")
        if not isinstance(self.layers, str) or not self.layers.strip():
            raise ValueError(f"layers: must be a layer spec (all, full_attention, 0,4,8), got {self.layers!r}")
        # its syntax and range are checked on the model (interp.extraction.batch.parse_layers, by the stage; the
        # CLI checks the syntax before the model loads): patching does not import the extraction layer
        if self.method not in PATCH_METHODS:
            raise ValueError(f"method {self.method!r}: use {' or '.join(PATCH_METHODS)}")
        _count("positions", self.positions, 1)
        object.__setattr__(self, "task_ids", _names("task_ids", self.task_ids))
        _count("max_tokens", self.max_tokens, 1)

    def check_task_ids(self, trajectories: Iterable[Trajectory]) -> tuple[str, ...] | None:
        """``task_ids`` after checking each names one of ``trajectories`` (ValueError naming the field)."""
        known = {t.task_id for t in trajectories}
        unknown = [k for k in self.task_ids or () if k not in known]
        if unknown:
            raise ValueError(f"task_ids: {', '.join(unknown)} not in the trajectory file")
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

    boundaries: tuple[str, ...] | None = None
    max_k: int = 4
    budget: int = 10
    seed: int = 0
    units: tuple[str, ...] = UNIT_KINDS
    margin: float = 0.020
    unsafe: float = 0.020
    relation_layer: int | None = None
    proj_dim: int = 64
    n_boot: int = 1000
    max_tokens: int = DEFAULT_MAX_TOKENS

    def __post_init__(self) -> None:
        object.__setattr__(self, "boundaries", _names("boundaries", self.boundaries))
        _count("max_k", self.max_k, 1)
        _count("budget", self.budget, 0)
        _count("seed", self.seed, 0)
        object.__setattr__(self, "units", _units(self.units))
        _nonnegative("margin", self.margin, "nats/token")
        _nonnegative("unsafe", self.unsafe, "nats/token")
        if self.relation_layer is not None:
            _count("relation_layer", self.relation_layer, 0)
        _count("proj_dim", self.proj_dim, 0)
        _count("n_boot", self.n_boot, 1)
        _count("max_tokens", self.max_tokens, 1)

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

    boundaries: tuple[str, ...] | None = None
    max_k: int = DrsrConfig.max_k
    budget: int = DrsrConfig.budget
    seed: int = DrsrConfig.seed
    units: tuple[str, ...] = DRSR_UNIT_KINDS
    margin: float = DrsrConfig.margin
    max_tokens: int = DEFAULT_MAX_TOKENS

    def __post_init__(self) -> None:
        object.__setattr__(self, "boundaries", _names("boundaries", self.boundaries))
        _count("max_k", self.max_k, 1)
        _count("budget", self.budget, 0)
        _count("seed", self.seed, 0)
        object.__setattr__(self, "units", _units(self.units))
        _nonnegative("margin", self.margin, "nats/token")
        _count("max_tokens", self.max_tokens, 1)

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

    scorer: str = "ridge"
    seed: int = 0
    n_members: int | None = None
    unsafe: float = DrsrConfig.unsafe
    n_boot: int = 1000
    rule: str = "bound"
    alpha: float = 0.100
    delta: float = 0.100
    folds: int = 5
    smooth: bool = True

    def __post_init__(self) -> None:
        if self.scorer not in GATE_SCORERS:
            raise ValueError(f"scorer: unknown scorer {self.scorer!r}; known: {', '.join(GATE_SCORERS)}")
        _count("seed", self.seed, 0)
        if self.n_members is not None:
            _count("n_members", self.n_members, 1)
        _nonnegative("unsafe", self.unsafe, "nats/token")
        _count("n_boot", self.n_boot, 0)  # 0: no CIs
        if self.rule not in GATE_RULES:
            raise ValueError(f"rule: must be one of {', '.join(GATE_RULES)}; got {self.rule!r}")
        for name in ("alpha", "delta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
                raise ValueError(f"{name}: must be a number in (0, 1); got {value!r}")
        _count("folds", self.folds, 2)
        if not isinstance(self.smooth, bool):
            raise ValueError(f"smooth: must be true or false; got {self.smooth!r}")

    def calibration(self) -> Calibration:
        """The gate's calibration rule of this config (``patching.gate.Calibration``)."""
        from patching.gate import Calibration

        return Calibration(self.rule, float(self.alpha), float(self.delta), self.folds, self.smooth)
