"""Controlled continuations: continue fixed states under edited histories and score the next action.

A *state* (one line of a states file, format in ``data/README.md``) names a
trajectory, a boundary b and a rubric for the next action. For each state x
condition the history is edited (``interp.data.conditions``), rendered with the
sensor's own template (``interp.data.render.render``), and the model generates the
next assistant turn from the rendered ``input_ids``: one greedy continuation
plus ``samples`` sampled ones (temperature, top-p 1, no top-k; other generation
parameters, e.g. a repetition penalty, come from the model's generation
config), each seeded by ``(seed, state, condition, sample)`` through
``torch.manual_seed`` inside ``torch.random.fork_rng``, so a run is
deterministic for a fixed seed and leaves the global RNG untouched. The turn is parsed (``interp.data.parse``) and
scored against the rubric:

=================  ===================================================================
check              passes when
=================  ===================================================================
next_tool          some call's tool is in the expected set
args_match         (one check per pattern) the pattern is found in the arguments text
                   of a call whose tool is expected (any call when no tool is given)
args_not_match     (one per pattern) the pattern is found in no call's arguments text
no_repeat          (one per rule) no call has the rule's tool and, when given, matches
                   its ``args`` pattern
writes_code        the turn writes code or a file (``interp.data.conditions.writes_code``)
                   exactly when the marker says so
=================  ===================================================================

``score`` = mean of the rubric's checks (0..1). A turn from which no action can
be read is scored 0 with ``parse_failure`` true, never dropped. The
*arguments text* of a call is one ``key: value`` line per leaf argument
(nested keys dotted, list items ``key[i]``, non-strings as JSON); patterns are
Python regexes applied with ``re.search`` (use ``(?i)``, ``(?m)``, ``(?s)`` inline).

*Re-acquisition*: the turn re-issues the action whose observation
``hide_observation`` hides (step ``hide_step``, default b): a call with the
same tool and equivalent arguments (the same leaves, whitespace collapsed,
empty values dropped). It is computed under every condition, so ``full``
gives the base rate to compare ``hide_observation`` with.

Generations are cached per (state, condition, prompt) under
``OUT/units/<settings digest>/`` (``interp.io.run_units``): an interrupted run
resumes, and re-scoring with an edited rubric reuses them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from interp.data.conditions import CONDITIONS, apply_condition, writes_code
from interp.externalization.labeler import argument_leaves
from interp.io import run_units
from interp.data.parse import ParsedTurn, parse_turn
from interp.data.render import Rendered, render
from interp.io import atomic_write_bytes, atomic_write_json
from interp.data.trajectory import Action, Step, ToolCall, Trajectory, load_trajectories
from interp.stats import task_bootstrap_ci

CONTINUATION_CONDITIONS = ("full", "keep_latest_reasoning", "delete_latest_reasoning", "delete_all_reasoning",
                           "clear_after_code", "hide_observation")
REFERENCE = {
    "keep_latest_reasoning": 0.872, "full": 0.872, "delete_latest_reasoning": 0.760,
    "delete_all_reasoning": 0.675, "clear_after_code": 0.759,
    "hide_observation": "hiding stderr makes the agent re-run the command",
}
STATE_FIELDS = frozenset({"state_id", "task_id", "after_step", "hide_step", "note", "rubric"})
RUBRIC_FIELDS = frozenset({"next_tool", "args_match", "args_not_match", "no_repeat", "writes_code"})
SCHEMA = {
    "summary": "per condition: mean_score (mean over states of the state's mean score over its generations; "
               "0..1), ci (95% task-bootstrap [lo, hi]), greedy_mean_score, n_states, n_tasks, n_generations, "
               "parse_failures (generations), parse_failure_rate, reacquisition_rate (fraction of generations "
               "re-issuing the hidden step's action; null when that step has no tool call), reference",
    "rows": "one per state x condition x generation: state_id, task_id, domain, after_step, condition, "
            "sample ('greedy' or sample index), seed, text (the generated turn), parsed (status, reasoning, "
            "calls, text, error), parse_failure, score, checks [{check, passed, ...}], reacquired, "
            "hidden_step, n_prompt_tokens, n_new_tokens, stopped (end-of-turn reached), edit (condition log)",
    "skipped": "state x condition units whose prompt exceeds max_tokens (recorded, not truncated)",
    "settings": "generation settings; temperature/top_p apply to samples only",
}


class StatesError(ValueError):
    """Invalid states input; ``problems`` holds one ``FILE:LINE: field: message`` per issue."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(f"{len(problems)} problem(s) in states input:\n" + "\n".join(problems[:50]))


