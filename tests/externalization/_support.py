"""Paths and hand-made trajectories for the externalization tests (built in memory, no files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interp.data.trajectory import Trajectory

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo" / "trajectories.jsonl"
DEMO_STATES = ROOT / "data" / "demo" / "states.jsonl"
MINI = ROOT / "tests" / "data" / "mini.jsonl"
TOOLS = [{"name": n, "description": n, "parameters": {"type": "object", "properties": {}}}
         for n in ("read_file", "write_file", "run_shell", "http_request")]


def make_trajectory(task: str, steps: list[dict[str, Any]], task_id: str = "t-1") -> Trajectory:
    """A trajectory from ``{reasoning, action, observation}`` step dicts (action: a tool call or ``{"text"}``)."""
    raw = {"task_id": task_id, "domain": "code", "system_prompt": "You are an agent.", "tools": TOOLS,
           "task": task, "steps": steps, "final_answer": None, "outcome": {}}
    return Trajectory.from_json(raw)
