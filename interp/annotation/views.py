"""What the page gets for one item: the history up to b (G), plus the later steps (y), plus optional rule evidence.

Hindsight cannot leak into a G label: :func:`item_view` of a G item holds the
system prompt, tools, task and steps 1..b, and nothing of steps b+1..n (the
key ``later`` is absent, and the rule evidence of G looks only at steps 1..b).
A y item adds ``later`` (steps b+1..n) and, with suggestions, the rule that
fired and its step (:func:`probes.targets.label_target`). All text is sent as
JSON strings; the page inserts it as text, never as markup.

Actions are sent as code, not one-line JSON: :func:`call_view` splits a tool
call into its arguments; a string argument with a line break is a code block
(its newlines kept; highlighted by Pygments, on the server, when the call
names a file of a known language or the argument is a shell command), an edit
(``old_str``/``new_str`` and the like) is a line diff, a patch argument is
shown with its ``+``/``-`` lines marked.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

from interp.annotation.session import Item
from interp.data.trajectory import Step, Trajectory
from interp.externalization.labeler import GapLabelerConfig, Sources, label_gap
from probes.targets import label_target


def action_text(step: Step) -> str:
    """A step's action as one readable text: ``tool {json arguments}`` per call, or the plain text."""
    if step.action.is_text:
        return step.action.text or ""
    return "\n".join(f"{c.tool} {json.dumps(dict(c.arguments), ensure_ascii=False)}" for c in step.action.calls)


# (old, new) argument names of edit tools (SWE-agent / OpenHands str_replace, Claude Code Edit, generic)
EDIT_PAIRS = (("old_str", "new_str"), ("old_string", "new_string"), ("old", "new"), ("old_text", "new_text"))
PATCH_ARGS = ("patch", "diff", "input")  # an argument holding a unified diff or an apply_patch envelope
PATCH_START = ("--- ", "diff --git", "*** Begin Patch", "@@ ")
PATH_ARGS = ("path", "file_path", "filename", "file", "target_file")  # the file a write or edit names
SHELL_ARGS = ("command", "cmd", "script")  # arguments holding a shell command


def highlight(text: str, filename: str | None = None, language: str | None = None) -> list[list[str]] | None:
    """``[[css_class, text], ...]`` of ``text`` tokenized by Pygments (the lexer of ``filename``, else of
    ``language``; Pygments' short token classes: ``k`` keyword, ``s2`` string, ``c1`` comment, ...), or None when
    no lexer fits. The pieces join back to ``text`` exactly."""
    from pygments.lexers import get_lexer_by_name, get_lexer_for_filename
    from pygments.token import STANDARD_TYPES
    from pygments.util import ClassNotFound

    options = {"stripnl": False, "ensurenl": False}
    try:
        lexer = (get_lexer_for_filename(filename, **options) if filename
                 else get_lexer_by_name(language, **options) if language else None)
    except ClassNotFound:
        return None
    if lexer is None:
        return None
    out: list[list[str]] = []
    for ttype, value in lexer.get_tokens(text):
        while ttype not in STANDARD_TYPES:
            ttype = ttype.parent
        css = STANDARD_TYPES[ttype]
        if out and out[-1][0] == css:
            out[-1][1] += value
        else:
            out.append([css, value])
    return out if "".join(piece for _, piece in out) == text else None


def diff_lines(old: str, new: str) -> list[list[str]]:
    """``[[op, line], ...]`` of a whole-text line diff of ``old`` -> ``new`` (op ``-`` removed, ``+`` added, `` `` kept)."""
    a, b = old.splitlines(), new.splitlines()
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        out += [["-", line] for line in a[i1:i2] if tag != "equal"]
        out += [[" " if tag == "equal" else "+", line] for line in b[j1:j2]]
    return out


def patch_lines(patch: str) -> list[list[str]]:
    """``[[op, line], ...]`` of a patch text: ``@`` for file headers and hunks, else its first character when ``+`` or
    ``-``, else `` ``."""
    return [["@" if line.startswith(("--- ", "+++ ", "@@")) else line[:1] if line[:1] in "+-" else " ", line]
            for line in patch.splitlines()]


