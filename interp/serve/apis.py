"""The request APIs the proxy edits: how each one's body maps to a trajectory and back, names its session and
reports usage (``interp.serve.messages`` chat completions, ``interp.serve.anthropic`` Messages,
``interp.serve.responses`` Responses)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from interp.serve import anthropic, responses


@dataclass(frozen=True)
class Api:
    """One request API: its name (``interp.serve.providers.APIS``), upstream path, the body key of its history, and
    its mapping, write-back, usage reader, session field and unedited-reason functions."""

    name: str
    path: str
    items: str
    history_of: Callable[[Mapping[str, Any], str], Any]
    write_back: Callable[..., dict[str, Any]]  # (body, history, edited, log, capability, notes) -> new body
    usage: Callable[[object], dict[str, int | None]]
    session: Callable[[Mapping[str, Any]], str | None]  # the client's own run id in the body, when it sends one
    unedited: Callable[[Mapping[str, Any]], str | None]


def _none(body: Mapping[str, Any]) -> str | None:
    return None


def _claude_session(body: Mapping[str, Any]) -> str | None:
    """Claude Code's ``metadata.user_id`` (it holds the session's id: one per agent run)."""
    meta = body.get("metadata")
    user = meta.get("user_id") if isinstance(meta, dict) else None
    return user if isinstance(user, str) and "session" in user else None


def _codex_session(body: Mapping[str, Any]) -> str | None:
    """Codex CLI's ``prompt_cache_key`` (its conversation id: one per agent run)."""
    key = body.get("prompt_cache_key")
    return key if isinstance(key, str) and key else None


MESSAGES = Api("messages", "/messages", "messages", anthropic.history_of, anthropic.write_back, anthropic.usage_of,
               _claude_session, _none)
RESPONSES = Api("responses", "/responses", "input", responses.history_of, responses.write_back, responses.usage_of,
                _codex_session, responses.unedited_reason)
