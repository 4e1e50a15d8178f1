"""History conditions: pure edits of the history at boundary b, each with an edit log.

``apply_condition(name, traj, after_step, **params) -> (Trajectory', EditLog)``.
Only steps ``1..after_step`` (the history) are edited; later steps are kept as
recorded (continuation rubrics read them). Only ``hide_observation`` touches
anything but reasoning. Removed blocks disappear, except under ``iclr`` where
each becomes the literal ``[SKIP]`` (the reference method). The ICLR drop rule
has one home, :func:`iclr_dropped` (reference fraction ``ICLR_RHO = 0.8``; ties
drop the earlier block first); ``interp.extraction.entropy.drop_table`` applies
it to tables of block entropies. :func:`validate_condition` checks a name and its
parameters before any work starts.

| condition                | edit of the history at boundary b                                   |
|--------------------------|----------------------------------------------------------------------|
| full                     | none                                                                 |
| delete_all_reasoning     | every reasoning block of steps 1..b                                  |
| delete_latest_reasoning  | the reasoning of step b                                              |
| keep_latest_reasoning    | the reasoning of steps 1..b-1 (step b kept)                          |
| iclr                     | per step t <= b: the floor(rho*N) lowest-scored of its N blocks -> [SKIP] (N = 1 untouched; a step whose scorer context is over the limit is left whole and logged) |
| random                   | seeded random blocks of steps 1..b until a fraction r of reasoning tokens is removed |
| hide_observation         | the observation of step k (default b) -> ``[output hidden]``          |
| clear_after_code         | the reasoning of steps 1..k, k = latest step <= b whose action wrote code or a file |
"""

from __future__ import annotations

import inspect
import math
import random as _random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from interp.data.actions import writes_code
from interp.data.trajectory import Trajectory, join_blocks

SKIP = "[SKIP]"
ICLR_RHO = 0.8  # the reference ICLR drop fraction
HIDDEN = "[output hidden]"

# A block scorer returns, for step t (1-based) of a trajectory, one score per
# reasoning block (higher = more informative), or None when the step could not
# be scored (context over the scorer limit): the step is then left untouched.
BlockScorer = Callable[[Trajectory, int], "Sequence[float] | None"]
TokenCounter = Callable[[str], int]


@dataclass(frozen=True)
class Edit:
    """One edit: what was removed or replaced, where, and how much."""

    step: int
    block: int | None
    what: str  # "reasoning_block", "observation"
    op: str  # "removed", "skipped" (-> [SKIP]), "hidden"
    chars: int
    tokens: int | None = None


