"""Facts about an agent's actions that several analyses read: does a step write code, what are an action's leaves.

One home for these rules: the ``clear_after_code`` condition, the
externalization labeler (state written into files counts as externalized)
and the continuation rubric (``writes_code``) all ask the same question.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from interp.data.trajectory import Step

# Whole words of the tool name (split on _ - . and camelCase): "write_file", "saveFile", not "input_text".
WRITE_TOOL_RE = re.compile(r"(?:^|[_\-.])(write|create|save|edit|patch|apply|append|put|upload)(?=$|[_\-.])", re.I)
CODE_ARG_KEYS = ("content", "code", "patch", "diff", "body", "text", "new_content")


def writes_code(step: Step) -> bool:
    """True when the step's action writes code or a file (write-like tool with a content argument)."""
    for call in step.action.calls:
        has_content = any(key in call.arguments for key in CODE_ARG_KEYS)
        words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", call.tool)
        if WRITE_TOOL_RE.search(words) and has_content:
            return True
    return False


def argument_leaves(value: object, path: str = "") -> Iterator[tuple[str, str]]:
    """``(dotted.path[i], text)`` of every leaf of a JSON value (non-strings as JSON; None skipped)."""
    if isinstance(value, Mapping):
        for key, sub in value.items():
            yield from argument_leaves(sub, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (list, tuple)):
        for i, sub in enumerate(value):
            yield from argument_leaves(sub, f"{path}[{i}]")
    elif value is not None:
        yield path, value if isinstance(value, str) else json.dumps(value)
