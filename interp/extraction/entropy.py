"""ICLR proxy: mean token predictive entropy (bits) of each reasoning block, online as in the study.

For block tokens ``[s, e)`` of step t in the scorer's input, the score is the
mean over i in ``[s, e)`` of ``H(P(. | tokens < i))`` in bits, read at
position ``i - 1`` (:func:`block_mean_entropy`; the positions a forward must
keep are :func:`entropy_positions`). The scorer's input for step t is what
the study's scorer receives, "the accumulated interaction history and the
current completed step": the render of the history at boundary t, step t's
action and observation included (:func:`scorer_input_tokens`); the forward
runs only to the end of step t's reasoning (the scores are causal, so the
tokens after it change none of them), but the limit counts the whole input.
:class:`EntropyScorer` has three contexts:

- ``online`` (default, the study's method): the history it is given, in which
  the ``iclr`` condition has already compressed steps 1..t-1 (dropped blocks
  are ``[SKIP]``). Successive inputs share long prefixes: the forward for step
  t continues from a cache snapshot at the longest shared prefix of the
  previous input (``interp.sensor.prefix.Resume``: an attention-only model's
  cache is cut back to it; a hybrid's snapshots are taken at the start of
  each reasoning block and at the input's end), so a step costs its new
  tokens plus the previous step's reasoning from its first dropped block on
  (a step that drops nothing: only its new tokens). ``reuse=False`` re-runs
  every input from scratch (the reference).
- ``full`` (a departure from the study, kept for comparison): every block
  under the uncompressed recorded trajectory, one forward over its whole
  render (:func:`block_entropies`, also computed in-forward by
  ``interp.extraction.extract`` with ``block_entropy=True``).
- ``step_only`` (the study's Step Only Entropy ablation): only step t's
  reasoning in context (``interp.data.conditions.step_only_history``, under
  the model's chat template).

A step without reasoning has no block: it gets no row in the tables and no
forward (ICLR leaves it as it is).

An input longer than ``max_tokens`` (or the model's positions; the setting is
``--max-tokens``, see ``interp.extraction.limits`` for 42,000 vs 43,008) is
not scored (``None``): ICLR then leaves the step untouched rather than
truncating, and the table records the input's token count.

Tables: :func:`drop_table` marks, in a table of block entropies (one row per
block), the blocks ICLR drops at ``rho`` (the rule of
``interp.data.conditions.iclr_dropped``; a step's decision depends only on
its own scores, so the rule applied to online scores is the online
condition's decision); :func:`entropy_table` runs the ``iclr`` condition with
a scorer over trajectories and returns that table, with the full-context
scores and decisions beside it for comparison. Its columns
(``DROP_TABLE_FIELDS``; ``iclr_blocks.csv``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``task_id`` | ``[n_blocks]`` | str | - | trajectory |
| ``domain`` | ``[n_blocks]`` | str | - | the trajectory's domain |
| ``context`` | ``[n_blocks]`` | str | - | scorer context of mean_entropy_bits and dropped: online, full or step_only |
| ``step`` | ``[n_blocks]`` | int | step | step t whose reasoning holds the block (1-based) |
| ``block`` | ``[n_blocks]`` | int | - | block index within the step's reasoning (0-based) |
| ``n_tokens`` | ``[n_blocks]`` | int | tokens | tokens of the block in the scorer's input |
| ``input_tokens`` | ``[n_blocks]`` | int or null | tokens | tokens of the scorer's whole input for the step: the render at boundary t, step t's action and observation included (over max_tokens: not scored); null when not recorded |
| ``mean_entropy_bits`` | ``[n_blocks]`` | float or null | bits/token | mean next-token entropy over the block's tokens; null when the step was not scored |
| ``n_blocks_in_step`` | ``[n_blocks]`` | int | blocks | blocks of the step |
| ``scored`` | ``[n_blocks]`` | bool | - | every block of the step has a score (fit the scorer context) |
| ``dropped`` | ``[n_blocks]`` | bool | - | ICLR at rho replaces the block with [SKIP] |
| ``mean_entropy_bits_full`` | ``[n_blocks]`` | float or null | bits/token | the block's score under the full uncompressed trajectory (context full); null when not computed or not scored |
| ``dropped_full`` | ``[n_blocks]`` | bool or null | - | what ICLR at rho drops with full-context scores; null when not computed |

The record beside the table (``TABLE_RECORD_FIELDS``; ``iclr_blocks.json``, written with it by
``interp.pipelines.stages.entropy``): the readers print rho and the token limit from its ``config``.

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``table`` | ``[]`` | str | - | the file name of the per-block CSV this record describes (beside it) |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pandas as pd

from interp.data.conditions import ICLR_RHO, apply_condition, iclr_dropped, step_only_history
from interp.data.render import Rendered, Segment, render
from interp.data.trajectory import Trajectory
from interp.sensor.limits import DEFAULT_MAX_TOKENS, context_limit
from interp.progress import track
from interp.params import Flag, Integer, Options, Real, param, validate
from interp.record import RECORD_FIELDS
from interp.schema import Field, schema_dict
from interp.sensor.forward import Plan, run_plan
from interp.sensor.prefix import Resume
from interp.sensor.protocol import Sensor

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


DROP_TABLE_FIELDS = (  # iclr_blocks.csv, one row per block
    Field("task_id", "[n_blocks]", "str", "-", "trajectory"),
    Field("domain", "[n_blocks]", "str", "-", "the trajectory's domain"),
    Field("context", "[n_blocks]", "str", "-",
          "scorer context of mean_entropy_bits and dropped: online, full or step_only"),
    Field("step", "[n_blocks]", "int", "step", "step t whose reasoning holds the block (1-based)"),
    Field("block", "[n_blocks]", "int", "-", "block index within the step's reasoning (0-based)"),
    Field("n_tokens", "[n_blocks]", "int", "tokens", "tokens of the block in the scorer's input"),
    Field("input_tokens", "[n_blocks]", "int or null", "tokens",
          "tokens of the scorer's whole input for the step: the render at boundary t, step t's action and "
          "observation included (over max_tokens: not scored); null when not recorded"),
    Field("mean_entropy_bits", "[n_blocks]", "float or null", "bits/token",
          "mean next-token entropy over the block's tokens; null when the step was not scored"),
    Field("n_blocks_in_step", "[n_blocks]", "int", "blocks", "blocks of the step"),
    Field("scored", "[n_blocks]", "bool", "-", "every block of the step has a score (fit the scorer context)"),
    Field("dropped", "[n_blocks]", "bool", "-", "ICLR at rho replaces the block with [SKIP]"),
    Field("mean_entropy_bits_full", "[n_blocks]", "float or null", "bits/token",
          "the block's score under the full uncompressed trajectory (context full); null when not computed or "
          "not scored"),
    Field("dropped_full", "[n_blocks]", "bool or null", "-",
          "what ICLR at rho drops with full-context scores; null when not computed"),
)


TABLE_RECORD_FIELDS = (  # iclr_blocks.json (the table's name as .json): what made the table beside it
    Field("schema", "{...}", "object", "-", "this table: {field: {shape, dtype, units, doc}}"),
    Field("table", "[]", "str", "-", "the file name of the per-block CSV this record describes (beside it)"),
    *RECORD_FIELDS,
)


def table_record(table: str, made: Mapping[str, Any]) -> dict[str, Any]:
    """The record written beside a per-block table (``TABLE_RECORD_FIELDS``): its name and what made it
    (``interp.record.record`` of the ``IclrConfig``: rho, context, max_tokens, and the model)."""
    return {"schema": schema_dict(TABLE_RECORD_FIELDS), "table": table, **made}


def entropy_positions(spans: Iterable[Segment]) -> list[int]:
    """Sorted positions whose next-token entropy the blocks ``spans`` need (``i - 1`` for each token i)."""
    return sorted({i - 1 for s in spans for i in range(s.start, s.end)})


def block_mean_entropy(entropy: Mapping[int, float], span: Segment) -> float:
    """Mean over the block's tokens i in ``[start, end)`` of ``entropy[i - 1]`` (bits)."""
    return sum(entropy[i - 1] for i in range(span.start, span.end)) / span.n_tokens


