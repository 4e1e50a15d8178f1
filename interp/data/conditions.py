"""History conditions: pure edits of the history at boundary b, each with an edit log.

``apply_condition(name, traj, after_step, **params) -> (Trajectory', EditLog)``.
Only steps ``1..after_step`` (the history) are edited; later steps are kept as
recorded (continuation rubrics read them). Only ``hide_observation`` touches
anything but reasoning. Blocks are the literal ``"\\n\\n"`` split of
``interp.data.trajectory.split_blocks``; an edit replaces or removes blocks in
place and leaves every other byte of the reasoning as recorded. Removed blocks
disappear, except under ``iclr``/``iclr_step_only`` where each becomes the
literal ``[SKIP]`` (the reference method). The ICLR drop rule has one home,
:func:`iclr_dropped` (reference fraction ``ICLR_RHO = 0.8``; ties drop the
earlier block first); ``interp.extraction.entropy.drop_table`` applies it to
tables of block entropies. :func:`validate_condition` checks a name and its
parameters before any work starts.

ICLR is online, as in the study: steps are compressed in order and each
compression is written back, so step t is scored on the history in which
steps 1..t-1 are already compressed (the scorer is called as
``scorer(history, t)``, see ``BlockScorer``). ``iclr_step_only`` (the study's
Step Only Entropy ablation) calls it as ``scorer(step_only_history(history, t), 1)``:
only that step's reasoning is in context.

| condition                | edit of the history at boundary b                                   |
|--------------------------|----------------------------------------------------------------------|
| full                     | none                                                                 |
| delete_all_reasoning     | every reasoning block of steps 1..b                                  |
| delete_latest_reasoning  | the reasoning of step b                                              |
| keep_latest_reasoning    | the reasoning of steps 1..b-1 (step b kept)                          |
| interleaved              | the providers' default (reasoning kept within the current user turn, dropped at user-turn boundaries): the reasoning of steps 1..k, k = the latest step <= b with a text action (its observation is the user's reply, so a new user turn follows it); nothing when no step <= b has one |
| iclr                     | for t = 1..b in order: score step t's N blocks on the history with steps 1..t-1 already compressed, the floor(rho*N) lowest -> [SKIP], write back (N = 1 untouched; a step the scorer cannot score, context over the limit, is left whole and logged) |
| iclr_step_only           | as iclr, each step scored with only its own reasoning in context      |
| random                   | per step t <= b: a seeded fraction r (RANDOM_R = 0.05, 0.1, 0.2, 0.4) of the step's reasoning tokens deleted (no marker); seeded by task and step, so a step's edit is the same at every boundary after it |
| hide_observation         | the observation of step k (default b) -> ``[output hidden]``          |
| clear_after_code         | the reasoning of steps 1..k, k = latest step <= b whose action wrote code or a file |
| keep_last_k_reasoning    | the reasoning of steps 1..b-k (the last k steps' reasoning kept; k >= 1, the study's K = 5, 10, 20; k = 1 is keep_latest_reasoning) |
| observation_masking      | every tool observation of steps 1..b but those of the last m tool-call steps -> ``[old observation omitted]`` (m >= 1; the published SWE-agent baseline keeps the last M observations) |
| drsr_gate                | online, with memory: for t = 1..b in order, DRSR's learned set-risk gate (``patching.gate``) chooses a set of history units at t (reasoning blocks, observations, tool exchanges with their calls; none of step t; the largest saving predicted safe) on the history with its deletions at 1..t-1 already made, and the deletion is written back (``interp.data.deletions.delete_units``); nothing at a t where it abstains |

``drsr_gate`` takes ``gate``, a ``SetGate`` callable ``gate(history, t)`` returning the units to delete or
None to abstain (``patching.gate.SetGate``: the scorer file plus the sensor; the CLI builds it from
``--gate-scorer FILE``). Like ``iclr`` it is online: the deployed gate decides after every step and its
deletions persist, so the decision at t sees the history it pruned at 1..t-1 plus step t as recorded
(:func:`gate_step` is that one step: a live agent calls it after each step). Its units keep every step (a set
that would leave a step empty is never chosen), so the edited history is rendered at b like the other
conditions'; the log's ``params["units"]`` maps each step t (a string) to the units deleted at t, named as in
the history the gate saw at t (earlier deletions renumber later blocks of the same step, never other steps').

``sliding_window`` (the study's baseline: keep the last K steps, K = 5, 10,
20) removes whole steps, so the edited trajectory has fewer steps and its
boundary moves: it is not in ``CONDITIONS`` (whose edits keep every step and
are rendered at b) but a policy of its own, :func:`sliding_window`, returning
``(Trajectory', boundary', EditLog)`` like ``interp.data.deletions.delete_units``;
render the result at ``boundary'``. Its log has one ``step`` edit per removed step.
:func:`keep_last_m_tool_exchanges` is the other such policy: every tool
exchange (a call with its result, ``interp.data.deletions``' ``tool_exchange``
unit) of steps 1..b but the last ``m`` is deleted; a step left with no call and
no reasoning goes whole (its boundary moves; ``params["removed_steps"]`` lists
them). :data:`STEP_POLICIES` names both.

``observation_masking`` masks only the results of tool calls: the observation of a
text action is the user's reply (a conversation, not environment output) and is kept.

A step without reasoning (no block) is left as it is by every condition:
the deletions have nothing to remove in it, ICLR does not score it (N = 0
drops nothing; no scorer call), ``random`` records ``n = 0`` units, ``k = 0``
and fraction 0 (its whitespace, if any, is not counted as reasoning tokens).

``random`` counts tokens of the ``tokenizer`` parameter (an HF tokenizer: the
sensor's; the step's reasoning is tokenized on its own with offsets); the k =
round(r * n) chosen tokens' characters are deleted. Without a tokenizer the
units are characters (logged). ``EditLog.per_step[t]`` records n, k and the
exact removed fraction k / n.
"""

