"""Claude Code session files (``~/.claude/projects/PROJECT/SESSION.jsonl``): one session file, one run.

The file is read whole (:mod:`.session`). Each line is an entry with a ``type``;
``user`` and ``assistant`` entries hold an Anthropic Messages API ``message``
and are linked by ``uuid`` / ``parentUuid``. What is mapped
(``docs/reference/importers.md`` lists it with what is dropped):

* **the conversation is a chain**: from the last main entry (``isSidechain``
  false) back through ``parentUuid`` (``logicalParentUuid`` across a
  compaction) to the root; entries off that chain (a rewound or retried
  branch) are dropped and counted, and so are the branch points. A session
  with no chain (no entry names a parent: an exported or hand-made file) is
  read in file order; so is a broken chain (a parent no entry of the file
  has, or a cycle), the break counted by kind;
* **subagents are kept apart**: entries with ``isSidechain: true`` (the runs
  of the ``Task`` tool, written into the session file by Claude Code 1.x) form
  their own chains, one per root; each is a run of its own, task id
  ``SESSION/subagent-K`` (K = 1, 2, ... in the order the subagents started);
  the main run keeps the ``Task`` call and its result (the subagent's answer).
  A file holding only sidechain entries (a subagent's own file,
  ``SESSION/subagents/agent-ID.jsonl`` in later versions) is that subagent's
  run, named by the file (``agent-ID``);
* one API message is written as several ``assistant`` entries (one per
  content block, the same ``message.id``): they are one turn, so one step
  (its tool calls parallel), even when tool results come between them;
* ``thinking`` blocks are the reasoning; ``redacted_thinking`` blocks are
  counted (step field ``redacted_thinking: N``); ``tool_use`` blocks are the
  action; ``text`` blocks the text action (or, beside calls, the thought or
  ``assistant_text`` as in :class:`~interp.data.importers.common.ChatSteps`);
* ``tool_result`` blocks answer the calls by ``tool_use_id`` (``is_error``:
  step field ``is_error``); user text before the first assistant turn is the
  task (a slash command and its expansion, ``isMeta``, included); later user
  text is the reply to a text action;
* ``summary`` entries (the session's title) go to ``metadata.summaries``;
  the session id, Claude Code versions, models, ``cwd`` and git branch to
  ``metadata``. No system prompt or tool declarations are written to the
  file, so ``system_prompt`` is ``""`` and ``tools`` is empty.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from interp.data.importers.common import (
    PART_JOIN, ChatSteps, RunContext, RunProblem, expect, join_reasoning, parse_arguments, text_of,
)
from interp.data.importers.session import Entry, LineProblem, entries_of

FORMAT = "claude-code"
DEFAULT_DOMAIN = "code"
MESSAGE_TYPES = ("user", "assistant")
# entry types that carry no conversation: counted by type (their text is Claude Code's own bookkeeping)
OTHER_TYPES = frozenset({"summary", "system", "file-history-snapshot", "queue-operation", "last-prompt", "progress",
                         "attachment", "custom-title", "tag", "agent-name", "pr-link", "permission-mode"})
ENTRY_USED = frozenset({"type", "message", "uuid", "parentUuid", "logicalParentUuid", "isSidechain"})
# entry fields the format documents dropping (counted by path): bookkeeping, and toolUseResult (a structured copy
# of the tool result the model saw in the tool_result block)
ENTRY_KNOWN = frozenset({"userType", "cwd", "sessionId", "version", "gitBranch", "timestamp", "requestId",
                         "toolUseResult", "isMeta", "isCompactSummary", "isVisibleInTranscriptOnly", "agentId",
                         "slug", "entrypoint", "permissionMode", "promptId", "thinkingMetadata", "todos",
                         "isApiErrorMessage", "level", "subtype", "content", "imagePasteIds", "mcpMeta",
                         "sourceToolUseID", "sourceToolAssistantUUID", "teamName", "planContent", "origin"})
MESSAGE_USED = frozenset({"role", "content"})
MESSAGE_KNOWN = frozenset({"id", "type", "model", "stop_reason", "stop_sequence", "stop_details", "usage",
                           "container", "context_management"})
BLOCK_USED = {"text": frozenset({"type", "text"}), "thinking": frozenset({"type", "thinking"}),
              "redacted_thinking": frozenset({"type"}), "tool_use": frozenset({"type", "id", "name", "input"}),
              "tool_result": frozenset({"type", "tool_use_id", "content", "is_error"})}
STEP_AT = "assistant.message@"  # a step's location for ChatSteps: the turn's first line follows
BLOCK_KNOWN = frozenset({"signature", "data", "citations", "cache_control", "caller", "agentId"})


def claims_line(value: object) -> bool:
    """Whether a JSON Lines file starting with ``value`` is a Claude Code session (its first entry)."""
    if not isinstance(value, Mapping):
        return False
    kind = value.get("type")
    if kind in MESSAGE_TYPES:  # an exported or hand-made session may have no parentUuid: a uuid or sessionId
        return (any(key in value for key in ("parentUuid", "uuid", "sessionId"))
                and isinstance(value.get("message"), Mapping))
    # bookkeeping entries open many files (a file-history-snapshot has a messageId, not a sessionId)
    return kind in OTHER_TYPES and any(key in value for key in ("sessionId", "leafUuid", "messageId", "uuid"))


def looks_like(record: object) -> bool:
    """Sniff (``interp import auto``): a session file gathered for this format."""
    return entries_of(record, FORMAT) is not None


@dataclass
class _Session:
    """The entries of one session file indexed by uuid, and the session's metadata."""

    by_uuid: dict[str, Entry] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def convert_all(record: object, ctx: RunContext) -> list[dict[str, Any] | RunProblem]:
    """The main run of a session file and each subagent run (see the module docstring)."""
    entries = entries_of(record, FORMAT)
    if entries is None:
        raise RunProblem("(record)", "not a Claude Code session file: expected JSON Lines entries with type user / "
                                     "assistant, uuid and parentUuid (a ~/.claude/projects/*/*.jsonl file)")
    session = _index(entries, ctx)
    messages = [e for e in entries if e.value.get("type") in MESSAGE_TYPES]
    main = [e for e in messages if e.value.get("isSidechain") is not True]
    side = [e for e in messages if e.value.get("isSidechain") is True]
    if not messages:
        raise LineProblem(entries[0].line, "(file)", "no user or assistant entry: nothing to import")
    sid = session.meta.get("sessionId")
    base = ctx.task_id({"id": sid} if isinstance(sid, str) and sid else {})
    named: list[tuple[str, list[Entry]]] = []
    if main:
        named.append((base, _conversation(main, session, ctx)))
    else:  # a subagent's own file (SESSION/subagents/agent-ID.jsonl): its runs are named by the file
        base = ctx.stem
    subagents = _subagents(side, session, base, ctx)
    if not main and len(subagents) == 1:
        subagents = [(base, subagents[0][1])]
    runs: list[dict[str, Any] | RunProblem] = []
    for name, run_chain in [*named, *subagents]:
        try:
            runs.append({"task_id": name, "domain": ctx.domain or DEFAULT_DOMAIN, "system_prompt": "", "tools": [],
                         **_steps(run_chain, ctx), "outcome": {},
                         "metadata": {**session.meta, **({"subagent_of": base} if main and name != base else {})}})
        except RunProblem as exc:
            runs.append(exc)
    return runs