@dataclass
class BlockScore:
    """Entropy score of one reasoning block."""

    task_id: str
    step: int
    block: int
    n_tokens: int
    mean_entropy_bits: float | None  # None: over the scorer limit
    input_tokens: int = 0  # tokens of the scorer's input for the step


def scorer_input_tokens(history: Trajectory, step: int, tokenizer: PreTrainedTokenizerBase) -> int:
    """Tokens the scorer of step ``step`` is given: the render at boundary ``step``, its action and observation
    included (the study's "accumulated interaction history and the current completed step")."""
    return render(history, step, tokenizer).n_tokens


def block_entropies(sensor: Sensor, traj: Trajectory, max_tokens: int = DEFAULT_MAX_TOKENS) -> list[BlockScore]:
    """Full-context scores of every reasoning block of ``traj`` with one forward (see module docstring)."""
    rendered = render(traj, traj.n_steps, sensor.tokenizer)
    limit = context_limit(sensor, max_tokens)
    blocks = rendered.spans("reasoning_block")
    where = {id(s): _step_block(s) for s in blocks}
    ends: dict[int, int] = {}
    for s in blocks:
        ends[where[id(s)][0]] = max(ends.get(where[id(s)][0], 0), s.end)
    inputs = {t: scorer_input_tokens(traj, t, sensor.tokenizer) for t in ends}
    scored = [s for s in blocks if inputs[where[id(s)][0]] <= limit and s.start >= 1]
    end = max((ends[where[id(s)][0]] for s in scored), default=0)
    out_entropy: dict[int, float] = {}
    if scored:
        plan = Plan(entropy=entropy_positions(scored))
        out_entropy = run_plan(sensor, rendered.input_ids[:end], plan).entropy
    return [BlockScore(traj.task_id, *where[id(s)], s.n_tokens,
                       block_mean_entropy(out_entropy, s) if s in scored else None, inputs[where[id(s)][0]])
            for s in blocks]


