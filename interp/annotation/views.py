"""What the page gets for one item: the history up to b (G), plus the later steps (y), plus optional rule evidence.

Hindsight cannot leak into a G label: :func:`item_view` of a G item holds the
system prompt, tools, task and steps 1..b, and nothing of steps b+1..n (the
key ``later`` is absent, and the rule evidence of G looks only at steps 1..b).
A y item adds ``later`` (steps b+1..n) and, with suggestions, the rule that
fired and its step (:func:`probes.targets.label_target`). All text is sent as
JSON strings; the page inserts it as text, never as markup.
"""

from __future__ import annotations

import json
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


def step_view(step: Step, t: int) -> dict[str, Any]:
    """``{step, reasoning: [blocks], action, observations: [texts]}`` of step ``t`` (1-based)."""
    return {"step": t, "reasoning": step.blocks, "action": action_text(step), "observations": step.observations}


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


def item_view(traj: Trajectory, item: Item, suggestions: bool = False, sources: Sources | None = None
              ) -> dict[str, Any]:
    """The page's payload for ``item``: history 1..b, later steps for y only, rule evidence when asked."""
    b = item.after_step
    out: dict[str, Any] = {
        "task_id": traj.task_id, "domain": traj.domain, "after_step": b, "n_steps": traj.n_steps,
        "field": item.field, "system_prompt": traj.system_prompt,
        "tools": json.dumps(list(traj.tools), ensure_ascii=False, indent=1) if traj.tools else "",
        "task": traj.task, "history": [step_view(s, t) for t, s in enumerate(traj.steps[:b], start=1)],
    }
    if item.field == "future_necessity":
        out["later"] = [step_view(s, t) for t, s in enumerate(traj.steps[b:], start=b + 1)]
    if suggestions:
        out["evidence"] = (gap_evidence(traj, b, sources) if item.field == "externalization_gap"
                           else target_evidence(traj, b))
    return out
