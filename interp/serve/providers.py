"""What each upstream kind lets the proxy edit: the provider rules, as data (``PROVIDERS``).

Every policy's edit passes through the rules of the request's upstream kind before it is forwarded: where a
provider forbids the policy's unit (an edit inside a signed thinking block, inside an encrypted reasoning item, or
emptying a field the provider requires), the unit is coarsened as the rule says and the request's log line lists
it (``coarsened`` in ``requests.jsonl``). A request whose edit the upstream still refuses with a 4xx is sent again
once, unedited (both attempts logged).

| kind | API | reasoning edits | must stay | never edited |
|---|---|---|---|---|
| `openai-chat` | chat completions | any text edit | - | - |
| `deepseek` | chat completions | any text edit | `reasoning_content` of tool-call turns, non-empty (an edit that would empty it keeps it whole) | - |
| `anthropic` | messages | whole blocks only (a block the policy changed is dropped whole) | the thinking blocks of the latest assistant turn when it calls tools and thinking is on | `signature`, `redacted_thinking` data |
| `openai-responses` | responses | whole items only (an item the policy changed is dropped whole) | a call's `id` only with its reasoning item (a turn that loses one sends its other items without `id`) | `encrypted_content` |

The kind of a request: ``--provider`` when it names a kind of the request's API, else the API's own
(``anthropic`` for ``/v1/messages``, ``openai-responses`` for ``/v1/responses``; for chat completions
``deepseek`` when the upstream URL or the request's model names DeepSeek, else ``openai-chat``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from interp.data.importers.common import REASONING_JOIN

APIS = ("chat", "messages", "responses")
UNITS = ("text", "block", "item")
REQUIRED = ("none", "tool_call_turns", "latest_tool_turn")


@dataclass(frozen=True)
class Capability:
    """The rules of one upstream kind (module table)."""

    kind: str
    api: str  # the request API it applies to: one of APIS
    reasoning_unit: str  # "text": any edit; "block" / "item": whole signed blocks / reasoning items only
    required: str  # reasoning that must stay: "none", "tool_call_turns" (non-empty), "latest_tool_turn" (whole)
    opaque: tuple[str, ...]  # fields never edited (kept or dropped with their unit)
    doc: tuple[str, str, str]  # the table's reasoning edits, must stay, never edited columns

    def row(self) -> str:
        """This kind's row of the module table (the user guide quotes it)."""
        api = {"chat": "chat completions", "messages": "messages", "responses": "responses"}[self.api]
        return f"| `{self.kind}` | {api} | {' | '.join(self.doc)} |"


PROVIDERS: Mapping[str, Capability] = {c.kind: c for c in (
    Capability("openai-chat", "chat", "text", "none", (), ("any text edit", "-", "-")),
    Capability("deepseek", "chat", "text", "tool_call_turns", (),
               ("any text edit", "`reasoning_content` of tool-call turns, non-empty (an edit that would empty it "
                "keeps it whole)", "-")),
    Capability("anthropic", "messages", "block", "latest_tool_turn", ("signature", "data"),
               ("whole blocks only (a block the policy changed is dropped whole)", "the thinking blocks of the latest "
                "assistant turn when it calls tools and thinking is on", "`signature`, `redacted_thinking` data")),
    Capability("openai-responses", "responses", "item", "none", ("encrypted_content",),
               ("whole items only (an item the policy changed is dropped whole)", "a call's `id` only with its "
                "reasoning item (a turn that loses one sends its other items without `id`)", "`encrypted_content`")),
)}
KINDS = ("auto", *PROVIDERS)


def table() -> str:
    """The capability table in markdown (the module docstring's, and the user guide's)."""
    head = "| kind | API | reasoning edits | must stay | never edited |\n|---|---|---|---|---|\n"
    return head + "\n".join(c.row() for c in PROVIDERS.values()) + "\n"


def capability_for(chosen: str, api: str, upstream: str, model: object) -> Capability:
    """The rules of a request on ``api`` (module docstring: the chosen kind when it is one of that API, else the
    API's own)."""
    if chosen in PROVIDERS and PROVIDERS[chosen].api == api:
        return PROVIDERS[chosen]
    if api == "messages":
        return PROVIDERS["anthropic"]
    if api == "responses":
        return PROVIDERS["openai-responses"]
    named = "deepseek" in upstream.lower() or (isinstance(model, str) and "deepseek" in model.lower())
    return PROVIDERS["deepseek" if named else "openai-chat"]


def whole_units(units: Sequence[str], edited: str) -> tuple[list[bool], bool]:
    """Which of a turn's reasoning units (signed blocks, reasoning items; joined as the importers join them) to
    keep so that the edited reasoning is approached by whole units: a unit whose text survives verbatim, in order,
    is kept; a unit the policy changed is dropped whole; blank units (only opaque data) are kept unless the policy
    removed the turn's reasoning entirely. Returns the flags and whether the edit was met exactly."""
    if not edited.strip():
        return [False] * len(units), True
    keep, pos = [], 0
    for text in units:
        if not text.strip():
            keep.append(True)
            continue
        at = edited.find(text, pos)
        keep.append(at >= 0)
        pos = at + len(text) if at >= 0 else pos
    exact = REASONING_JOIN.join(t for t, k in zip(units, keep) if k and t.strip()) == edited
    return keep, exact