def _step_block(span: Segment) -> tuple[int, int]:
    """(step, block) of a reasoning-block span (both are set on every such span by the renderer)."""
    assert span.step is not None and span.block is not None, span
    return span.step, span.block


CONTEXTS = ("online", "full", "step_only")


@dataclass(frozen=True)
class IclrConfig:
    """ICLR block entropy (``interp entropy``, the demo's ``iclr`` step): the drop fraction per step (the
    reference's ``ICLR_RHO``, the condition's own default), the scorer context (online: step t on the history with
    steps 1..t-1 already compressed, the study; full: the uncompressed trajectory, a departure; step_only: the
    step's reasoning only), whether full-context scores and drops are added beside (one more forward per
    trajectory) and the scorer's input limit (over it: the step is not scored, never truncated).

    ``precision``: float32 under ``--dtype auto`` on CUDA too (blocks are ranked by entropies tenths of a bit
    apart; in bfloat16 2 of 24 drop decisions flipped on the tiny model, benchmarks/RESULTS.md "## Precision")."""

    analysis: ClassVar[str] = "iclr"
    precision: ClassVar[str] = "float32"

    rho: float = param(ICLR_RHO, Real(0, 1), "Fraction of each step's reasoning blocks dropped (the lowest-entropy "
                       "ones).", "fraction")
    context: str = param("online", Options(CONTEXTS), "Scorer context: online (step t on the history with steps "
                         "1..t-1 already compressed, the study), full (the uncompressed trajectory, a departure) or "
                         "step_only (the step's reasoning only).")
    compare_full: bool = param(True, Flag(), "Also add the full-context scores and drops beside (one more forward "
                               "per trajectory).")
    max_tokens: int = param(DEFAULT_MAX_TOKENS, Integer(1), "The scorer's input limit (over it the step is not "
                            "scored, never truncated).", "tokens")

    def __post_init__(self) -> None:
        validate(self)