@dataclass(frozen=True)
class RepeatRule:
    """An action that must not be repeated: ``tool``, optionally only when ``args`` matches."""

    tool: str
    args: re.Pattern[str] | None = None


@dataclass(frozen=True)
class Rubric:
    """What the next action of a state should look like (see the module docstring)."""

    next_tool: tuple[str, ...] = ()
    args_match: tuple[re.Pattern[str], ...] = ()
    args_not_match: tuple[re.Pattern[str], ...] = ()
    no_repeat: tuple[RepeatRule, ...] = ()
    writes_code: bool | None = None

    @property
    def n_checks(self) -> int:
        """Number of checks the score averages."""
        return (bool(self.next_tool) + len(self.args_match) + len(self.args_not_match) + len(self.no_repeat)
                + (self.writes_code is not None))


@dataclass(frozen=True)
class State:
    """A fixed state: trajectory ``task_id`` at boundary ``after_step``, with its rubric."""

    state_id: str
    task_id: str
    after_step: int
    rubric: Rubric
    hide_step: int | None = None
    note: str = ""

    @property
    def hidden_step(self) -> int:
        """The step whose observation ``hide_observation`` hides."""
        return self.hide_step or self.after_step


def _regex(value: Any, where: str, problems: list[str]) -> re.Pattern[str] | None:
    if not isinstance(value, str):
        problems.append(f"{where}: expected a regex string, got {json.dumps(value)[:60]}")
        return None
    try:
        return re.compile(value)
    except re.error as exc:
        problems.append(f"{where}: bad regex {value!r}: {exc}")
        return None


def _parse_rubric(raw: Any, tools: set[str], where: str, problems: list[str]) -> Rubric | None:
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected an object, got {json.dumps(raw)[:60]}")
        return None
    n0 = len(problems)
    for key in sorted(set(raw) - RUBRIC_FIELDS):
        problems.append(f"{where}.{key}: unknown rubric field (known: {', '.join(sorted(RUBRIC_FIELDS))})")
    next_tool = raw.get("next_tool", [])
    next_tool = [next_tool] if isinstance(next_tool, str) else next_tool
    if not isinstance(next_tool, list) or not all(isinstance(t, str) for t in next_tool):
        problems.append(f"{where}.next_tool: expected a tool name or a list of tool names")
        next_tool = []
    for i, tool in enumerate(next_tool):
        if tools and tool not in tools:
            problems.append(f"{where}.next_tool[{i}]: tool {tool!r} is not declared in the trajectory's tools "
                            f"({', '.join(sorted(tools))})")
    patterns = {}
    for key in ("args_match", "args_not_match"):
        values = raw.get(key, [])
        if not isinstance(values, list):
            problems.append(f"{where}.{key}: expected a list of regex strings")
            values = []
        patterns[key] = tuple(_regex(v, f"{where}.{key}[{i}]", problems) for i, v in enumerate(values))
    rules = []
    no_repeat = raw.get("no_repeat", [])
    if not isinstance(no_repeat, list):
        problems.append(f"{where}.no_repeat: expected a list of {{\"tool\": ..., \"args\": regex}} objects")
        no_repeat = []
    for i, rule in enumerate(no_repeat):
        w = f"{where}.no_repeat[{i}]"
        if not isinstance(rule, dict) or not isinstance(rule.get("tool"), str) or set(rule) - {"tool", "args"}:
            problems.append(f"{w}: expected {{\"tool\": name, \"args\": optional regex}}, got {json.dumps(rule)[:60]}")
            continue
        if tools and rule["tool"] not in tools:
            problems.append(f"{w}.tool: tool {rule['tool']!r} is not declared in the trajectory's tools")
        rules.append(RepeatRule(rule["tool"], _regex(rule["args"], f"{w}.args", problems) if "args" in rule else None))
    marker = raw.get("writes_code")
    if marker is not None and not isinstance(marker, bool):
        problems.append(f"{where}.writes_code: expected true or false, got {json.dumps(marker)[:40]}")
    if len(problems) > n0:
        return None
    rubric = Rubric(tuple(next_tool), patterns["args_match"], patterns["args_not_match"], tuple(rules), marker)
    if rubric.n_checks == 0:
        problems.append(f"{where}: the rubric has no checks (give next_tool, args_match, args_not_match, "
                        "no_repeat or writes_code)")
        return None
    return rubric


