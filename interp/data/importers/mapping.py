"""Any other log format: a JSON field map (dotted paths) or a Python hook (``module:function``).

**Field map** (``interp import map RUNS --map MAP.json``). Each value is a
dotted path into the run record (list items by index: ``events.0.text``) or
``{"const": VALUE}``; step fields are paths into one step object::

    {"runs": "episodes",                      optional: a list of runs inside each record
     "task_id": "meta.id", "domain": {"const": "web"},
     "system_prompt": "config.system", "task": "goal", "tools": "tool_specs",
     "final_answer": "answer", "reward": "score", "success": "solved",
     "steps": "events",                       required: the list of steps
     "step": {"reasoning": "thinking",        string, or a list of strings (one block each)
              "tool": "act.name", "arguments": "act.args",     one call (arguments: object or JSON string)
              "calls": "acts", "call": {"tool": "name", "arguments": "args"},   parallel calls
              "text": "message",              a text action (used when the step has no call)
              "observation": "result"}}       string, list (one per call) or null; other JSON as its text

``task`` and ``steps`` are required; a missing ``reasoning`` is empty, a
missing ``observation`` null; ``task_id`` defaults to the file name and line,
``domain`` to ``unknown``. Tools are ``{name, description, parameters}`` (or
OpenAI ``function`` / Anthropic ``input_schema`` forms).

**Hook** (``interp import map RUNS --hook mypkg.convert:run`` or
``--hook path/to/convert.py:run``): a function called with each record (one
JSONL line, one item of a JSON array, or a whole JSON file) that returns one
trajectory dict or a list of them; an exception it raises skips the record
with its message. Its output is validated like every importer's.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from interp.data.importers.common import (
    RunContext, RunProblem, call_action, expect, join_reasoning, outcome_of, parse_arguments, tool_spec,
)
from interp.io import read_json

FORMAT = "map"
DEFAULT_DOMAIN = "unknown"
TOP_KEYS = {"runs", "task_id", "domain", "system_prompt", "task", "tools", "final_answer", "reward", "success",
            "steps", "step"}
STEP_KEYS = {"reasoning", "tool", "arguments", "calls", "call", "text", "observation"}
CALL_KEYS = {"tool", "arguments"}
_MISSING = object()


def load_map(path: Path) -> dict[str, Any]:
    """Read and check a field map; a ``ValueError`` naming the file and key for a bad one (before any work)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: map file not found")
    spec = read_json(path)  # a ValueError naming the file: not UTF-8, invalid or too deeply nested JSON
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: a field map is a JSON object (see interp/data/importers/mapping.py)")
    step = spec.get("step")
    for keys, obj, where in ((TOP_KEYS, spec, ""), (STEP_KEYS, step, "step."),
                             (CALL_KEYS, (step or {}).get("call") if isinstance(step, dict) else None, "step.call.")):
        if obj is None:
            continue
        if not isinstance(obj, dict):
            raise ValueError(f"{path}: {where.rstrip('.')}: expected an object of field paths")
        for key, value in obj.items():
            if key not in keys:
                raise ValueError(f"{path}: {where}{key}: unknown key; expected one of {', '.join(sorted(keys))}")
            if key not in ("step", "call") and not (isinstance(value, str) and value
                                                    or isinstance(value, dict) and set(value) == {"const"}):
                raise ValueError(f"{path}: {where}{key}: expected a dotted path or {{\"const\": value}}")
    for key in ("task", "steps", "step"):
        if key not in spec:
            raise ValueError(f"{path}: {key}: required (the field map needs task, steps and step)")
    assert isinstance(step, dict)  # checked above: present, and an object
    if not {"tool", "calls", "text"} & set(step):
        raise ValueError(f"{path}: step: needs at least one of tool, calls, text (the step's action)")
    if "calls" in step and "tool" not in step.get("call", {}):
        raise ValueError(f"{path}: step.call.tool: required with step.calls (the tool name inside each call)")
    return spec


def get(obj: object, path: str | dict[str, Any]) -> Any:  # Any: the JSON value found, of any shape
    """The value at a dotted path (``_MISSING`` when absent), or a ``{"const": v}``'s value."""
    if isinstance(path, dict):
        return path["const"]
    for part in path.split("."):
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, list) and part.lstrip("-").isdigit() and -len(obj) <= int(part) < len(obj):
            obj = obj[int(part)]
        else:
            return _MISSING
    return obj