def _index(entries: list[Entry], ctx: RunContext) -> _Session:
    """Entries by uuid; every entry checked to be an object; non-message entries counted; metadata gathered."""
    session = _Session()
    versions: list[str] = []
    models: list[str] = []
    summaries: list[str] = []
    for e in entries:
        value = e.value
        if not isinstance(value, Mapping):
            raise LineProblem(e.line, "(line)", "expected a session entry object")
        kind = value.get("type")
        if isinstance(value.get("uuid"), str):
            session.by_uuid[value["uuid"]] = e
        message = value.get("message")
        model = message.get("model") if isinstance(message, Mapping) else None
        for got, seen in ((value.get("version"), versions), (model, models)):
            if isinstance(got, str) and got not in seen and not got.startswith("<"):  # "<synthetic>": no model
                seen.append(got)
        for key in ("sessionId", "cwd", "gitBranch"):
            if isinstance(value.get(key), str) and key not in session.meta:
                session.meta[key] = value[key]
        if kind == "summary" and isinstance(value.get("summary"), str):
            summaries.append(value["summary"])
        elif kind not in MESSAGE_TYPES:
            if kind in OTHER_TYPES:
                ctx.drop(f"{kind} entries")
            else:
                ctx.unmapped({str(kind): value}, "(entry type)", set(), set())
    session.meta.update({k: v for k, v in (("versions", versions), ("models", models), ("summaries", summaries)) if v})
    return session


def _parent(entry: Entry) -> str | None:
    """The uuid an entry names as its parent (``parentUuid``, else ``logicalParentUuid`` across a compaction)."""
    parent = entry.value.get("parentUuid") or entry.value.get("logicalParentUuid")
    return parent if isinstance(parent, str) and parent else None