from __future__ import annotations

import inspect
import json
import re
import math
import random as _random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from interp.data.actions import writes_code
from interp.data.trajectory import Trajectory, replace_blocks

SKIP = "[SKIP]"
ICLR_RHO = 0.8  # the reference ICLR drop fraction
HIDDEN = "[output hidden]"

RANDOM_R = (0.05, 0.1, 0.2, 0.4)  # the study's random-removal fractions

# A block scorer is called as scorer(history, t): ``history`` is the trajectory
# with steps 1..t-1 already compressed by the condition (step t and later as
# recorded); it returns one score per reasoning block of step t (higher = more
# informative), or None when the step could not be scored (context over the
# scorer limit): the step is then left untouched.
BlockScorer = Callable[[Trajectory, int], "Sequence[float] | None"]
# A set gate is called as gate(history, b) and returns the history units to delete at b, (kind, step, index)
# as in interp.data.deletions, or None to abstain (drsr_gate).
SetGate = Callable[[Trajectory, int], "Sequence[tuple[str, int, int | None]] | None"]
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
    per_step: dict[int, dict[str, Any]] = field(default_factory=dict)  # random: {"units", "removed", "fraction"}

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
                "edits": [vars(e) for e in self.edits], "notes": self.notes,
                "per_step": {str(t): v for t, v in self.per_step.items()}}


def _count(counter: TokenCounter | None, text: str) -> int | None:
    return counter(text) if counter is not None else None


def drop_blocks(traj: Trajectory, log: EditLog, drop: dict[int, set[int]], placeholder: str | None,
                 counter: TokenCounter | None) -> Trajectory:
    """Remove (or replace with ``placeholder``) blocks ``drop[step] = {block, ...}`` (1-based steps), logging each."""
    steps = list(traj.steps)
    for t in sorted(drop):
        blocks = steps[t - 1].blocks
        for k in sorted(drop[t]):
            log.edits.append(Edit(t, k, "reasoning_block", "skipped" if placeholder else "removed",
                                  len(blocks[k]), _count(counter, blocks[k])))
        steps[t - 1] = replace(steps[t - 1], reasoning=replace_blocks(steps[t - 1].reasoning,
                                                                      dict.fromkeys(drop[t], placeholder)))
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