def load_states(path: str | Path, trajectories: Sequence[Trajectory]) -> list[State]:
    """Load and validate a states file against its trajectories; every problem as ``FILE:LINE: field: message``."""
    path = Path(path)
    if not path.exists():
        raise StatesError([f"{path}: file not found"])
    by_id = {t.task_id: t for t in trajectories}
    states: list[State] = []
    problems: list[str] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        found: list[str] = []
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{path}:{lineno}: (line): invalid JSON: {exc.msg} at column {exc.colno}")
            continue
        if not isinstance(raw, dict):
            problems.append(f"{path}:{lineno}: (record): expected a JSON object")
            continue
        for key in sorted(set(raw) - STATE_FIELDS):
            found.append(f"{key}: unknown field (known: {', '.join(sorted(STATE_FIELDS))})")
        for key in ("task_id", "after_step", "rubric"):
            if key not in raw:
                found.append(f"{key}: missing")
        traj = by_id.get(raw.get("task_id")) if isinstance(raw.get("task_id"), str) else None
        if "task_id" in raw and traj is None:
            found.append(f"task_id: unknown task {raw['task_id']!r} (not in the trajectory file)")
        b = raw.get("after_step")
        if "after_step" in raw and (not isinstance(b, int) or isinstance(b, bool)):
            found.append(f"after_step: expected an integer, got {json.dumps(b)}")
        elif traj is not None and isinstance(b, int) and not 1 <= b <= traj.n_steps:
            found.append(f"after_step: boundary {b} out of range 1..{traj.n_steps} for {traj.task_id}")
        hide = raw.get("hide_step")
        if hide is not None and (not isinstance(hide, int) or isinstance(hide, bool) or not isinstance(b, int)
                                 or not 1 <= hide <= b):
            found.append(f"hide_step: {json.dumps(hide)} is not a step of the history 1..{b}")
        tools = {t["name"] for t in traj.tools} if traj is not None else set()
        rubric = _parse_rubric(raw["rubric"], tools, "rubric", found) if "rubric" in raw else None
        state_id = raw.get("state_id", f"{raw.get('task_id')}@{b}")
        if not isinstance(state_id, str) or not state_id:
            found.append("state_id: expected a non-empty string")
        elif state_id in first_line:
            found.append(f"state_id: duplicate {state_id!r} (first on line {first_line[state_id]})")
        else:
            first_line[state_id] = lineno
        if found:
            problems.extend(f"{path}:{lineno}: {msg}" for msg in found)
            continue
        states.append(State(state_id, raw["task_id"], b, rubric, hide, raw.get("note", "")))
    if problems:
        raise StatesError(problems)
    if not states:
        raise StatesError([f"{path}: no states"])
    return states


def arguments_text(call: ToolCall) -> str:
    """The text rubric patterns are matched against: one ``key: value`` line per leaf argument."""
    return "\n".join(f"{key}: {value}" for key, value in argument_leaves(dict(call.arguments)))


