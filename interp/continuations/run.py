"""Controlled continuations: continue fixed states under edited histories and score the next action.

A *state* (one line of a states file, format in ``data/README.md``) names a
trajectory, a boundary b and a rubric for the next action. For each state x
condition the history is edited (``interp.data.conditions``), rendered with the
sensor's own template (``interp.data.render.render``), and the model generates the
next assistant turn from the rendered ``input_ids`` (:mod:`interp.continuations.generation`):
one greedy continuation plus ``samples`` sampled ones, each seeded by
``(seed, state, condition, sample)``. The turn is parsed (``interp.data.parse``) and
scored against the state's rubric (:mod:`interp.continuations.scoring`); *re-acquisition*
of a hidden observation is computed under every condition, so ``full`` gives the
base rate to compare ``hide_observation`` with.

Generations are cached per (state, condition, prompt) under
``OUT/units/<settings digest>/`` (``interp.io.run_units``): an interrupted run
resumes, and re-scoring with an edited rubric reuses them.

Fields of ``interventions.json`` (``FIELDS``; ``interventions_document`` builds them):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``model`` | ``{...}`` | object | - | the sensor's describe(): spec, revision, ... |
| ``settings`` | ``{...}`` | object | - | RunSettings.to_json(): conditions, samples, max_new_tokens, seed, temperature and top_p (samples only), max_tokens |
| ``summary`` | ``{condition: {mean_score, ci, greedy_mean_score, n_states, n_tasks, n_generations, parse_failures, parse_failure_rate, reacquisition_rate}}`` | object | score: rubric, 0..1; rates: fraction | per condition: mean_score = mean over states of the state's mean score over its generations (null without states); ci = 95% task-bootstrap [lo, hi] or null; greedy_mean_score; counts; parse_failures (generations); reacquisition_rate = fraction of generations re-issuing the hidden step's action (null when that step has no tool call) |
| ``n_states`` | ``[]`` | int | states | states continued |
| ``skipped`` | ``[n_skipped] of {state_id, condition, n_prompt_tokens, reason}`` | object | tokens | state x condition units whose prompt exceeds max_tokens (recorded, not truncated) |
| ``rows`` | ``[n_rows] of {state_id, task_id, domain, after_step, condition, sample, seed, text, parsed, parse_failure, score, checks, reacquired, hidden_step, n_prompt_tokens, n_new_tokens, stopped, edit}`` | object | score: rubric, 0..1; n_*_tokens: tokens | one per state x condition x generation: sample = greedy or the sample index; parsed = {status, reasoning, calls, text, error}; checks = [{check, passed, ...}]; stopped = end of turn reached; edit = the condition's edit log |
| ``states_file`` | ``[]`` | str or null | - | the states file (null when the states were given in memory) |
| ``trajectories_file`` | ``[]`` | str or null | - | the trajectories file (null when given in memory) |
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from interp.data.conditions import CONDITIONS, apply_condition
from interp.io import run_units
from interp.data.parse import parse_turn
from interp.data.render import Rendered, render
from interp.io import atomic_write_bytes, atomic_write_json
from interp.schema import fields_from_doc, schema_dict
from interp.data.trajectory import Trajectory
from interp.stats import task_bootstrap_ci
from interp.continuations.generation import generate_turn, sample_seed
from interp.continuations.scoring import reacquires, score_turn
from interp.continuations.states import State
from interp.extraction.limits import DEFAULT_MAX_TOKENS

CONTINUATION_CONDITIONS = ("full", "keep_latest_reasoning", "delete_latest_reasoning", "delete_all_reasoning",
                           "clear_after_code", "hide_observation")
FIELDS = fields_from_doc(__doc__, "FIELDS")
SCHEMA = schema_dict(FIELDS)


@dataclass(frozen=True)
class RunSettings:
    """Generation settings of a run (the cache digest covers all of them and the model)."""

    conditions: tuple[str, ...] = CONTINUATION_CONDITIONS
    samples: int = 2
    max_new_tokens: int = 128
    seed: int = 0
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = DEFAULT_MAX_TOKENS

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
    return interventions_document(rows, settings, sensor.describe(), len(states), skipped)


def interventions_document(rows: list[dict[str, Any]], settings: RunSettings, model: dict[str, Any], n_states: int,
                           skipped: list[dict[str, Any]], states_file: str | None = None,
                           trajectories_file: str | None = None, n_boot: int = 1000) -> dict[str, Any]:
    """The ``interventions.json`` document (``FIELDS``) from scored rows; pure: no model is run."""
    return {"schema": SCHEMA, "model": model, "settings": settings.to_json(),
            "summary": summarize(rows, settings.conditions, n_boot=n_boot),
            "n_states": n_states, "skipped": skipped, "rows": rows,
            "states_file": states_file, "trajectories_file": trajectories_file}


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
        "| condition | states | generations | mean score [95% CI] | greedy | parse failures | re-acquisition |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for condition, row in doc["summary"].items():
        ci = row["ci"]
        score = f"{_fmt(row['mean_score'])} [{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else _fmt(row["mean_score"])
        lines.append(f"| {condition} | {row['n_states']} | {row['n_generations']} | {score} | "
                     f"{_fmt(row['greedy_mean_score'])} | {row['parse_failures']} | {_fmt(row['reacquisition_rate'])} |")
    if doc["skipped"]:
        lines += ["", f"{len(doc['skipped'])} state x condition unit(s) skipped (prompt over max_tokens)."]
    return "\n".join(lines) + "\n"


def write_results(doc: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """Write ``interventions.json`` and ``interventions.md`` into ``out`` (atomically)."""
    out = Path(out)
    atomic_write_json(out / "interventions.json", doc)
    atomic_write_bytes(out / "interventions.md", markdown_table(doc).encode())
    return out / "interventions.json", out / "interventions.md"