def interleaved(traj: Trajectory, after_step: int, log: EditLog, counter: TokenCounter | None = None) -> Trajectory:
    """The providers' default: keep the reasoning of the current user turn, drop every earlier turn's (a text
    action ends a user turn: its observation is the user's reply)."""
    k = next((t for t in range(after_step, 0, -1) if not traj.steps[t - 1].action.calls), 0)
    log.params["turn_start"] = k + 1
    return drop_blocks(traj, log, _all_blocks(traj, range(1, k + 1)), None, counter)


def keep_last_k_reasoning(traj: Trajectory, after_step: int, log: EditLog, counter: TokenCounter | None = None,
                          k: int = 5) -> Trajectory:
    """Remove the reasoning of steps 1..b-k: only the last ``k`` steps keep their reasoning."""
    _check_window(k=k)
    log.params["k"] = k
    return drop_blocks(traj, log, _all_blocks(traj, range(1, after_step - k + 1)), None, counter)


WINDOW_K = (5, 10, 20)  # the study's window sizes (sliding_window, keep_last_k_reasoning)


def _check_window(k: int = 5, name: str = "k") -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{name} must be an integer >= 1 (the study's windows: {', '.join(map(str, WINDOW_K))}); "
                         f"got {k!r}")


def sliding_window(traj: Trajectory, after_step: int, k: int = 5,
                   counter: TokenCounter | None = None) -> tuple[Trajectory, int, EditLog]:
    """Keep only the last ``k`` steps of the history at b (steps 1..b-k removed whole); return
    (trajectory, its boundary min(b, k), edit log); later steps are kept as recorded."""
    _check_window(k=k)
    if not 0 <= after_step <= traj.n_steps:
        raise ValueError(f"{traj.task_id}: boundary {after_step} out of range 0..{traj.n_steps}")
    log = EditLog("sliding_window", after_step, params={"k": k})
    cut = max(0, after_step - k)
    for t in range(1, cut + 1):
        step = traj.steps[t - 1]
        text = step.reasoning + "".join(step.observations) + json.dumps(step.action.to_json())
        log.edits.append(Edit(t, None, "step", "removed", len(text), _count(counter, text)))
    if not cut:
        return traj, after_step, log
    annotations = tuple(replace(a, after_step=a.after_step - cut) for a in traj.annotations if a.after_step > cut)
    return replace(traj, steps=traj.steps[cut:], annotations=annotations), after_step - cut, log


def keep_last_m_tool_exchanges(traj: Trajectory, after_step: int, m: int = 5, counter: TokenCounter | None = None
                                ) -> tuple[Trajectory, int, EditLog]:
    """Delete every tool exchange (call + result) of steps 1..b but the last ``m``; return (trajectory, its
    boundary, edit log) like :func:`sliding_window` (a step left with nothing goes whole)."""
    from interp.data.deletions import delete_units  # deletions builds on this module's EditLog

    _check_window(m, "m")
    if not 0 <= after_step <= traj.n_steps:
        raise ValueError(f"{traj.task_id}: boundary {after_step} out of range 0..{traj.n_steps}")
    exchanges = [("tool_exchange", t, k) for t in range(1, after_step + 1)
                 for k in range(len(traj.steps[t - 1].action.calls))]
    units = exchanges[:max(0, len(exchanges) - m)]
    log = EditLog("keep_last_m_tool_exchanges", after_step, params={"m": m, "removed_steps": []})
    if not units:
        return traj, after_step, log
    edited, boundary, dlog = delete_units(traj, after_step, units, counter)
    log.edits.extend(dlog.edits)
    log.notes.extend(dlog.notes)
    log.params["removed_steps"] = [t for t in range(1, after_step + 1) if not traj.steps[t - 1].blocks
                                   and all(("tool_exchange", t, k) in units
                                           for k in range(len(traj.steps[t - 1].action.calls)))
                                   and traj.steps[t - 1].action.calls]
    return edited, boundary, log


