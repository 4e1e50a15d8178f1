"""Trajectories: the typed, validated form of one agent run.

A trajectory file is JSON Lines, one run per line (schema:
``interp/data/schemas/trajectory.schema.json``, documented in ``docs/reference/data-formats.md``).
Loading streams the file, validates every line and reports *every* problem as
``FILE:LINE: field.path: message``; nothing downstream sees an invalid record.
A file with no record is a problem (``no trajectories in FILE``).

Chat-template control tokens (``<|im_end|>``, ``<think>``, ``</tool_call>``, any
``<|...|>``; :data:`CONTROL_TOKEN`) inside the text of a record are problems
unless ``allow_control_tokens``: rendered, such text would silently become the
template's real control tokens (end a turn, open a reasoning block). With
``allow_control_tokens`` the text is kept as written, and renders that way.

Three severities. *Problems* (schema errors, annotation ranges, observation
counts) make a line invalid. *Warnings* do not: a tool called that is not in
the declared ``tools`` (real logs omit schemas of tools a harness adds); with
``strict`` they are problems. *Notes* are facts, never errors: a step whose
reasoning has no non-blank block is valid and has zero reasoning blocks (real
agents often act without writing reasoning), and a trajectory that calls tools
but declares none cannot have its calls checked (:data:`NO_TOOLS`);
``interp validate --strict`` lists them.

Objects are frozen: history conditions return edited copies
(``dataclasses.replace``), never mutate.
"""

from __future__ import annotations

import copy
import json
import math
import re
import unicodedata
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from interp.data.jsonl import InputError, read_lines

KNOWN_FIELDS = frozenset(
    {"task_id", "domain", "system_prompt", "tools", "task", "steps", "final_answer",
     "outcome", "annotations", "source"}
)
STEP_FIELDS = frozenset({"reasoning", "action", "observation"})
# declared in the schema for what `interp import` keeps beside the trajectory (passed through as extra fields,
# never rendered); not unknown under `interp validate --strict`
IMPORT_FIELDS = frozenset({"metadata"})
IMPORT_STEP_FIELDS = frozenset({"assistant_text", "is_error", "redacted_thinking", "observation_scope"})
BOUNDARY_FIELDS = frozenset({"after_step", "future_necessity", "externalization_gap", "note"})
# Strings chat templates give a meaning (Qwen/SmolLM ChatML, reasoning and tool tags); the <|...|> form covers
# every special token of those tokenizers (<|im_start|>, <|im_end|>, <|endoftext|>, <|vision_start|>, ...).
CONTROL_TOKEN = re.compile(r"<\|[^\s<>|]{1,64}\|>|</?(?:think|tool_call|tool_response|tools)>")


@dataclass(frozen=True)
class ToolCall:
    """One tool invocation: a tool name and its JSON arguments."""

    tool: str
    arguments: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form, as in the trajectory file."""
        return {"tool": self.tool, "arguments": dict(self.arguments)}


@dataclass(frozen=True)
class Action:
    """What a step did: tool calls (one, or several in parallel) or plain text."""

    calls: tuple[ToolCall, ...] = ()
    text: str | None = None
    parallel: bool = False  # written as {"calls": [...]} rather than {"tool", "arguments"}

    @property
    def is_text(self) -> bool:
        """True for a plain-text action (no tool call)."""
        return self.text is not None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Action:
        """Build from one of the three file shapes (already schema-valid)."""
        if "text" in raw:
            return cls(text=raw["text"])
        if "calls" in raw:
            return cls(calls=tuple(ToolCall(c["tool"], c["arguments"]) for c in raw["calls"]), parallel=True)
        return cls(calls=(ToolCall(raw["tool"], raw["arguments"]),))

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form, the same shape it was read from."""
        if self.is_text:
            return {"text": self.text}
        if self.parallel:
            return {"calls": [c.to_json() for c in self.calls]}
        return self.calls[0].to_json()


BLOCK_SEPARATOR = "\n\n"  # the study's literal block separator


def block_char_spans(reasoning: str) -> list[tuple[int, int]]:
    """Character ranges ``[start, end)`` of the reasoning blocks: the pieces of
    ``reasoning.split("\\n\\n")`` that are not whitespace-only, verbatim (the study's rule)."""
    spans, pos = [], 0
    for piece in reasoning.split(BLOCK_SEPARATOR):
        if piece.strip():
            spans.append((pos, pos + len(piece)))
        pos += len(piece) + len(BLOCK_SEPARATOR)
    return spans