def _conversation(main: list[Entry], session: _Session, ctx: RunContext) -> list[Entry]:
    """The main run's entries: the parentUuid chain ending at the last entry when the file has one (entries off it
    counted, and each branch point), else the file order. No entry naming a parent (an exported or hand-made
    session) is read in file order; so is a broken chain, counted by how it breaks: a parent no entry of the
    file has (its entries before the break would be lost), or a cycle."""
    if not any(_parent(e) for e in main):
        if len(main) > 1:
            ctx.drop("entries without a parentUuid chain (read in file order)", len(main))
        return main
    seen: set[int] = set()
    entry: Entry | None = main[-1]
    while entry is not None:
        if id(entry) in seen:
            ctx.drop("parentUuid chain with a cycle (read in file order)")
            return main
        seen.add(id(entry))
        parent = _parent(entry)
        if parent is not None and parent not in session.by_uuid:
            ctx.drop("parentUuid naming no entry of the file (a broken chain, read in file order)")
            return main
        entry = session.by_uuid.get(parent) if parent is not None else None
    chain = _chain(main[-1], session)
    on_chain = {id(e) for e in chain}
    off = sum(1 for e in main if id(e) not in on_chain)
    if off:
        ctx.drop("entries off the conversation chain (a rewound or retried branch)", off)
    children = Counter(_parent(e) for e in main if _parent(e) is not None)
    branches = sum(1 for n in children.values() if n > 1)
    if branches:
        ctx.drop("branch points (an entry with several children; the branch to the last entry kept)", branches)
    return chain


def _chain(leaf: Entry, session: _Session) -> list[Entry]:
    """The user and assistant entries from the root to ``leaf`` (parentUuid, then logicalParentUuid), in order."""
    chain: list[Entry] = []
    seen: set[int] = set()
    entry: Entry | None = leaf
    while entry is not None and id(entry) not in seen:
        seen.add(id(entry))
        if entry.value.get("type") in MESSAGE_TYPES:
            chain.append(entry)
        parent = entry.value.get("parentUuid") or entry.value.get("logicalParentUuid")
        entry = session.by_uuid.get(parent) if isinstance(parent, str) else None
    return chain[::-1]


def _subagents(side: list[Entry], session: _Session, base: str,
               ctx: RunContext) -> list[tuple[str, list[Entry]]]:
    """``(task id, chain)`` of each subagent (sidechain root), in the order the subagents started."""
    top: dict[int, Entry] = {}  # id(entry) -> the root of its tree (walked once per entry)
    for e in side:
        path: list[Entry] = []
        on_path: set[int] = set()
        cur: Entry | None = e
        while cur is not None and id(cur) not in top and id(cur) not in on_path:
            path.append(cur)
            on_path.add(id(cur))
            parent = cur.value.get("parentUuid") or cur.value.get("logicalParentUuid")
            cur = session.by_uuid.get(parent) if isinstance(parent, str) else None
        root = top[id(cur)] if cur is not None and id(cur) in top else path[-1]
        top.update((id(p), root) for p in path)
    trees: dict[int, list[Entry]] = {}  # id(root) -> its message entries, in file order
    for e in side:
        trees.setdefault(id(top[id(e)]), []).append(e)
    runs = []
    for k, tree in enumerate(sorted(trees.values(), key=lambda t: t[0].line), start=1):
        chain = _chain(tree[-1], session)
        if len(tree) > len(chain):
            ctx.drop("entries off the conversation chain (a rewound or retried branch)", len(tree) - len(chain))
        runs.append((f"{base}/subagent-{k}", chain))
    return runs


@dataclass
class _Turn:
    """One assistant API message (possibly written as several entries) and the tool results that came with it."""

    entry: Entry
    message_id: Any
    blocks: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)  # (line, input path, block)
    results: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)


def _steps(chain: list[Entry], ctx: RunContext) -> dict[str, Any]:
    """Task, steps and final answer of one chain of entries."""
    chat = ChatSteps(ctx)
    turn: _Turn | None = None
    for e in chain:
        kind = e.value["type"]
        message, located = _blocks(e, ctx)
        if kind == "assistant":
            same = turn is not None and message.get("id") is not None and message.get("id") == turn.message_id
            if turn is not None and not same:
                _flush(chat, turn, ctx)
            if turn is None or not same:
                turn = _Turn(e, message.get("id"))
            turn.blocks += [(e.line, at, b) for at, b in located]
        elif turn is not None and located and all(b.get("type") == "tool_result" for _, b in located):
            turn.results += [(e.line, at, b) for at, b in located]  # this turn's results; more blocks may follow
        else:
            if turn is not None:
                _flush(chat, turn, ctx)
                turn = None
            _user(chat, e, located, ctx)
    if turn is not None:
        _flush(chat, turn, ctx)
    try:
        return chat.trajectory("(file)")
    except RunProblem as exc:  # a step's problem names its turn as STEP_AT + line
        where, _, line = exc.where.partition(STEP_AT)
        raise LineProblem(int(line) if line else chain[0].line if chain else 1, where or "assistant.message",
                          exc.message) from None