# Policies that may remove whole steps: they return (trajectory, boundary', log), rendered at boundary'.
STEP_POLICIES: Mapping[str, Callable[..., tuple[Trajectory, int, EditLog]]] = MappingProxyType({
    "sliding_window": sliding_window, "keep_last_m_tool_exchanges": keep_last_m_tool_exchanges})


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


def step_only_history(traj: Trajectory, step: int) -> Trajectory:
    """A one-step trajectory holding only step ``step`` (no system prompt, tools, task or other steps):
    the Step Only Entropy context, scored as its step 1; task_id ``"<task_id>@step<t>"`` keeps scorer caches apart."""
    return replace(traj, task_id=f"{traj.task_id}@step{step}", system_prompt="", tools=(), task="",
                   steps=(traj.steps[step - 1],), annotations=())


def _iclr_online(traj: Trajectory, after_step: int, log: EditLog, counter: TokenCounter | None,
                 scorer: BlockScorer | None, rho: float, step_only: bool) -> Trajectory:
    """Steps 1..b in order: score step t on the history so far, drop, write back (the one ICLR loop)."""
    _check_iclr(scorer=scorer, rho=rho)
    assert scorer is not None  # _check_iclr raised otherwise
    log.params["rho"] = rho
    history = traj
    for t in range(1, after_step + 1):
        n = len(history.steps[t - 1].blocks)
        if n == 0:
            continue
        scores = scorer(step_only_history(history, t), 1) if step_only else scorer(history, t)
        if scores is None:
            if n > 1:
                log.notes.append(f"step {t}: not scored (scorer context over its limit, or online its decision not "
                                 "ready yet: interp serve --decide async); left untouched")
            continue
        if len(scores) != n:
            raise ValueError(f"iclr scorer returned {len(scores)} scores for {n} blocks of step {t}")
        drop = iclr_dropped(scores, rho)
        if drop:
            history = drop_blocks(history, log, {t: drop}, SKIP, counter)
    return history


def iclr(traj: Trajectory, after_step: int, log: EditLog, counter: TokenCounter | None = None,
         scorer: BlockScorer | None = None, rho: float = ICLR_RHO) -> Trajectory:
    """Online ICLR: for t = 1..b, score step t on the history with 1..t-1 compressed, drop its floor(rho*N) lowest to [SKIP]."""
    return _iclr_online(traj, after_step, log, counter, scorer, rho, step_only=False)


def iclr_step_only(traj: Trajectory, after_step: int, log: EditLog, counter: TokenCounter | None = None,
                   scorer: BlockScorer | None = None, rho: float = ICLR_RHO) -> Trajectory:
    """Step Only Entropy ICLR: as :func:`iclr`, each step scored with only its own reasoning in context."""
    return _iclr_online(traj, after_step, log, counter, scorer, rho, step_only=True)


def _check_iclr(scorer: BlockScorer | None = None, rho: float = ICLR_RHO) -> None:
    if scorer is None:
        raise ValueError("the iclr condition needs a block scorer: pass scorer=... "
                         "(interp.extraction.entropy.EntropyScorer(sensor) scores blocks by predictive entropy)")
    _check_fraction("iclr", "rho", rho)


def token_spans(text: str, tokenizer: Any | None) -> list[tuple[int, int]]:
    """Character ranges of ``text``'s tokens under ``tokenizer`` (HF, offsets; alone, no special tokens);
    without a tokenizer, one range per character."""
    if tokenizer is None:
        return [(i, i + 1) for i in range(len(text))]
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return [(int(s), int(e)) for s, e in enc["offset_mapping"]]