def split_blocks(reasoning: str) -> list[str]:
    """Reasoning blocks: the non-whitespace pieces of a literal split on ``"\\n\\n"``, kept verbatim.

    Nothing is stripped or merged, so the text between blocks (a separator, or
    whitespace-only pieces) stays as recorded: an unedited history renders the
    recorded reasoning byte for byte.
    """
    return [reasoning[s:e] for s, e in block_char_spans(reasoning)]


def join_blocks(blocks: list[str]) -> str:
    """Blocks joined with ``"\\n\\n"``; inverse of :func:`split_blocks` for split output."""
    return BLOCK_SEPARATOR.join(blocks)


def replace_blocks(reasoning: str, new: Mapping[int, str | None]) -> str:
    """``reasoning`` with block k replaced by ``new[k]`` (None: removed with one separator); the rest byte-identical.

    When no block is left the result is ``""`` (whitespace-only pieces go too).
    """
    pieces = reasoning.split(BLOCK_SEPARATOR)
    block_of = [i for i, piece in enumerate(pieces) if piece.strip()]
    out: list[str] = []
    for i, piece in enumerate(pieces):
        k = block_of.index(i) if i in block_of else None
        if k is None or k not in new:
            out.append(piece)
        elif (replacement := new[k]) is not None:
            out.append(replacement)
    text = BLOCK_SEPARATOR.join(out)
    return text if text.strip() else ""


@dataclass(frozen=True)
class Step:
    """S_t = (reasoning, action, observation)."""

    reasoning: str
    action: Action
    observation: str | tuple[str, ...] | None
    extra: Mapping[str, Any] = field(default_factory=dict)  # unknown step fields, passed through

    @property
    def blocks(self) -> list[str]:
        """The step's reasoning blocks (see :func:`split_blocks`)."""
        return split_blocks(self.reasoning)

    @property
    def observations(self) -> list[str]:
        """Observation texts, one per call for parallel calls; empty when none."""
        if self.observation is None:
            return []
        if isinstance(self.observation, str):
            return [self.observation]
        return list(self.observation)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form."""
        obs = list(self.observation) if isinstance(self.observation, tuple) else self.observation
        return {"reasoning": self.reasoning, "action": self.action.to_json(), "observation": obs,
                **copy.deepcopy(dict(self.extra))}


@dataclass(frozen=True)
class BoundaryAnnotation:
    """Hand labels for boundary b (after b completed steps)."""

    after_step: int
    future_necessity: int | None = None
    externalization_gap: int | None = None
    note: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)  # unknown fields, passed through

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (unset labels omitted)."""
        out = {k: v for k, v in (("after_step", self.after_step), ("future_necessity", self.future_necessity),
                                 ("externalization_gap", self.externalization_gap), ("note", self.note))
               if v is not None}
        return {**out, **copy.deepcopy(dict(self.extra))}


