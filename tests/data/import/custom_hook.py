"""A hook for `interp import map hooked.jsonl --hook tests/data/import/custom_hook.py:convert` (a test sample).

Each record is ``{"name", "prompt", "turns": [[thought, "tool(argument)" or null, output or null], ...]}``.
"""

import re

CALL = re.compile(r"(\w+)\((.*)\)", re.DOTALL)


def convert(record):
    steps = []
    for thought, call, output in record["turns"]:
        if call is None:
            action = {"text": thought.split(", so ")[-1]}
        else:
            tool, arg = CALL.fullmatch(call).groups()
            action = {"tool": tool, "arguments": {"command": arg}}
        steps.append({"reasoning": thought, "action": action, "observation": output})
    return {"task_id": record["name"], "domain": "shell", "system_prompt": "You run shell commands.",
            "tools": [{"name": "sh", "description": "Run a shell command", "parameters": {"type": "object"}}],
            "task": record["prompt"], "steps": steps, "final_answer": steps[-1]["action"].get("text")}