def random_tokens(traj: Trajectory, after_step: int, log: EditLog, counter: TokenCounter | None = None,
                  r: float = 0.1, seed: int = 0, tokenizer: Any | None = None) -> Trajectory:
    """Delete a seeded fraction ``r`` of each step's reasoning tokens (steps 1..b; seeded by task and step)."""
    _check_random(r=r, seed=seed)
    log.params.update(r=r, seed=seed)
    if tokenizer is None:
        log.notes.append("no tokenizer: the fraction r is measured in characters")
    steps = list(traj.steps)
    for t in range(1, after_step + 1):
        text = steps[t - 1].reasoning if steps[t - 1].blocks else ""  # no block: no reasoning tokens
        units = token_spans(text, tokenizer) if text else []
        k = math.floor(r * len(units) + 0.5)
        chosen = _random.Random(f"{seed}:{traj.task_id}:{t}").sample(range(len(units)), k)
        gone = [False] * len(text)
        for i in chosen:
            gone[units[i][0]:units[i][1]] = [True] * (units[i][1] - units[i][0])
        kept = "".join(c for c, g in zip(text, gone) if not g)
        log.per_step[t] = {"units": len(units), "removed": k, "fraction": k / len(units) if units else 0.0}
        if k:
            log.edits.append(Edit(t, None, "reasoning_tokens", "removed", sum(gone),
                                  k if tokenizer is not None else None))
            steps[t - 1] = replace(steps[t - 1], reasoning=kept if kept.strip() else "")
    return replace(traj, steps=tuple(steps))


def _check_random(r: float = 0.1, seed: int = 0, tokenizer: Any | None = None) -> None:
    if r not in RANDOM_R:
        raise ValueError(f"random: r must be one of the study's fractions {', '.join(map(str, RANDOM_R))}; got {r}")


def _edit_observations(traj: Trajectory, after_step: int, step: int | None, log: EditLog, name: str,
                       edit: Callable[[int, int, str], str]) -> Trajectory:
    """The observations of ``step`` (default: b), each replaced by ``edit(step, index, text)``; the one
    home of the step check and of writing a step's observations back (string or list form kept)."""
    k = after_step if step is None else step
    if not 1 <= k <= after_step:
        raise ValueError(f"{name}: step {k} is not in the history 1..{after_step}")
    log.params["step"] = k
    target = traj.steps[k - 1]
    obs = target.observations
    if not obs:
        log.notes.append(f"step {k} has no observation; nothing hidden")
        return traj
    new_obs = [edit(k, i, o) for i, o in enumerate(obs)]
    if new_obs == list(obs):
        return traj
    steps = list(traj.steps)
    steps[k - 1] = replace(target, observation=new_obs[0] if isinstance(target.observation, str) else tuple(new_obs))
    return replace(traj, steps=tuple(steps))


def hide_observation(traj: Trajectory, after_step: int, log: EditLog, counter: TokenCounter | None = None,
                     step: int | None = None) -> Trajectory:
    """Replace the observation of ``step`` (default: b) with ``[output hidden]``."""
    def hide(k: int, i: int, o: str) -> str:
        log.edits.append(Edit(k, i, "observation", "hidden", len(o), _count(counter, o)))
        return HIDDEN

    return _edit_observations(traj, after_step, step, log, "hide_observation", hide)


HIDDEN_STDERR = "[stderr hidden]"
_STREAM_HEADER = re.compile(r"(?im)^(stdout|stderr):[ \t]*")
_JSON_STDERR_KEY = re.compile(r'(?<!\\)"stderr"\s*:\s*')


def stderr_spans(text: str) -> list[tuple[int, int]]:
    """``[start, end)`` spans of an observation's error stream, recognised from its structure (else ``[]``)."""
    return [(a, b) for a, b, _ in _stderr_edits(text)]