@dataclass
class EntropyScorer:
    """A block scorer for the ``iclr`` conditions, ``scorer(history, t)`` (see module docstring).

    ``records[(task_id, t)]`` keeps the last scores of step t (with token
    counts, for tables); ``forwards`` and ``tokens_run`` count the work done.
    """

    sensor: Sensor
    max_tokens: int = DEFAULT_MAX_TOKENS
    context: str = "online"
    reuse: bool = True
    renderer: Callable[[Trajectory, int, Any], Rendered] = render  # e.g. a Renderer: one conversation's prompts
    records: dict[tuple[str, int], list[BlockScore]] = field(default_factory=dict)
    forwards: int = 0
    tokens_run: int = 0
    _cache: dict[str, list[BlockScore]] = field(default_factory=dict)
    _memo: dict[tuple[str, int, str], list[BlockScore]] = field(default_factory=dict)
    _resume: Resume | None = None  # the online inputs of one task, continued from one another (prefix scheduler)

    def __post_init__(self) -> None:
        if self.context not in CONTEXTS:
            raise ValueError(f"EntropyScorer.context must be one of {', '.join(CONTEXTS)}; got {self.context!r}")

    def scores(self, traj: Trajectory) -> list[BlockScore]:
        """Full-context scores of every block of ``traj`` (computed once per task_id)."""
        if traj.task_id not in self._cache:
            self._cache[traj.task_id] = block_entropies(self.sensor, traj, self.max_tokens)
            self.forwards += 1
        return self._cache[traj.task_id]

    def __call__(self, history: Trajectory, step: int) -> list[float] | None:
        """Scores of the blocks of ``step`` (higher = less predictable), or None if not scored."""
        if self.context == "full":
            # The first call of a task sees the unedited trajectory (ICLR edits a step only after scoring it).
            mine = sorted((s for s in self.scores(history) if s.step == step), key=lambda s: s.block)
            if len(mine) != len(history.steps[step - 1].blocks):
                raise ValueError(f"{history.task_id} step {step}: the full-context scores were computed for another "
                                 "version of this trajectory (use one scorer per trajectory set)")
        else:
            scored = step_only_history(history, step) if self.context == "step_only" else history
            mine = self.score_step(scored, 1 if self.context == "step_only" else step)
            mine = [replace(s, step=step) for s in mine]
        self.records[(history.task_id, step)] = mine
        scores = [s.mean_entropy_bits for s in mine]
        return None if any(x is None for x in scores) else [x for x in scores if x is not None]

    def score_step(self, history: Trajectory, step: int) -> list[BlockScore]:
        """Scores of step ``step``'s blocks with ``history`` as given in context (one forward, prefix reused)."""
        rendered = self.renderer(history, step, self.sensor.tokenizer)
        spans = rendered.spans("reasoning_block", step=step)
        if not spans:
            return []  # a step without reasoning: nothing to score, no forward
        end = max(s.end for s in spans)
        ids = rendered.input_ids[:end]
        whole = rendered.n_tokens  # the scorer's input: step t's action and observation count (scorer_input_tokens)
        key = (history.task_id, step, hashlib.sha1(repr(rendered.input_ids).encode()).hexdigest())
        if key not in self._memo:
            entropy = self._forward(history.task_id, ids, spans) if whole <= context_limit(self.sensor, self.max_tokens) \
                else None
            self._memo[key] = [BlockScore(history.task_id, step, _step_block(s)[1], s.n_tokens,
                                          block_mean_entropy(entropy, s) if entropy is not None else None, whole)
                               for s in spans]
        return self._memo[key]

    def _forward(self, task_id: str, ids: list[int], spans: list[Segment]) -> dict[int, float]:
        """Next-token entropies at the blocks' positions, continuing from the best snapshot of this task."""
        plan = Plan(entropy=entropy_positions([s for s in spans if s.start >= 1]))
        self.forwards += 1
        if not self.reuse:
            self.tokens_run += len(ids)
            return run_plan(self.sensor, ids, plan).entropy
        if self._resume is None:
            self._resume = Resume(self.sensor)
        before = self._resume.tokens_run
        # snapshots (hybrid models) at each block's start and at the input's end: the next input departs at the
        # first block ICLR drops here, or at the end when it drops none; an attention-only cache is cut there instead
        marks = {*(s.start for s in spans), len(ids)}
        out = self._resume.run(ids, plan, marks, context=task_id)
        self.tokens_run += self._resume.tokens_run - before
        return out.entropy