def score_turn(turn: ParsedTurn, rubric: Rubric) -> tuple[float, list[dict[str, Any]]]:
    """``(score, checks)`` of a parsed turn; an unparseable turn scores 0 with no checks run."""
    if turn.parse_failure:
        return 0.0, []
    calls = list(turn.calls)
    texts = [arguments_text(c) for c in calls]
    expected = [t for c, t in zip(calls, texts) if not rubric.next_tool or c.tool in rubric.next_tool]
    checks: list[dict[str, Any]] = []
    if rubric.next_tool:
        checks.append({"check": "next_tool", "expected": list(rubric.next_tool),
                       "got": [c.tool for c in calls], "passed": bool(expected)})
    for pat in rubric.args_match:
        checks.append({"check": "args_match", "pattern": pat.pattern, "passed": any(pat.search(t) for t in expected)})
    for pat in rubric.args_not_match:
        checks.append({"check": "args_not_match", "pattern": pat.pattern,
                       "passed": not any(pat.search(t) for t in texts)})
    for rule in rubric.no_repeat:
        repeated = any(c.tool == rule.tool and (rule.args is None or rule.args.search(t)) for c, t in zip(calls, texts))
        checks.append({"check": "no_repeat", "tool": rule.tool, "pattern": rule.args.pattern if rule.args else None,
                       "passed": not repeated})
    if rubric.writes_code is not None:
        wrote = writes_code(Step("", Action(calls=tuple(calls)), None)) if calls else False
        checks.append({"check": "writes_code", "expected": rubric.writes_code, "passed": wrote == rubric.writes_code})
    return sum(c["passed"] for c in checks) / len(checks), checks


def _canonical(call: ToolCall) -> tuple[str, frozenset[tuple[str, str]]]:
    leaves = ((k, " ".join(v.split())) for k, v in argument_leaves(dict(call.arguments)))
    return call.tool, frozenset((k, v) for k, v in leaves if v not in ("", '""', "[]", "{}"))


def equivalent_calls(a: ToolCall, b: ToolCall) -> bool:
    """Same tool and the same arguments up to whitespace, key order and empty values."""
    return _canonical(a) == _canonical(b)


def reacquires(turn: ParsedTurn, hidden: Action) -> bool | None:
    """True when the turn re-issues a call of ``hidden`` (None when ``hidden`` has no tool call)."""
    if hidden.is_text or not hidden.calls:
        return None
    return any(equivalent_calls(c, h) for c in turn.calls for h in hidden.calls)


def sample_seed(seed: int, state_id: str, condition: str, sample: int) -> int:
    """The torch seed of one sampled continuation (stable across processes and platforms)."""
    digest = hashlib.sha256(f"{seed}:{state_id}:{condition}:{sample}".encode()).hexdigest()
    return int(digest[:8], 16)


def stop_token_ids(sensor: Any) -> list[int]:
    """End-of-turn token ids: the generation config's EOS ids, the tokenizer's EOS and ``<|im_end|>``."""
    tok = sensor.tokenizer
    eos = sensor.hf_model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tok.eos_token_id is not None:
        ids.add(tok.eos_token_id)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tok.unk_token_id:
        ids.add(im_end)
    return sorted(ids)


def generate_turn(sensor: Any, input_ids: list[int], max_new_tokens: int, seed: int | None = None,
                  temperature: float = 0.7, top_p: float = 1.0) -> dict[str, Any]:
    """One continuation: greedy when ``seed`` is None, else sampled after ``torch.manual_seed(seed)``."""
    import torch
    from transformers import GenerationConfig

    stops = stop_token_ids(sensor)
    sampled = seed is not None
    config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=sampled, eos_token_id=stops,
                              pad_token_id=sensor.tokenizer.pad_token_id if sensor.tokenizer.pad_token_id is not None
                              else stops[0],
                              **({"temperature": temperature, "top_p": top_p, "top_k": 0} if sampled else {}))
    ids = torch.tensor([input_ids], device=sensor.device)
    cuda = [sensor.device] if sensor.device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), torch.no_grad():  # the caller's RNG state is left as it was
        if sampled:
            torch.manual_seed(seed)
        out = sensor.hf_model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
    new = out[0, len(input_ids):].tolist()
    stop_at = next((i for i, t in enumerate(new) if t in stops), None)
    kept = new if stop_at is None else new[:stop_at]
    return {"text": sensor.tokenizer.decode(kept, skip_special_tokens=False), "n_new_tokens": len(kept),
            "stopped": stop_at is not None}