def _stderr_edits(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, replacement)`` of each error-stream span of an observation.

    Two forms: a JSON object with a top-level string ``"stderr"`` (the span is
    that string literal, quotes included); or a text with stream sections, each
    opened by a line starting ``STDOUT:`` or ``STDERR:`` (case-insensitive) and
    running to the next such line or the end (a ``STDERR:`` section's span is its
    content after the header, leading and trailing whitespace excluded). Empty streams give no span.
    """
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(stripped)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            if not isinstance(obj.get("stderr"), str) or not obj["stderr"]:
                return []
            decoder = json.JSONDecoder()
            for m in _JSON_STDERR_KEY.finditer(text):
                try:
                    value, end = decoder.raw_decode(text, m.end())
                except json.JSONDecodeError:
                    continue
                candidate = text[:m.end()] + json.dumps(HIDDEN_STDERR) + text[end:]
                try:
                    edited = json.loads(candidate)
                except json.JSONDecodeError:
                    continue
                if value == obj["stderr"] and edited == {**obj, "stderr": HIDDEN_STDERR}:
                    return [(m.end(), end, json.dumps(HIDDEN_STDERR))]
            return []
    headers = list(_STREAM_HEADER.finditer(text))
    spans = []
    for i, m in enumerate(headers):
        if m.group(1).lower() != "stderr":
            continue
        content = text[m.end():headers[i + 1].start() if i + 1 < len(headers) else len(text)]
        start, end = m.end() + len(content) - len(content.lstrip()), m.end() + len(content.rstrip())
        if end > start:
            spans.append((start, end, HIDDEN_STDERR))
    return spans


def hide_stderr(traj: Trajectory, after_step: int, log: EditLog, counter: TokenCounter | None = None,
                step: int | None = None) -> Trajectory:
    """Replace only the error stream of step ``step``'s (default: b) observations with ``[stderr hidden]``.

    The error stream is recognised by :func:`stderr_spans` (its rules); everything else
    (stdout, exit codes, headers) is kept byte-identical. A JSON observation gets
    the JSON string ``"[stderr hidden]"``. An observation without a recognised
    error stream is kept whole and noted in the log.
    """
    def hide(k: int, i: int, o: str) -> str:
        edits = _stderr_edits(o)
        if not edits:
            log.notes.append(f"step {k} observation {i}: no error stream recognised (no STDERR: section, no JSON "
                             "stderr field); kept whole")
        log.edits += [Edit(k, i, "stderr", "hidden", b - a, _count(counter, o[a:b])) for a, b, _ in edits]
        for a, b, placeholder in reversed(edits):
            o = o[:a] + placeholder + o[b:]
        return o

    return _edit_observations(traj, after_step, step, log, "hide_stderr", hide)


OBSERVATION_MASK = "[old observation omitted]"
MASK_M = 5  # observation_masking's default window (tool-call steps whose observations are kept)


def observation_masking(traj: Trajectory, after_step: int, log: EditLog, counter: TokenCounter | None = None,
                        m: int = MASK_M) -> Trajectory:
    """Replace the tool observations of steps 1..b, all but those of the last ``m`` tool-call steps with
    observations, by ``[old observation omitted]`` (text actions' replies kept)."""
    _check_window(m, "m")
    log.params["m"] = m
    with_obs = [t for t in range(1, after_step + 1)
                if traj.steps[t - 1].action.calls and traj.steps[t - 1].observations]
    steps = list(traj.steps)
    for t in with_obs[:max(0, len(with_obs) - m)]:
        step = steps[t - 1]
        for i, o in enumerate(step.observations):
            log.edits.append(Edit(t, i, "observation", "masked", len(o), _count(counter, o)))
        masked = tuple(OBSERVATION_MASK for _ in step.observations)
        steps[t - 1] = replace(step, observation=masked[0] if isinstance(step.observation, str) else masked)
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


def gate_step(history: Trajectory, t: int, gate: SetGate, log: EditLog,
              counter: TokenCounter | None = None) -> Trajectory:
    """One online decision of the set gate at step t on ``history`` (steps 1..t-1 as the gate left them), written
    back: the history with the chosen units deleted (unchanged when it abstains); ``log`` gains its edits and
    ``params["units"][str(t)]``."""
    from interp.data.deletions import delete_units  # deletions builds on this module's EditLog

    units = gate(history, t)
    chosen = log.params.setdefault("units", {})
    if not units:
        chosen[str(t)] = []
        return history
    edited, b2, dlog = delete_units(history, t, units, counter)
    if b2 != t:
        raise ValueError(f"{history.task_id}@{t}: the gate's set {list(units)} removes a whole step; "
                         "drsr_gate edits must keep every step")
    log.edits.extend(dlog.edits)
    log.notes.extend(dlog.notes)
    chosen[str(t)] = dlog.params["units"]
    return edited


def drsr_gate(traj: Trajectory, after_step: int, log: EditLog, counter: TokenCounter | None = None,
              gate: SetGate | None = None) -> Trajectory:
    """DRSR's gate online with memory: for t = 1..b, :func:`gate_step` on the history pruned at 1..t-1."""
    _check_gate(gate=gate)
    assert gate is not None  # checked above
    history = traj
    log.params["units"] = {}
    for t in range(1, after_step + 1):
        history = gate_step(history, t, gate, log, counter)
    if not any(log.params["units"].values()):
        log.notes.append(f"the gate abstained at every step 1..{after_step}: no candidate set predicted safe enough")
    return history


def _check_gate(gate: SetGate | None = None) -> None:
    if gate is None:
        raise ValueError("the drsr_gate condition needs a set gate: pass gate=... (patching.gate.SetGate(GateModel."
                         "load(scorer_file), sensor); on the command line --gate-scorer FILE)")


CONDITIONS: Mapping[str, Callable[..., Trajectory]] = MappingProxyType({
    "full": full,
    "delete_all_reasoning": delete_all_reasoning,
    "delete_latest_reasoning": delete_latest_reasoning,
    "keep_latest_reasoning": keep_latest_reasoning,
    "iclr": iclr,
    "iclr_step_only": iclr_step_only,
    "random": random_tokens,
    "hide_observation": hide_observation,
    "hide_stderr": hide_stderr,
    "clear_after_code": clear_after_code,
    "keep_last_k_reasoning": keep_last_k_reasoning,
    "interleaved": interleaved,
    "drsr_gate": drsr_gate,
    "observation_masking": observation_masking,
})


# Checks of a condition's parameters that need no trajectory (run by the condition itself and by
# validate_condition, before any extraction starts).
_PARAM_CHECKS: dict[str, Callable[..., None]] = {"iclr": _check_iclr, "iclr_step_only": _check_iclr,
                                                 "random": _check_random, "keep_last_k_reasoning": _check_window,
                                                 "observation_masking": lambda m=MASK_M: _check_window(m, "m"),
                                                 "drsr_gate": _check_gate}
_POSITIONAL = ("traj", "after_step", "log", "counter")


def check_condition_name(name: str) -> None:
    """Raise ValueError unless ``name`` is a known condition (its parameters aside)."""
    if name not in CONDITIONS:
        raise ValueError(f"unknown condition {name!r}; known: {', '.join(CONDITIONS)}")


def validate_condition(name: str, params: Mapping[str, Any] | None = None) -> None:
    """Raise ValueError unless ``name`` is a known condition and ``params`` are parameters it accepts
    with valid values (checks that need no trajectory; boundaries are checked by ``apply_condition``)."""
    check_condition_name(name)
    params = dict(params or {})
    accepted = [p for p in inspect.signature(CONDITIONS[name]).parameters if p not in _POSITIONAL]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"condition {name!r} takes no parameter(s) {', '.join(unknown)}; "
                         f"accepted: {', '.join(accepted) or 'none'}")
    if name in _PARAM_CHECKS:
        _PARAM_CHECKS[name](**params)


def apply_condition(name: str, traj: Trajectory, after_step: int, counter: TokenCounter | None = None,
                    **params: object) -> tuple[Trajectory, EditLog]:
    """Apply condition ``name`` at boundary ``after_step``; return the edited trajectory and its log."""
    validate_condition(name, params)
    if not 1 <= after_step <= traj.n_steps:
        raise ValueError(f"{traj.task_id}: boundary {after_step} out of range 1..{traj.n_steps}")
    log = EditLog(name, after_step)
    return CONDITIONS[name](traj, after_step, log, counter, **params), log