@dataclass
class EditLog:
    """Every edit a condition made, plus notes (e.g. steps skipped as over-long)."""

    condition: str
    after_step: int
    edits: list[Edit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def chars_removed(self) -> int:
        """Characters removed or replaced in total."""
        return sum(e.chars for e in self.edits)

    @property
    def tokens_removed(self) -> int | None:
        """Tokens removed in total (None when no token counter was given)."""
        if any(e.tokens is None for e in self.edits):
            return None
        return sum(e.tokens or 0 for e in self.edits)

    def to_json(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"condition": self.condition, "after_step": self.after_step, "params": self.params,
                "chars_removed": self.chars_removed, "tokens_removed": self.tokens_removed,
                "edits": [vars(e) for e in self.edits], "notes": self.notes}


def _count(counter: TokenCounter | None, text: str) -> int | None:
    return counter(text) if counter is not None else None


def drop_blocks(traj: Trajectory, log: EditLog, drop: dict[int, set[int]], placeholder: str | None,
                 counter: TokenCounter | None) -> Trajectory:
    """Remove (or replace with ``placeholder``) blocks ``drop[step] = {block, ...}`` (1-based steps), logging each."""
    steps = list(traj.steps)
    for t in sorted(drop):
        blocks = steps[t - 1].blocks
        kept = []
        for k, blk in enumerate(blocks):
            if k in drop[t]:
                log.edits.append(Edit(t, k, "reasoning_block", "skipped" if placeholder else "removed",
                                      len(blk), _count(counter, blk)))
                if placeholder:
                    kept.append(placeholder)
            else:
                kept.append(blk)
        steps[t - 1] = replace(steps[t - 1], reasoning=join_blocks(kept))
    return replace(traj, steps=tuple(steps))


def _all_blocks(traj: Trajectory, steps: range) -> dict[int, set[int]]:
    return {t: set(range(len(traj.steps[t - 1].blocks))) for t in steps if traj.steps[t - 1].blocks}


def full(traj: Trajectory, after_step: int, log: EditLog, counter: TokenCounter | None = None) -> Trajectory:
    """The unedited history."""
    return traj


def delete_all_reasoning(traj: Trajectory, after_step: int, log: EditLog,
                         counter: TokenCounter | None = None) -> Trajectory:
    """Remove every reasoning block of steps 1..b."""
    return drop_blocks(traj, log, _all_blocks(traj, range(1, after_step + 1)), None, counter)


def delete_latest_reasoning(traj: Trajectory, after_step: int, log: EditLog,
                            counter: TokenCounter | None = None) -> Trajectory:
    """Remove the reasoning of step b only."""
    return drop_blocks(traj, log, _all_blocks(traj, range(after_step, after_step + 1)), None, counter)


def keep_latest_reasoning(traj: Trajectory, after_step: int, log: EditLog,
                          counter: TokenCounter | None = None) -> Trajectory:
    """Remove the reasoning of steps 1..b-1, keep step b's."""
    return drop_blocks(traj, log, _all_blocks(traj, range(1, after_step)), None, counter)


def _check_fraction(condition: str, name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{condition}: {name} must be in [0, 1], got {value}")


def iclr_dropped(scores: Sequence[float], rho: float = ICLR_RHO) -> set[int]:
    """Indices of the blocks ICLR drops from one step with block ``scores`` (higher = more informative).

    The ``floor(rho * N)`` lowest-scored of the N blocks; ties drop the earlier
    block first; a step of one block (or none) is left untouched.
    """
    _check_fraction("iclr", "rho", rho)
    n = len(scores)
    if n <= 1:
        return set()
    order = sorted(range(n), key=lambda i: (scores[i], i))
    return set(order[: math.floor(rho * n)])


def iclr(traj: Trajectory, after_step: int, log: EditLog, counter: TokenCounter | None = None,
         scorer: BlockScorer | None = None, rho: float = ICLR_RHO) -> Trajectory:
    """Online ICLR: at each step t <= b drop its floor(rho*N) lowest-scored blocks to ``[SKIP]``."""
    _check_iclr(scorer=scorer, rho=rho)
    log.params["rho"] = rho
    drop: dict[int, set[int]] = {}
    for t in range(1, after_step + 1):
        n = len(traj.steps[t - 1].blocks)
        if n <= 1:
            continue
        scores = scorer(traj, t)
        if scores is None:
            log.notes.append(f"step {t}: not scored (scorer context over its limit); left untouched")
            continue
        if len(scores) != n:
            raise ValueError(f"iclr scorer returned {len(scores)} scores for {n} blocks of step {t}")
        drop[t] = iclr_dropped(scores, rho)
    return drop_blocks(traj, log, drop, SKIP, counter)


def _check_iclr(scorer: BlockScorer | None = None, rho: float = ICLR_RHO) -> None:
    if scorer is None:
        raise ValueError("the iclr condition needs a block scorer: pass scorer=... "
                         "(interp.extraction.entropy.EntropyScorer(sensor) scores blocks by predictive entropy)")
    _check_fraction("iclr", "rho", rho)


def random_blocks(traj: Trajectory, after_step: int, log: EditLog, counter: TokenCounter | None = None,
                  r: float = 0.5, seed: int = 0) -> Trajectory:
    """Remove seeded random blocks of steps 1..b until a fraction ``r`` of reasoning tokens is gone."""
    _check_random(r=r, seed=seed)
    log.params.update(r=r, seed=seed)
    size = counter or len  # without a tokenizer, characters stand in for tokens (logged)
    if counter is None:
        log.notes.append("no token counter: the fraction r is measured in characters")
    blocks = [(t, k, size(blk)) for t in range(1, after_step + 1) for k, blk in enumerate(traj.steps[t - 1].blocks)]
    total = sum(n for _, _, n in blocks)
    rng = _random.Random(f"{seed}:{traj.task_id}:{after_step}")
    rng.shuffle(blocks)
    drop: dict[int, set[int]] = {}
    removed = 0
    for t, k, n in blocks:
        if removed >= r * total:
            break
        drop.setdefault(t, set()).add(k)
        removed += n
    return drop_blocks(traj, log, drop, None, counter)


def _check_random(r: float = 0.5, seed: int = 0) -> None:
    _check_fraction("random", "r", r)


def hide_observation(traj: Trajectory, after_step: int, log: EditLog, counter: TokenCounter | None = None,
                     step: int | None = None) -> Trajectory:
    """Replace the observation of ``step`` (default: b) with ``[output hidden]``."""
    k = after_step if step is None else step
    if not 1 <= k <= after_step:
        raise ValueError(f"hide_observation: step {k} is not in the history 1..{after_step}")
    log.params["step"] = k
    target = traj.steps[k - 1]
    obs = target.observations
    if not obs:
        log.notes.append(f"step {k} has no observation; nothing hidden")
        return traj
    for i, o in enumerate(obs):
        log.edits.append(Edit(k, i, "observation", "hidden", len(o), _count(counter, o)))
    new_obs: str | tuple[str, ...] = HIDDEN if isinstance(target.observation, str) else tuple(HIDDEN for _ in obs)
    steps = list(traj.steps)
    steps[k - 1] = replace(target, observation=new_obs)
    return replace(traj, steps=tuple(steps))


def clear_after_code(traj: Trajectory, after_step: int, log: EditLog,
                     counter: TokenCounter | None = None) -> Trajectory:
    """Remove the reasoning of steps 1..k, k = the latest step <= b whose action wrote code or a file."""
    k = next((t for t in range(after_step, 0, -1) if writes_code(traj.steps[t - 1])), None)
    if k is None:
        log.notes.append("no step up to the boundary wrote code or a file; nothing cleared")
        return traj
    log.params["code_step"] = k
    return drop_blocks(traj, log, _all_blocks(traj, range(1, k + 1)), None, counter)


CONDITIONS: dict[str, Callable[..., Trajectory]] = {
    "full": full,
    "delete_all_reasoning": delete_all_reasoning,
    "delete_latest_reasoning": delete_latest_reasoning,
    "keep_latest_reasoning": keep_latest_reasoning,
    "iclr": iclr,
    "random": random_blocks,
    "hide_observation": hide_observation,
    "clear_after_code": clear_after_code,
}


# Checks of a condition's parameters that need no trajectory (run by the condition itself and by
# validate_condition, before any extraction starts).
_PARAM_CHECKS: dict[str, Callable[..., None]] = {"iclr": _check_iclr, "random": _check_random}
_POSITIONAL = ("traj", "after_step", "log", "counter")


def validate_condition(name: str, params: Mapping[str, Any] | None = None) -> None:
    """Raise ValueError unless ``name`` is a known condition and ``params`` are parameters it accepts
    with valid values (checks that need no trajectory; boundaries are checked by ``apply_condition``)."""
    if name not in CONDITIONS:
        raise ValueError(f"unknown condition {name!r}; known: {', '.join(CONDITIONS)}")
    params = dict(params or {})
    accepted = [p for p in inspect.signature(CONDITIONS[name]).parameters if p not in _POSITIONAL]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"condition {name!r} takes no parameter(s) {', '.join(unknown)}; "
                         f"accepted: {', '.join(accepted) or 'none'}")
    if name in _PARAM_CHECKS:
        _PARAM_CHECKS[name](**params)


def apply_condition(name: str, traj: Trajectory, after_step: int, counter: TokenCounter | None = None,
                    **params: Any) -> tuple[Trajectory, EditLog]:
    """Apply condition ``name`` at boundary ``after_step``; return the edited trajectory and its log."""
    validate_condition(name, params)
    if not 1 <= after_step <= traj.n_steps:
        raise ValueError(f"{traj.task_id}: boundary {after_step} out of range 1..{traj.n_steps}")
    log = EditLog(name, after_step)
    return CONDITIONS[name](traj, after_step, log, counter, **params), log