@dataclass(frozen=True)
class RunSettings:
    """Generation settings of a run (the cache digest covers all of them and the model)."""

    conditions: tuple[str, ...] = CONTINUATION_CONDITIONS
    samples: int = 2
    max_new_tokens: int = 128
    seed: int = 0
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 42_000

    def __post_init__(self) -> None:
        bad = [c for c in self.conditions if c not in CONDITIONS or c == "iclr"]
        if bad:
            raise ValueError(f"unknown or unsupported condition(s) {bad} for continuations; "
                             f"use: {', '.join(CONTINUATION_CONDITIONS)} (or random)")
        if self.samples < 0 or self.max_new_tokens < 1 or self.temperature <= 0:
            raise ValueError("samples must be >= 0, max_new_tokens >= 1 and temperature > 0")

    def to_json(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"conditions": list(self.conditions), "samples": self.samples, "max_new_tokens": self.max_new_tokens,
                "seed": self.seed, "temperature": self.temperature, "top_p": self.top_p,
                "max_tokens": self.max_tokens}


def _unit_key(state: State, condition: str, rendered: Rendered) -> str:
    safe = "".join(c if c.isalnum() or c in "-_.@" else "_" for c in state.state_id)
    digest = hashlib.sha256(json.dumps(rendered.input_ids).encode()).hexdigest()[:10]
    return f"{safe}__{condition}__{digest}"


def _settings_digest(sensor: Any, settings: RunSettings) -> str:
    ident = {"model": sensor.describe(), "device": str(sensor.device), **settings.to_json()}
    ident.pop("conditions")
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


def continue_states(sensor: Any, states: Sequence[State], trajectories: Sequence[Trajectory], out: Path,
                    settings: RunSettings = RunSettings(), progress: bool = True) -> dict[str, Any]:
    """Generate, parse and score every state x condition; return the ``interventions.json`` document."""
    by_id = {t.task_id: t for t in trajectories}
    units: dict[str, tuple[State, str, Rendered, dict[str, Any]]] = {}
    skipped = []
    for state in states:
        traj = by_id[state.task_id]
        for condition in settings.conditions:
            params = {"step": state.hidden_step} if condition == "hide_observation" else {}
            edited, log = apply_condition(condition, traj, state.after_step, **params)
            rendered = render(edited, state.after_step, sensor.tokenizer)
            if rendered.n_tokens > settings.max_tokens:
                skipped.append({"state_id": state.state_id, "condition": condition,
                                "n_prompt_tokens": rendered.n_tokens,
                                "reason": f"prompt over max_tokens={settings.max_tokens}"})
                continue
            units[_unit_key(state, condition, rendered)] = (state, condition, rendered, log.to_json())

    def compute(key: str) -> dict[str, Any]:
        state, condition, rendered, _ = units[key]
        gens = [{"sample": "greedy", "seed": None,
                 **generate_turn(sensor, rendered.input_ids, settings.max_new_tokens)}]
        for i in range(settings.samples):
            s = sample_seed(settings.seed, state.state_id, condition, i)
            gens.append({"sample": i, "seed": s, **generate_turn(sensor, rendered.input_ids, settings.max_new_tokens,
                                                                  s, settings.temperature, settings.top_p)})
        return {"state_id": state.state_id, "condition": condition, "generations": gens}

    cache = Path(out) / "units" / _settings_digest(sensor, settings)
    results = run_units(list(units), compute, cache, "continue", progress)
    rows = []
    for key, (state, condition, rendered, edit) in units.items():
        traj = by_id[state.task_id]
        hidden = traj.steps[state.hidden_step - 1].action
        for gen in results[key]["generations"]:
            turn = parse_turn(gen["text"])
            score, checks = score_turn(turn, state.rubric)
            rows.append({"state_id": state.state_id, "task_id": state.task_id, "domain": traj.domain,
                         "after_step": state.after_step, "condition": condition, "sample": gen["sample"],
                         "seed": gen["seed"], "text": gen["text"], "parsed": turn.to_json(),
                         "parse_failure": turn.parse_failure, "score": score, "checks": checks,
                         "reacquired": reacquires(turn, hidden), "hidden_step": state.hidden_step,
                         "n_prompt_tokens": rendered.n_tokens, "n_new_tokens": gen["n_new_tokens"],
                         "stopped": gen["stopped"], "edit": edit})
    return {"schema": SCHEMA, "model": sensor.describe(), "settings": settings.to_json(),
            "summary": summarize(rows, settings.conditions), "reference": REFERENCE,
            "n_states": len(states), "skipped": skipped, "rows": rows}