def drop_table(blocks: pd.DataFrame, rho: float = ICLR_RHO) -> pd.DataFrame:
    """``blocks`` (one row per reasoning block: task_id, [domain,] step, block, n_tokens,
    mean_entropy_bits, NaN/None when unscored) plus ``n_blocks_in_step``, ``scored`` (every block
    of the step has a score) and ``dropped`` (ICLR at ``rho`` drops it: ``iclr_dropped`` on the
    step's scores in block order; an unscored step is left whole). Rows keep their order; missing
    ``DROP_TABLE_FIELDS`` columns are added (``context`` "full", the others null)."""
    iclr_dropped((), rho)  # validates rho even when no step is scored
    blocks = blocks.copy()
    if "context" not in blocks:
        blocks["context"] = "full"  # e.g. extraction's in-forward scores
    if "input_tokens" not in blocks:
        blocks["input_tokens"] = None
    n = len(blocks)
    n_blocks, scored, dropped = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    values = blocks["mean_entropy_bits"].to_numpy(dtype=object) if n else []
    block_ids = blocks["block"].to_numpy() if n else []
    for rows in (blocks.groupby(["task_id", "step"], sort=False).indices.values() if n else []):
        rows = sorted(rows, key=lambda r: block_ids[r])  # block order within the step
        n_blocks[rows] = len(rows)
        scores = [values[r] for r in rows]
        if all(pd.notna(v) for v in scores):
            scored[rows] = True
            drop = iclr_dropped([float(v) for v in scores], rho)
            dropped[rows] = [i in drop for i in range(len(rows))]
    out = blocks.assign(n_blocks_in_step=n_blocks, scored=scored, dropped=dropped)
    for name in ("mean_entropy_bits_full", "dropped_full"):
        if name not in out:
            out[name] = None
    return out


def entropy_table(sensor: Sensor, trajectories: list[Trajectory], rho: float = ICLR_RHO,
                  max_tokens: int = DEFAULT_MAX_TOKENS, context: str = "online",
                  full: pd.DataFrame | None | bool = True, progress: bool = True) -> pd.DataFrame:
    """One row per reasoning block (``DROP_TABLE_FIELDS``): ICLR at ``rho`` run with a ``context`` scorer, and
    the full-context scores/decisions beside it (``full``: True computes them, a frame of full-context block
    entropies is used as given, False/None leaves those columns null); a progress line per trajectory
    (``interp.progress``: trajectories done, tokens run per second, ETA)."""
    scorer = EntropyScorer(sensor, max_tokens, context=context)
    rows = []
    with track(f"iclr ({context})", total=len(trajectories), unit="trajectories", enabled=progress) as bar:
        for traj in trajectories:
            before = scorer.tokens_run
            apply_condition("iclr", traj, traj.n_steps, scorer=scorer, rho=rho)
            bar.advance(tokens=scorer.tokens_run - before, info=traj.task_id)
            rows += [{"task_id": traj.task_id, "domain": traj.domain, "context": context, "step": s.step,
                      "block": s.block, "n_tokens": s.n_tokens, "input_tokens": s.input_tokens,
                      "mean_entropy_bits": s.mean_entropy_bits}
                     for t in range(1, traj.n_steps + 1) for s in scorer.records.get((traj.task_id, t), [])]
    columns = ["task_id", "domain", "context", "step", "block", "n_tokens", "input_tokens", "mean_entropy_bits"]
    table = drop_table(pd.DataFrame(rows, columns=columns), rho)
    if full is True:
        full_scorer = EntropyScorer(sensor, max_tokens, context="full")
        full = pd.DataFrame([{"task_id": s.task_id, "step": s.step, "block": s.block,
                              "mean_entropy_bits": s.mean_entropy_bits}
                             for traj in trajectories for s in full_scorer.scores(traj)],
                            columns=["task_id", "step", "block", "mean_entropy_bits"])
    return with_full_context(table, full if isinstance(full, pd.DataFrame) else None, rho)


def with_full_context(table: pd.DataFrame, full: pd.DataFrame | None, rho: float = ICLR_RHO) -> pd.DataFrame:
    """``table`` plus ``mean_entropy_bits_full`` and ``dropped_full`` from full-context block entropies ``full``
    (task_id, step, block, mean_entropy_bits; null columns when None)."""
    table = table.drop(columns=["mean_entropy_bits_full", "dropped_full"], errors="ignore")
    if full is None or full.empty:
        return table.assign(mean_entropy_bits_full=None, dropped_full=None)
    marked = drop_table(full[["task_id", "step", "block", "mean_entropy_bits"]], rho)
    marked = pd.DataFrame({"task_id": marked["task_id"], "step": marked["step"], "block": marked["block"],
                           "mean_entropy_bits_full": marked["mean_entropy_bits"],
                           "dropped_full": marked["dropped"].astype(object).where(marked["scored"], None)})
    return table.merge(marked[["task_id", "step", "block", "mean_entropy_bits_full", "dropped_full"]],
                       on=["task_id", "step", "block"], how="left")