def convert(record: object, ctx: RunContext, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs of one record through the field map ``spec`` (one run unless ``runs`` is mapped)."""
    if "runs" not in spec:
        return [_run(record, ctx, spec, "", ctx.task_id(record))]
    runs = expect(get(record, spec["runs"]), list, spec["runs"], "the list of runs")
    return [_run(run, ctx, spec, f"{spec['runs']}[{k}].", f"{ctx.task_id(record)}-{k}")
            for k, run in enumerate(runs)]


def _field(obj: Any, spec: dict[str, Any], key: str, prefix: str, required: bool = False) -> Any:
    value = get(obj, spec[key]) if key in spec else _MISSING
    if value is _MISSING and required:
        raise RunProblem(f"{prefix}{spec[key]}", f"missing (mapped to {key})")
    return None if value is _MISSING else value


def _run(run: Any, ctx: RunContext, spec: dict[str, Any], prefix: str, default_id: str) -> dict[str, Any]:
    steps = expect(_field(run, spec, "steps", prefix, required=True), list, f"{prefix}{spec['steps']}",
                   "the list of steps")
    task_id = _field(run, spec, "task_id", prefix)
    domain = _field(run, spec, "domain", prefix)
    tools = _field(run, spec, "tools", prefix) or []
    expect(tools, list, f"{prefix}{spec.get('tools')}", "a list of tool declarations")
    return {
        "task_id": str(task_id) if task_id not in (None, "") else default_id,
        "domain": ctx.domain or (domain if isinstance(domain, str) and domain else DEFAULT_DOMAIN),
        "system_prompt": _text(_field(run, spec, "system_prompt", prefix), f"{prefix}{spec.get('system_prompt')}"),
        "tools": [_tool(t, f"{prefix}{spec['tools']}[{i}]") for i, t in enumerate(tools)],
        "task": _text(_field(run, spec, "task", prefix, required=True), f"{prefix}{spec['task']}"),
        "steps": [_step(s, spec["step"], f"{prefix}{spec['steps']}[{i}].") for i, s in enumerate(steps)],
        "final_answer": _field(run, spec, "final_answer", prefix),
        "outcome": outcome_of({"reward": _field(run, spec, "reward", prefix),
                               "success": _field(run, spec, "success", prefix)}),
    }


def _text(value: Any, where: str) -> str:
    """A mapped text: a string, a list of strings (joined as reasoning blocks), null as ''."""
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return join_reasoning(value)
    return expect(value, str, where, "a string or a list of strings")


def _observation(value: Any) -> str | list[str] | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        return [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in value]
    return json.dumps(value, ensure_ascii=False)


def _step(step: Any, spec: dict[str, Any], prefix: str) -> dict[str, Any]:
    expect(step, dict, prefix.rstrip("."), "a step object")
    reasoning = _text(_field(step, spec, "reasoning", prefix), f"{prefix}{spec.get('reasoning')}")
    calls = _field(step, spec, "calls", prefix)
    tool = _field(step, spec, "tool", prefix)
    text = _field(step, spec, "text", prefix)
    if calls:
        at = f"{prefix}{spec['calls']}"
        expect(calls, list, at, "a list of calls")
        action = call_action([_call(c, spec["call"], f"{at}[{j}].") for j, c in enumerate(calls)])
    elif isinstance(tool, str) and tool:
        action = {"tool": tool, "arguments": parse_arguments(_field(step, spec, "arguments", prefix),
                                                             f"{prefix}{spec.get('arguments')}")}
    elif isinstance(text, str):
        action = {"text": text}
    else:
        mapped = ", ".join(f"step.{k} ({spec[k]})" for k in ("calls", "tool", "text") if k in spec)
        raise RunProblem(prefix.rstrip("."), f"no action: none of {mapped} holds a value")
    return {"reasoning": reasoning, "action": action,
            "observation": _observation(_field(step, spec, "observation", prefix))}


def _call(call: Any, spec: dict[str, Any], prefix: str) -> dict[str, Any]:
    expect(call, dict, prefix.rstrip("."), "a call object")
    tool = expect(_field(call, spec, "tool", prefix, required=True), str, f"{prefix}{spec['tool']}", "a tool name")
    return {"tool": tool, "arguments": parse_arguments(_field(call, spec, "arguments", prefix),
                                                       f"{prefix}{spec.get('arguments')}")}


def _tool(tool: Any, where: str) -> dict[str, Any]:
    expect(tool, dict, where, "a tool object")
    fn = tool.get("function", tool)
    return tool_spec(fn.get("name"), fn.get("description"), fn.get("parameters", fn.get("input_schema")), where)


def load_hook(spec: str) -> Callable[[Any], Any]:
    """The function named by ``module:function`` or ``path/to/file.py:function``; a ``ValueError`` if absent."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name.isidentifier():
        raise ValueError(f"--hook {spec!r}: expected module:function or path/to/file.py:function")
    try:
        if target.endswith(".py"):
            file = Path(target)
            if not file.is_file():
                raise ValueError(f"--hook {spec!r}: {file} not found")
            loader = importlib.util.spec_from_file_location(f"interp_import_hook_{file.stem}", file)
            if loader is None or loader.loader is None:
                raise ValueError(f"--hook {spec!r}: {file} cannot be loaded as a Python module")
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except ImportError as exc:
        raise ValueError(f"--hook {spec!r}: cannot import {target} ({exc})") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"--hook {spec!r}: {target} has no function {name!r}")
    return fn


def run_hook(fn: Callable[[Any], Any], record: object) -> list[dict[str, Any]]:
    """The trajectory dicts ``fn`` makes of one record; its exception is this record's problem."""
    try:
        made = fn(record)
    except Exception as exc:  # user code: any failure skips the record, with its message
        raise RunProblem("(hook)", f"{type(exc).__name__}: {exc}") from None
    made = made if isinstance(made, list) else [made]
    for k, run in enumerate(made):
        expect(run, dict, f"(hook result {k})", "a trajectory dict")
    return made
