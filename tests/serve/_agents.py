"""Request bodies shaped as Claude Code and Codex CLI send them, built from their real public session files.

The conversations are the real ones of ``tests/importers/samples`` (sources, commits and licenses in the
SOURCES.md there): ``yoavf_claude-code-pomodoro-timer.jsonl`` (Claude Code 2.0.24, extended thinking on: signed
``thinking`` blocks, ``tool_use`` / ``tool_result``) and the acidicsoil Codex rollout (Codex CLI 0.58.0,
gpt-5.1-codex: ``reasoning`` items with summaries and ``encrypted_content``, ``function_call`` /
``function_call_output``). The envelope of each request (the fields besides the history) is the clients' own,
as recorded publicly; see tests/serve/SOURCES.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SAMPLES = Path(__file__).resolve().parents[1] / "importers" / "samples"
CLAUDE_CODE = SAMPLES / "claude-code" / "yoavf_claude-code-pomodoro-timer.jsonl"
CODEX = SAMPLES / "codex" / "acidicsoil_rollout-2025-11-17T15-30-28-019a93b9-f380-7600-98ff-940e6b99603c.jsonl"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def claude_code_messages() -> list[dict[str, Any]]:
    """The session's API messages as Claude Code sends them back: one message per API message (the entries of
    one ``message.id`` joined, their blocks in order), consecutive user entries joined into one user message."""
    out: list[dict[str, Any]] = []
    last_id = None
    for entry in _lines(CLAUDE_CODE):
        if entry.get("type") not in ("user", "assistant") or entry.get("isSidechain"):
            continue
        msg = entry["message"]
        blocks = [{"type": "text", "text": msg["content"]}] if isinstance(msg["content"], str) else msg["content"]
        same = out and out[-1]["role"] == msg["role"] and (msg["role"] == "user" or msg.get("id") == last_id)
        if same:
            out[-1]["content"] = [*out[-1]["content"], *blocks]
        else:
            out.append({"role": msg["role"], "content": list(blocks)})
        last_id = msg.get("id")
    return out


def claude_code_body(n_messages: int, stream: bool = True) -> dict[str, Any]:
    """A ``POST /v1/messages`` body of Claude Code 2.0 with the session's first ``n_messages`` messages (ending on a
    user message: the request after a tool result)."""
    messages = claude_code_messages()[:n_messages]
    assert messages[-1]["role"] == "user"
    session = next(e["sessionId"] for e in _lines(CLAUDE_CODE) if e.get("sessionId"))
    return {"model": "claude-sonnet-4-5-20250929", "messages": messages,
            "system": [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
                        "cache_control": {"type": "ephemeral"}},
                       {"type": "text", "text": "\nYou are an interactive CLI tool that helps users with software "
                        "engineering tasks...", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": name, "description": f"{name} tool", "input_schema": {"type": "object",
                       "properties": {}, "$schema": "http://json-schema.org/draft-07/schema#"}}
                      for name in ("Bash", "Write", "TodoWrite")],
            "metadata": {"user_id": f"user_{'0' * 64}_account__session_{session}"},
            "max_tokens": 32000, "thinking": {"type": "enabled", "budget_tokens": 31999}, "stream": stream}


def codex_items() -> tuple[str, list[dict[str, Any]], str]:
    """The rollout's instructions, its ``response_item`` payloads (the Responses items Codex sends back as
    ``input``; ghost snapshots are Codex's own and never sent) and its session id."""
    lines = _lines(CODEX)
    meta = next(x["payload"] for x in lines if x["type"] == "session_meta")
    items = [x["payload"] for x in lines if x["type"] == "response_item"
             and x["payload"].get("type") != "ghost_snapshot"]
    return meta["instructions"], items, meta["id"]


def codex_body(n_turns: int, stream: bool = True) -> dict[str, Any]:
    """A ``POST /v1/responses`` body of Codex CLI 0.58 (``store: false``: the whole history each time) holding the
    rollout's opening messages and its first ``n_turns`` turns (reasoning, call, output)."""
    instructions, items, session = codex_items()
    first = next(i for i, it in enumerate(items) if it.get("type") == "reasoning")
    return {"model": "gpt-5.1-codex", "instructions": instructions, "input": items[:first + 3 * n_turns],
            "tools": [{"type": "function", "name": "shell", "description": "Runs a shell command and returns its "
                       "output.", "strict": False,
                       "parameters": {"type": "object", "properties": {"command": {"type": "array",
                                      "items": {"type": "string"}}, "workdir": {"type": "string"},
                                      "timeout_ms": {"type": "number"}}, "required": ["command"],
                                      "additionalProperties": False}}],
            "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": {"effort": "high", "summary": "auto"},
            "store": False, "stream": stream, "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": session}


def agents_sdk_body(n_turns: int, stream: bool = False) -> dict[str, Any]:
    """A ``POST /v1/responses`` body as the OpenAI Agents SDK sends it on its own history (no
    ``previous_response_id``): the task as a short-form message (``{"content", "role"}``), then each earlier output
    item as the API returned it (``model_dump(exclude_unset=True)``: ``id`` and ``status`` kept, no
    ``encrypted_content`` unless asked for) and each tool result as a ``function_call_output``; the turns are the
    Codex rollout's."""
    instructions, items, _ = codex_items()
    first = next(i for i, it in enumerate(items) if it.get("type") == "reasoning")
    task = next(it for it in items if it.get("role") == "user")["content"][0]["text"]
    history: list[dict[str, Any]] = [{"content": task, "role": "user"}]
    for k, it in enumerate(items[first:first + 3 * n_turns]):
        if it["type"] == "reasoning":
            history.append({"id": f"rs_{k:04d}", "summary": it["summary"], "type": "reasoning"})
        elif it["type"] == "function_call":
            history.append({"arguments": it["arguments"], "call_id": it["call_id"], "name": it["name"],
                            "type": "function_call", "id": f"fc_{k:04d}", "status": "completed"})
        else:
            history.append({"call_id": it["call_id"], "output": it["output"], "type": "function_call_output"})
    return {"input": history, "model": "gpt-5", "instructions": instructions,
            "tools": [{"name": "shell", "parameters": {"type": "object", "properties": {
                "command": {"type": "array", "items": {"type": "string"}}}, "required": ["command"],
                "additionalProperties": False}, "strict": True, "type": "function",
                "description": "Runs a shell command."}],
            "reasoning": {"effort": "medium", "summary": "auto"}, "stream": stream}