def _blocks(e: Entry, ctx: RunContext) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """A message entry's ``message`` and its content blocks with their input paths (a string content is one
    text block); the entry's unmapped fields counted."""
    kind = e.value["type"]
    try:
        message = expect(e.value.get("message"), dict, f"{kind}.message", "a message object")
        ctx.unmapped(e.value, kind, ENTRY_USED, ENTRY_KNOWN)
        ctx.unmapped(message, f"{kind}.message", MESSAGE_USED, MESSAGE_KNOWN)
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        expect(blocks, list, f"{kind}.message.content", "a string or a list of content blocks")
        return message, [(f"{kind}.message.content[{j}]",
                          expect(b, dict, f"{kind}.message.content[{j}]", "a content block object"))
                         for j, b in enumerate(blocks)]
    except RunProblem as exc:
        raise LineProblem(e.line, exc.where, exc.message) from None


def _flush(chat: ChatSteps, turn: _Turn, ctx: RunContext) -> None:
    """One step: the turn's thinking, text and calls, then its tool results (a problem names its block's line)."""
    thinking: list[str] = []
    texts: list[str] = []
    calls: list[tuple[str | None, dict[str, Any]]] = []
    redacted = 0
    for line, at, block in turn.blocks:
        kind = block.get("type")
        try:
            _count_fields(block, at, ctx)
            if kind == "thinking":
                thinking.append(expect(block.get("thinking"), str, f"{at}.thinking", "a string"))
            elif kind == "redacted_thinking":
                redacted += 1
            elif kind == "tool_use":
                name = expect(block.get("name"), str, f"{at}.name", "the tool name as a string")
                calls.append((block.get("id"), {"tool": name,
                                                "arguments": parse_arguments(block.get("input"), f"{at}.input")}))
            elif kind == "text":
                texts.append(expect(block.get("text"), str, f"{at}.text", "a string"))
            else:
                ctx.drop(f"{kind or 'untyped'} content parts")
        except RunProblem as exc:
            raise LineProblem(line, exc.where, exc.message) from None
    if redacted:
        ctx.drop("redacted_thinking blocks", redacted)
    chat.assistant(join_reasoning(thinking), PART_JOIN.join(texts), calls, f"{STEP_AT}{turn.entry.line}",
                   {"redacted_thinking": redacted} if redacted else None)
    for line, at, block in turn.results:
        try:
            _result(chat, block, at, ctx)
        except RunProblem as exc:
            raise LineProblem(line, exc.where, exc.message) from None


def _user(chat: ChatSteps, e: Entry, located: list[tuple[str, dict[str, Any]]], ctx: RunContext) -> None:
    """A user entry: tool results answer open calls; text is the task or a reply."""
    texts: list[str] = []
    try:
        for at, block in located:
            if block.get("type") == "tool_result":
                _result(chat, block, at, ctx)
            elif block.get("type") == "text":
                _count_fields(block, at, ctx)
                texts.append(expect(block.get("text"), str, f"{at}.text", "a string"))
            else:
                _count_fields(block, at, ctx)
                ctx.drop(f"{block.get('type', 'untyped')} content parts")
        if texts:
            chat.user_text(PART_JOIN.join(texts))
    except RunProblem as exc:
        raise LineProblem(e.line, exc.where, exc.message) from None


def _result(chat: ChatSteps, block: dict[str, Any], at: str, ctx: RunContext) -> None:
    _count_fields(block, at, ctx)
    if block.get("content") is None:
        ctx.null(f"{at}.content")
    result = text_of(block.get("content"), f"{at}.content", ctx)
    chat.tool_result(expect(block.get("tool_use_id"), str, f"{at}.tool_use_id", "a string"), result, at,
                     is_error=block.get("is_error") is True)


def _count_fields(block: dict[str, Any], at: str, ctx: RunContext) -> None:
    """Count a block's fields the format does not map (signatures, encrypted data, citations: by path)."""
    used = BLOCK_USED.get(str(block.get("type")))
    if used is not None:
        ctx.unmapped(block, at, used, BLOCK_KNOWN)