def call_view(tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``{tool, args: [{name, kind, text | lines}]}``: kind ``value`` (one-line JSON), ``code`` (a string with line
    breaks, shown as written) or ``diff`` (an edit's old -> new, or a patch)."""
    args: list[dict[str, Any]] = []
    pairs = [(o, n) for o, n in EDIT_PAIRS if isinstance(arguments.get(o), str) and isinstance(arguments.get(n), str)]
    paired = {name for pair in pairs for name in pair}
    filename = next((str(arguments[k]) for k in PATH_ARGS if isinstance(arguments.get(k), str)), None)
    for name, value in arguments.items():
        if name in paired:
            continue
        if isinstance(value, str) and name in PATCH_ARGS and value.lstrip().startswith(PATCH_START):
            args.append({"name": name, "kind": "diff", "lines": patch_lines(value)})
        elif isinstance(value, str) and "\n" in value:
            tokens = highlight(value, filename) if name not in SHELL_ARGS else highlight(value, language="bash")
            args.append({"name": name, "kind": "code", "text": value, **({"tokens": tokens} if tokens else {})})
        else:
            args.append({"name": name, "kind": "value", "text": json.dumps(value, ensure_ascii=False)})
    args += [{"name": f"{o} \u2192 {n}", "kind": "diff", "lines": diff_lines(arguments[o], arguments[n])}
             for o, n in pairs]
    return {"tool": tool, "args": args}


def step_view(step: Step, t: int) -> dict[str, Any]:
    """``{step, reasoning: [blocks], action, calls, observations: [texts]}`` of step ``t`` (1-based); ``action`` is
    the action as one text (searchable), ``calls`` its tool calls as :func:`call_view` (empty for a text action)."""
    calls = [call_view(c.tool, c.arguments) for c in step.action.calls]
    return {"step": t, "reasoning": step.blocks, "action": action_text(step), "calls": calls,
            "observations": step.observations}


def gap_evidence(traj: Trajectory, b: int, sources: Sources | None = None) -> dict[str, Any]:
    """The G rule labeler's suggestion at b: its label, the items it found only in reasoning, where it looked."""
    config = GapLabelerConfig()
    label = label_gap(traj, b, config, sources)
    return {"rule_label": label.externalization_gap, "scope": config.scope,
            "looked_in": ["given text: task, system prompt, tool definitions",
                          *(f"carrier {kind} of steps 1..{b}" for kind in config.carriers)],
            "only_in_reasoning": [{"kind": e.kind, "text": e.text, "step": e.step, "block": e.block}
                                  for e in label.missing()]}


def target_evidence(traj: Trajectory, b: int) -> dict[str, Any]:
    """The y rule labeler's suggestion at b: its label and every rule that fired, with its later step."""
    label = label_target(traj, b)
    return {"rule_label": label.y, "fired": [dict(e) for e in label.evidence]}


QUESTIONS = {  # the question on the page and what 0 and 1 mean (a summary; the guideline is the definition)
    "externalization_gap": {
        "name": "G (externalization gap)",
        "question": "After step {b}: does derived state live only in the reasoning of steps 1..{b}?",
        "1": "some plan, relation, constraint or conclusion worked out in reasoning is in no carrier "
             "(written file, tool output, feedback) at or before step {b}",
        "0": "everything derived is also in a carrier, or nothing task-specific was derived"},
    "future_necessity": {
        "name": "y (future necessity)",
        "question": "After step {b}: does the rest of the run re-derive, add reasoning or re-plan?",
        "1": "a later step re-derives something already worked out, adds reasoning, or explicitly re-plans",
        "0": "the later steps go on with what was already worked out"},
}


def question(field: str, b: int) -> dict[str, str]:
    """The page's question of ``field`` at boundary ``b``: ``{name, question, 0, 1}``."""
    return {k: v.replace("{b}", str(b)) for k, v in QUESTIONS[field].items()}


def item_view(traj: Trajectory, item: Item, suggestions: bool = False, sources: Sources | None = None
              ) -> dict[str, Any]:
    """The page's payload for ``item``: history 1..b, later steps for y only, rule evidence when asked."""
    b = item.after_step
    out: dict[str, Any] = {
        "task_id": traj.task_id, "domain": traj.domain, "after_step": b, "n_steps": traj.n_steps,
        "field": item.field, "system_prompt": traj.system_prompt,
        "tools": json.dumps(list(traj.tools), ensure_ascii=False, indent=1) if traj.tools else "",
        "task": traj.task, "history": [step_view(s, t) for t, s in enumerate(traj.steps[:b], start=1)],
        "question": question(item.field, b),
    }
    if item.field == "future_necessity":
        out["later"] = [step_view(s, t) for t, s in enumerate(traj.steps[b:], start=b + 1)]
    if suggestions:
        out["evidence"] = (gap_evidence(traj, b, sources) if item.field == "externalization_gap"
                           else target_evidence(traj, b))
    return out