@dataclass(frozen=True)
class Trajectory:
    """One agent run; see the module docstring and ``docs/reference/data-formats.md``."""

    task_id: str
    domain: str
    system_prompt: str
    task: str
    steps: tuple[Step, ...]
    tools: tuple[Mapping[str, Any], ...] = ()
    final_answer: str | None = None
    outcome: Mapping[str, Any] = field(default_factory=dict)
    annotations: tuple[BoundaryAnnotation, ...] = ()
    source: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # unknown fields, passed through

    @property
    def n_steps(self) -> int:
        """Number of completed steps in the run."""
        return len(self.steps)

    def annotation(self, after_step: int) -> BoundaryAnnotation | None:
        """The hand annotation of boundary ``after_step``, if any."""
        return next((a for a in self.annotations if a.after_step == after_step), None)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Trajectory:
        """Build from a schema-valid record (use :func:`load_trajectories` for files)."""
        steps = tuple(
            Step(
                reasoning=s["reasoning"],
                action=Action.from_json(s["action"]),
                observation=tuple(s["observation"]) if isinstance(s["observation"], list) else s["observation"],
                extra=copy.deepcopy({k: v for k, v in s.items() if k not in STEP_FIELDS}),
            )
            for s in raw["steps"]
        )
        ann = tuple(
            BoundaryAnnotation(
                after_step=a["after_step"],
                future_necessity=a.get("future_necessity"),
                externalization_gap=a.get("externalization_gap"),
                note=a.get("note", ""),
                extra=copy.deepcopy({k: v for k, v in a.items() if k not in BOUNDARY_FIELDS}),
            )
            for a in raw.get("annotations", {}).get("boundaries", [])
        )
        return cls(
            task_id=raw["task_id"],
            domain=raw["domain"],
            system_prompt=raw["system_prompt"],
            task=raw["task"],
            steps=steps,
            tools=tuple(raw.get("tools", [])),
            final_answer=raw.get("final_answer"),
            outcome=dict(raw.get("outcome", {})),
            annotations=ann,
            source=raw.get("source"),
            extra=copy.deepcopy({k: v for k, v in raw.items() if k not in KNOWN_FIELDS}),
        )

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON record; round-trips through :meth:`from_json` (extra fields kept)."""
        out: dict[str, Any] = {
            "task_id": self.task_id,
            "domain": self.domain,
            "system_prompt": self.system_prompt,
            "tools": [dict(t) for t in self.tools],
            "task": self.task,
            "steps": [s.to_json() for s in self.steps],
            "final_answer": self.final_answer,
            "outcome": dict(self.outcome),
        }
        if self.annotations:
            out["annotations"] = {
                "boundaries": [a.to_json() for a in self.annotations]
            }
        if self.source is not None:
            out["source"] = self.source
        out.update(copy.deepcopy(dict(self.extra)))
        return out


class TrajectoryError(InputError):
    """Invalid trajectory input; ``problems`` holds one ``FILE:LINE: field: message`` per issue."""

    kind = "trajectory input"


@cache
def trajectory_schema() -> dict[str, Any]:
    """The JSON Schema of one trajectory record."""
    text = resources.files("interp.data.schemas").joinpath("trajectory.schema.json").read_text()
    return json.loads(text)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def strict_json_problems(value: object, where: tuple[Any, ...] = ()) -> list[tuple[str, str]]:
    """``(field, message)`` for every value strict JSON (RFC 8259) or UTF-8 text cannot hold: NaN and
    Infinity (Python's json reads them) and lone surrogates (a ``\\ud800`` escape decodes to one and no
    UTF-8 writer can print it). Linear in the record's size; iterative, so a deep record cannot recurse."""
    found: list[tuple[str, str]] = []
    stack: list[tuple[tuple[Any, ...], Any]] = [(where, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            shown = "NaN" if math.isnan(item) else ("Infinity" if item > 0 else "-Infinity")
            found.append((_path_str(path), f"{shown} is not a JSON number (strict JSON has no NaN or Infinity); "
                                           "write null or a finite number"))
        elif isinstance(item, str) and _LONE_SURROGATE.search(item):
            found.append((_path_str(path), "lone surrogate (a \\ud800-\\udfff escape without its pair): "
                                           "not valid Unicode; fix the escape or remove the character"))
        elif isinstance(item, dict):
            for key, sub in item.items():
                if isinstance(key, str) and _LONE_SURROGATE.search(key):
                    found.append((_path_str(path), "lone surrogate in a field name"))
                stack.append(((*path, key), sub))
        elif isinstance(item, list):
            stack.extend(((*path, i), sub) for i, sub in enumerate(item))
    return sorted(found)


def _path_str(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(record)"


_ACTION_SHAPES = '{"tool": str, "arguments": object} | {"calls": [...]} | {"text": str}'


def _schema_problems(raw: Any) -> list[tuple[str, str]]:
    validator = jsonschema.Draft202012Validator(trajectory_schema())
    problems = []
    for err in sorted(validator.iter_errors(raw), key=lambda e: list(map(str, e.absolute_path))):
        where = _path_str(err.absolute_path)
        if err.validator == "oneOf" and where.endswith(".action"):
            msg = f"unknown action shape {json.dumps(err.instance)[:80]}; expected {_ACTION_SHAPES}"
        elif err.validator == "oneOf":
            msg = f"{json.dumps(err.instance)[:80]} has the wrong type ({err.schema.get('description', 'see schema')})"
        else:
            msg = err.message
        problems.append((where, msg))
    return problems


NO_REASONING = "no reasoning (the step acts without reasoning blocks; valid)"
NO_TOOLS = ("the trajectory calls tools but declares none (tools is empty), so no call is checked against a "
            "declaration; valid, rendered without tool definitions")


@dataclass
class Findings:
    """What the semantic checks of one record found, by severity: ``(field, message)`` pairs."""

    problems: list[tuple[str, str]] = field(default_factory=list)  # errors: the record is not loaded
    warnings: list[tuple[str, str]] = field(default_factory=list)  # loaded; errors under strict
    notes: list[tuple[str, str]] = field(default_factory=list)  # loaded; shown by `interp validate --strict`


def _semantic_problems(raw: Mapping[str, Any]) -> Findings:
    found = Findings()
    problems = found.problems
    declared = {t["name"] for t in raw.get("tools", [])}
    undeclared_noted = False
    for i, step in enumerate(raw["steps"]):
        if not split_blocks(step["reasoning"]):
            found.notes.append((f"steps[{i}].reasoning", NO_REASONING))
        action = step["action"]
        calls = action.get("calls", [action] if "tool" in action else [])
        if calls and not declared and not undeclared_noted:
            found.notes.append(("tools", NO_TOOLS))
            undeclared_noted = True
        for j, call in enumerate(calls):
            if declared and call["tool"] not in declared:
                where = f"steps[{i}].action" + (f".calls[{j}]" if "calls" in action else "") + ".tool"
                found.warnings.append((where, f"tool {call['tool']!r} is not declared in tools"))
        obs = step["observation"]
        if isinstance(obs, list) and "calls" in action and len(obs) != len(action["calls"]):
            problems.append((f"steps[{i}].observation",
                             f"{len(obs)} observations for {len(action['calls'])} parallel calls"))
    seen: set[int] = set()
    for k, ann in enumerate(raw.get("annotations", {}).get("boundaries", [])):
        b = ann["after_step"]
        if not 1 <= b <= len(raw["steps"]):
            problems.append((f"annotations.boundaries[{k}].after_step",
                             f"{b} out of range 1..{len(raw['steps'])}"))
        if b in seen:
            problems.append((f"annotations.boundaries[{k}].after_step", f"duplicate boundary {b}"))
        seen.add(b)
    return found


@dataclass
class ValidationReport:
    """What :func:`validate_file` found: problems, unknown fields and summary counts."""

    path: Path
    problems: list[str] = field(default_factory=list)
    unknown_fields: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # undeclared tools (problems under strict)
    notes: list[str] = field(default_factory=list)  # steps without reasoning (valid; listed under --strict)
    n_trajectories: int = 0
    n_steps: int = 0
    n_boundaries: int = 0
    domains: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """One line: trajectories, steps, boundaries and domains."""
        doms = ", ".join(f"{d}={n}" for d, n in sorted(self.domains.items()))
        return (f"{self.path}: {self.n_trajectories} trajectories, {self.n_steps} steps, "
                f"{self.n_boundaries} boundaries; domains: {doms}")


def control_token_problems(raw: object, where: str = "") -> list[tuple[str, str]]:
    """``(field path, message)`` for every string of a record (annotations aside) holding a template control token."""
    if isinstance(raw, str):
        found = list(dict.fromkeys(CONTROL_TOKEN.findall(raw)))
        return [(where or "(record)", f"control token(s) {', '.join(found)} in the text would render as the chat "
                                      "template's own tokens; remove them, or pass --allow-control-tokens to keep "
                                      "them as written")] if found else []
    if isinstance(raw, dict):
        return [p for k, v in raw.items() if not (k == "annotations" and not where)
                for p in control_token_problems(v, f"{where}.{k}" if where else str(k))]
    if isinstance(raw, list):
        return [p for i, v in enumerate(raw) for p in control_token_problems(v, f"{where}[{i}]")]
    return []


def _unknown_fields(raw: Mapping[str, Any]) -> list[str]:
    found = [k for k in raw if k not in KNOWN_FIELDS | IMPORT_FIELDS]
    for i, step in enumerate(raw.get("steps", [])):
        if isinstance(step, dict):
            found += [f"steps[{i}].{k}" for k in step if k not in STEP_FIELDS | IMPORT_STEP_FIELDS]
    for i, ann in enumerate(raw.get("annotations", {}).get("boundaries", []) if isinstance(raw.get("annotations"), dict) else []):
        if isinstance(ann, dict):
            found += [f"annotations.boundaries[{i}].{k}" for k in ann if k not in BOUNDARY_FIELDS]
    return found


def iter_records(path: str | Path, report: ValidationReport | None = None,
                 strict: bool = False, allow_control_tokens: bool = False) -> Iterator[tuple[int, Trajectory]]:
    """Stream ``(line_number, Trajectory)`` from a JSONL file, validating each line.

    Problems are appended to ``report.problems`` (invalid lines are skipped); with
    no report, the first problem raises :class:`TrajectoryError`. Warnings (a
    tool not in the declared tools) go to ``report.warnings`` and the record
    loads; with ``strict`` they are problems. Notes (a step without reasoning,
    which is valid) go to ``report.notes``.
    """
    path = Path(path)
    if not path.exists():
        raise TrajectoryError([f"{path}: file not found"])
    if path.is_dir():
        raise TrajectoryError([f"{path}: is a directory, not a trajectory file (JSON Lines)"])
    seen_ids: dict[str, int] = {}
    for entry in read_lines(path):
        at = entry.at(path)
        if entry.problem:
            found = [f"{at}: {entry.problem}"]
        elif not isinstance(entry.value, dict):
            found = [f"{at}: (record): expected a JSON object, got {type(entry.value).__name__}"]
        else:
            found = [f"{at}: {where}: {msg}" for where, msg in
                     _record_problems(entry.value, at, entry.number, report, strict, allow_control_tokens, seen_ids)]
        if found:
            if report is None:
                raise TrajectoryError(found)
            report.problems.extend(found)
            continue
        yield entry.number, Trajectory.from_json(entry.value)


def _record_problems(raw: dict[str, Any], at: str, lineno: int, report: ValidationReport | None, strict: bool,
                     allow_control_tokens: bool, seen_ids: dict[str, int]) -> list[tuple[str, str]]:
    """``(field, message)`` problems of one parsed record; its warnings, notes and unknown fields go to ``report``."""
    probs = strict_json_problems(raw) or _schema_problems(raw)
    if not probs:
        findings = _semantic_problems(raw)
        probs = findings.problems + (findings.warnings if strict else [])
        if report is not None:
            report.warnings.extend(f"{at}: {where}: {msg}" for where, msg in ([] if strict else findings.warnings))
            report.notes.extend(f"{at}: {where}: {msg}" for where, msg in findings.notes)
    if not allow_control_tokens:
        probs += control_token_problems(raw)
    tid = raw.get("task_id")
    if isinstance(tid, str):
        control = sorted({f"U+{ord(c):04X}" for c in tid if unicodedata.category(c) == "Cc"})
        if control:
            probs.append(("task_id", f"{tid!r} holds control character(s) {', '.join(control)}; an id is a name "
                                     "written into label files and shown on pages, give one without them"))
        if tid in seen_ids:
            probs.append(("task_id", f"duplicate task_id {tid!r} (first on line {seen_ids[tid]})"))
        else:
            seen_ids[tid] = lineno
    if report is not None:
        report.unknown_fields.extend(f"{at}: {where}: unknown field (kept and passed through)"
                                     for where in _unknown_fields(raw))
    return probs


def validate_file(path: str | Path, strict: bool = False, allow_control_tokens: bool = False) -> ValidationReport:
    """Validate a whole trajectory file, streaming, collecting every problem, warning and note (an empty file is
    a problem; with ``strict``, warnings are problems; see :func:`iter_records`)."""
    report = ValidationReport(Path(path))
    try:
        for _, traj in iter_records(path, report, strict=strict, allow_control_tokens=allow_control_tokens):
            report.n_trajectories += 1
            report.n_steps += traj.n_steps
            report.n_boundaries += traj.n_steps
            report.domains[traj.domain] = report.domains.get(traj.domain, 0) + 1
    except TrajectoryError as exc:  # missing file, a directory
        report.problems.extend(exc.problems)
    except OSError as exc:
        report.problems.append(f"{path}: cannot read: {exc.strerror or exc}")
    if not report.problems and not report.n_trajectories:
        report.problems.append(f"no trajectories in {path}")
    return report


def load_trajectories(path: str | Path, allow_control_tokens: bool = False) -> list[Trajectory]:
    """Load and validate a trajectory file; raise :class:`TrajectoryError` listing every problem."""
    report = ValidationReport(Path(path))
    out = [t for _, t in iter_records(path, report, allow_control_tokens=allow_control_tokens)]
    if not report.problems and not out:
        report.problems.append(f"no trajectories in {path}")
    if report.problems:
        raise TrajectoryError(report.problems)
    if report.warnings:
        warnings.warn(f"{len(report.warnings)} warning(s) in {path}, e.g. {report.warnings[0]}; "
                      f"`interp validate {path}` lists them", TrajectoryWarning, stacklevel=2)
    return out


class TrajectoryWarning(UserWarning):
    """A trajectory file loaded with warnings (e.g. a tool called that is not declared)."""


def get_trajectory(trajectories: list[Trajectory], task_id: str) -> Trajectory:
    """The trajectory with ``task_id``; a clear error listing a few known ids otherwise."""
    for t in trajectories:
        if t.task_id == task_id:
            return t
    known = ", ".join(t.task_id for t in trajectories[:8])
    raise KeyError(f"no trajectory with task_id {task_id!r} (known: {known}{', ...' if len(trajectories) > 8 else ''})")