def summarize(rows: list[dict[str, Any]], conditions: Sequence[str], n_boot: int = 1000,
              seed: int = 0) -> dict[str, Any]:
    """Per condition: mean score with task-bootstrap CI, counts, parse failures and re-acquisition rate."""
    out = {}
    for condition in conditions:
        mine = [r for r in rows if r["condition"] == condition]
        per_state: dict[str, list[float]] = {}
        task_of = {}
        for r in mine:
            per_state.setdefault(r["state_id"], []).append(r["score"])
            task_of[r["state_id"]] = r["task_id"]
        values = np.array([np.mean(v) for v in per_state.values()], dtype=float)
        groups = np.array([task_of[s] for s in per_state])
        ci = task_bootstrap_ci(values[:, None], groups, n_boot=n_boot, seed=seed)[0].tolist() if len(values) else None
        reacq = [r["reacquired"] for r in mine if r["reacquired"] is not None]
        greedy = [r["score"] for r in mine if r["sample"] == "greedy"]
        failures = sum(r["parse_failure"] for r in mine)
        out[condition] = {
            "mean_score": float(values.mean()) if len(values) else None, "ci": ci,
            "greedy_mean_score": float(np.mean(greedy)) if greedy else None,
            "n_states": len(per_state), "n_tasks": len(set(task_of.values())), "n_generations": len(mine),
            "parse_failures": int(failures), "parse_failure_rate": failures / len(mine) if mine else None,
            "reacquisition_rate": float(np.mean(reacq)) if reacq else None,
            "reference": REFERENCE.get(condition),
        }
    return out


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def markdown_table(doc: dict[str, Any]) -> str:
    """The ``interventions.md`` table: one row per condition."""
    s = doc["settings"]
    lines = [
        "# Controlled continuations",
        "",
        f"Model `{doc['model']['spec']}` (revision {doc['model']['revision']}), {doc['n_states']} states, "
        f"greedy + {s['samples']} samples (T={s['temperature']}), max_new_tokens={s['max_new_tokens']}, seed={s['seed']}.",
        "Score: mean of the rubric checks (0..1), averaged per state, then over states; "
        "CI: 95% task bootstrap. Re-acquisition: the next action re-issues the hidden step's action.",
        "",
        "| condition | states | generations | mean score [95% CI] | greedy | parse failures | re-acquisition | reference |",
        "|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for condition, row in doc["summary"].items():
        ci = row["ci"]
        score = f"{_fmt(row['mean_score'])} [{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else _fmt(row["mean_score"])
        ref = row["reference"]
        lines.append(f"| {condition} | {row['n_states']} | {row['n_generations']} | {score} | "
                     f"{_fmt(row['greedy_mean_score'])} | {row['parse_failures']} | {_fmt(row['reacquisition_rate'])} | "
                     f"{_fmt(ref) if isinstance(ref, float) else (ref or '-')} |")
    if doc["skipped"]:
        lines += ["", f"{len(doc['skipped'])} state x condition unit(s) skipped (prompt over max_tokens)."]
    return "\n".join(lines) + "\n"


def write_results(doc: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """Write ``interventions.json`` and ``interventions.md`` into ``out`` (atomically)."""
    out = Path(out)
    atomic_write_json(out / "interventions.json", doc)
    atomic_write_bytes(out / "interventions.md", markdown_table(doc).encode())
    return out / "interventions.json", out / "interventions.md"


def intervene_command(model: str, states: Path, trajectories: Path, out: Path,
                      settings: RunSettings = RunSettings(), model_path: Path | None = None, device: str = "cpu",
                      dtype: str = "fp32", progress: bool = True) -> dict[str, Any]:
    """``interp intervene``: load the sensor, continue every state x condition, write json + md; return the summary."""
    from interp.sensor.models import load_model

    trajs = load_trajectories(trajectories)
    chosen = load_states(states, trajs)
    sensor = load_model(model, device=device, dtype=dtype, model_path=model_path)
    doc = continue_states(sensor, chosen, trajs, out, settings, progress)
    doc.update(states_file=str(states), trajectories_file=str(trajectories))
    write_results(doc, out)
    return doc["summary"]
