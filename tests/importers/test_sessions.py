"""Session files (Claude Code, Codex CLI) read whole: the real samples against independent readers of the raw files.

The samples are real public files (``tests/importers/samples/claude-code``,
``.../codex``; sources and licenses in their SOURCES.md). The references
below read the raw JSON Lines with their own logic, written from the formats
as the files show them (Claude Code: entries linked by ``parentUuid``, an API
message spread over entries with one ``message.id``; Codex: Responses API
items between results), not with the importers' code. Shapes no public file
holds (thinking blocks, parallel Codex calls, custom tools) are planted into
a real file and say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interp.data.importers.registry import IdOptions, import_runs
from interp.data.trajectory import load_trajectories, validate_file

from ._support import REAL

pytestmark = pytest.mark.unit

CC = REAL / "claude-code"
CODEX = REAL / "codex"
CC_INIT = CC / "d-kimuson_1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"  # 1.0.98: parallel calls over entries
CC_TASKS = CC / "d-kimuson_5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"  # 1.0.108: Task subagents as sidechains
CC_NEW = CC / "kvsankar_06090cb1-3e64-433a-bc7e-a621c0f596d2.jsonl"  # 2.1.152
CC_THINK = CC / "yoavf_claude-code-pomodoro-timer.jsonl"  # 2.0.24, extended thinking on
CX_CALLS = CODEX / "acidicsoil_rollout-2025-11-17T15-30-28-019a93b9-f380-7600-98ff-940e6b99603c.jsonl"  # 0.58.0
CX_NEW = CODEX / "kvsankar_rollout-019e9625-802f-7e91-840a-cfe88d14117a.jsonl"  # 0.135.0
CX_NO_TURN = CODEX / "simonw_rollout-019b64e5-57fa-7463-b644-fba7e456f905.jsonl"  # 0.77.0, cut before the answer


def raw(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in lines), encoding="utf-8")
    return path


def imported(fmt, source, tmp_path, **options):
    out = tmp_path / "t.jsonl"
    report = import_runs(fmt, source, out, **options)
    assert report.written and not report.problems, report.problems
    strict = validate_file(out, strict=True)
    assert not strict.problems and not strict.unknown_fields
    return report, load_trajectories(out)


def actual(traj):
    out = []
    for s in traj.steps:
        action = s.action.text if s.action.is_text else [(c.tool, dict(c.arguments)) for c in s.action.calls]
        out.append((s.reasoning, action, list(s.observation) if isinstance(s.observation, tuple) else s.observation))
    return out


# ---- Claude Code ------------------------------------------------------------------------------------------------

def _text(content) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content or [] if p.get("type") == "text")


def claude_reference(lines: list[dict]) -> list[tuple[str, list]]:
    """(task, [(reasoning, action, observation)]) of the main run, then of each subagent in the order it started."""
    by_uuid = {d["uuid"]: d for d in lines if "uuid" in d}

    def chain(leaf):
        out = []
        while leaf is not None:
            out.append(leaf)
            leaf = by_uuid.get(leaf.get("parentUuid"))
        return out[::-1]

    msgs = [d for d in lines if d.get("type") in ("user", "assistant")]
    main = chain([d for d in msgs if not d.get("isSidechain")][-1])
    side = [d for d in msgs if d.get("isSidechain")]
    roots = [d for d in side if d.get("parentUuid") is None]
    chains = [main] + [chain([d for d in side if chain(d)[0] is root][-1]) for root in roots]
    return [run(c) for c in chains]


def run(entries: list[dict]) -> tuple[str, list]:
    results = {b["tool_use_id"]: _text(b["content"]) for d in entries if d["type"] == "user"
               and isinstance(d["message"]["content"], list) for b in d["message"]["content"]
               if b.get("type") == "tool_result"}
    first = next(i for i, d in enumerate(entries) if d["type"] == "assistant")
    task = "\n\n".join(_text(d["message"]["content"]) for d in entries[:first])
    messages: dict[str, list] = {}  # message id -> its blocks, over every entry that holds a part of it
    last_entry: dict[str, int] = {}
    for i, d in enumerate(entries):
        if d["type"] == "assistant":
            messages.setdefault(d["message"]["id"], []).extend(d["message"]["content"])
            last_entry[d["message"]["id"]] = i
    steps = []
    for mid, blocks in messages.items():
        thinking = "\n\n".join(b["thinking"] for b in blocks if b["type"] == "thinking")
        text = "\n".join(b["text"] for b in blocks if b["type"] == "text")
        calls = [(b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]
        if calls:
            obs = [results.get(b["id"]) for b in blocks if b["type"] == "tool_use"]
            steps.append((thinking or text, calls, obs[0] if len(obs) == 1 else obs))
        else:
            nxt = entries[last_entry[mid] + 1] if last_entry[mid] + 1 < len(entries) else None
            reply = _text(nxt["message"]["content"]) if nxt and nxt["type"] == "user" else None
            steps.append((thinking, text, reply))
    return task, steps


@pytest.mark.parametrize("path", sorted(CC.glob("*.jsonl")), ids=lambda p: p.name.split("_")[0])
def test_claude_code_sessions_equal_the_raw_files(path, tmp_path):
    lines = raw(path)
    report, trajs = imported("auto", path, tmp_path)
    reference = claude_reference(lines)
    assert report.formats == {"claude-code": len(reference)}
    assert [(t.task, actual(t)) for t in trajs] == reference
    sid = next(d["sessionId"] for d in lines if "sessionId" in d)
    assert [t.task_id for t in trajs] == [sid] + [f"{sid}/subagent-{k}" for k in range(1, len(trajs))]
    assert all(t.domain == "code" and t.system_prompt == "" for t in trajs)
    assert not [d for d in report.dropped if "(unknown)" in d]  # every field of the real files is documented
    with_result_copy = sum(1 for d in lines if d.get("type") == "user" and "toolUseResult" in d)
    assert report.dropped["user.toolUseResult"] == with_result_copy  # the structured copy, counted per entry
    assert report.dropped["assistant.message.usage"] == sum(1 for d in lines if d.get("type") == "assistant")


def test_claude_code_thinking_blocks_of_a_real_session_are_the_reasoning(tmp_path):
    lines = raw(CC_THINK)
    thinking = [b["thinking"] for d in lines if d.get("type") == "assistant" for b in d["message"]["content"]
                if b.get("type") == "thinking"]
    report, (traj,) = imported("auto", CC_THINK, tmp_path)
    assert len(thinking) == 31
    assert all(any(t in s.reasoning for s in traj.steps) for t in thinking)
    assert report.dropped["assistant.message.content[].signature"] == len(thinking)  # counted, never text


def test_claude_code_one_message_over_several_entries_is_one_step_with_parallel_calls(tmp_path):
    lines = raw(CC_INIT)
    _, (traj,) = imported("claude-code", CC_INIT, tmp_path)
    ids = [d["message"]["id"] for d in lines if d["type"] == "assistant"]
    widest = max(set(ids), key=ids.count)  # the message written as the most entries: one block per entry
    blocks = [b for d in lines if d["type"] == "assistant" and d["message"]["id"] == widest
              for b in d["message"]["content"]]
    calls = [(b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]
    assert ids.count(widest) == 5 and len(calls) == 5
    (step,) = [s for s in traj.steps if not s.action.is_text and len(s.action.calls) == 5]
    assert [(c.tool, dict(c.arguments)) for c in step.action.calls] == calls
    assert len(traj.steps) == len(set(ids)) == 7  # seven API messages, fifteen assistant entries


def test_claude_code_subagents_are_runs_of_their_own_answering_the_task_calls(tmp_path):
    lines = raw(CC_TASKS)
    _, (main, *subagents) = imported("auto", CC_TASKS, tmp_path)
    assert len(subagents) == 2 == sum(1 for d in lines if d.get("isSidechain") and d.get("parentUuid") is None)
    task_calls = [c for s in main.steps if not s.action.is_text for c in s.action.calls if c.tool == "Task"]
    prompts = [c.arguments.get("prompt") for c in task_calls]  # one call (refused: no prompt) started none
    for sub in subagents:
        assert sub.task in prompts  # the subagent's task is the prompt of a Task call of the main run
        assert sub.extra["metadata"]["subagent_of"] == main.task_id
    main_ids = {d["uuid"] for d in lines if not d.get("isSidechain") and "uuid" in d}
    assert all(d["uuid"] in main_ids for d in lines if d.get("type") in ("user", "assistant")
               and not d.get("isSidechain"))
    assert main.extra["metadata"]["versions"] == ["1.0.108"]


def test_claude_code_current_version_entries_are_counted_by_type(tmp_path):
    report, (traj,) = imported("auto", CC_NEW, tmp_path)
    assert report.dropped["queue-operation entries"] == 2 and report.dropped["last-prompt entries"] == 1
    assert report.dropped["user.promptId"] == 1 and report.dropped["assistant.message.stop_details"] == 0  # null
    assert traj.task == "[REDACTED_PROMPT]" and traj.final_answer == "[REDACTED_ASSISTANT_TEXT]"
    meta = traj.extra["metadata"]
    assert meta["versions"] == ["2.1.152"] and meta["models"] == ["claude-opus-4-7"]
    assert meta["sessionId"] == traj.task_id == "06090cb1-3e64-433a-bc7e-a621c0f596d2"


def test_claude_code_thinking_is_the_reasoning_and_redacted_thinking_is_counted_planted(tmp_path):
    lines = raw(CC_NEW)
    answer = next(d for d in lines if d.get("type") == "assistant")
    answer["message"]["content"][:0] = [{"type": "thinking", "thinking": "First: read.\n\nThen: answer.",
                                         "signature": "EqQB"}, {"type": "redacted_thinking", "data": "EmwK"}]
    report, (traj,) = imported("auto", write(tmp_path / "s.jsonl", lines), tmp_path)
    assert traj.steps[0].reasoning == "First: read.\n\nThen: answer."
    assert traj.steps[0].extra["redacted_thinking"] == 1
    assert report.dropped["redacted_thinking blocks"] == 1
    assert report.dropped["assistant.message.content[].signature"] == 1
    assert report.dropped["assistant.message.content[].data"] == 1


def test_claude_code_a_rewound_branch_is_dropped_and_counted(tmp_path):
    lines = raw(CC_NEW)
    i, answer = next((i, d) for i, d in enumerate(lines) if d.get("type") == "assistant")
    retried = json.loads(json.dumps(answer))
    retried["uuid"] = "00000000-0000-4000-8000-000000000001"
    retried["message"]["content"] = [{"type": "text", "text": "an answer the user rewound"}]
    lines.insert(i, retried)  # same parent, earlier in the file: off the chain that ends at the last entry
    report, (traj,) = imported("auto", write(tmp_path / "s.jsonl", lines), tmp_path)
    assert traj.final_answer == "[REDACTED_ASSISTANT_TEXT]" and len(traj.steps) == 1
    assert report.dropped["entries off the conversation chain (a rewound or retried branch)"] == 1


def test_claude_code_unknown_text_field_is_counted_and_refused_under_strict(tmp_path):
    lines = raw(CC_NEW)
    next(d for d in lines if d.get("type") == "assistant")["scratchpad"] = "the plan, kept nowhere else"
    source = write(tmp_path / "s.jsonl", lines)
    report = import_runs("auto", source, tmp_path / "a.jsonl")
    assert report.written and report.dropped["assistant.scratchpad (unknown)"] == 1
    strict = import_runs("auto", source, tmp_path / "b.jsonl", strict=True)
    assert not strict.written and not (tmp_path / "b.jsonl").exists()
    assert strict.problems == [f"{source}:1: assistant.scratchpad: field holding text, dropped (claude-code "
                               "does not map it; 1 such field(s)); --strict refuses a text it would lose"]


def test_claude_code_problems_name_the_line_and_field(tmp_path):
    lines = raw(CC_INIT)
    k, entry = next((k, d) for k, d in enumerate(lines) if d.get("type") == "assistant"
                    and d["message"]["content"][0]["type"] == "tool_use")
    entry["message"]["content"][0]["input"] = ["not", "an", "object"]
    source = write(tmp_path / "s.jsonl", lines)
    report = import_runs("claude-code", source, tmp_path / "t.jsonl")
    assert report.problems == [f"{source}:{k + 1}: assistant.message.content[0].input: arguments must be a JSON "
                               "object, got a list"]
    text = source.read_text(encoding="utf-8").splitlines()
    text[5] = text[5][:-1]  # a cut line inside the session: the whole session (one run) is skipped
    source.write_text("\n".join(text) + "\n", encoding="utf-8")
    report = import_runs("claude-code", source, tmp_path / "t.jsonl")
    assert len(report.problems) == 1 and report.problems[0].startswith(f"{source}:6: (line): invalid JSON")
    assert report.problems[0].endswith("(in a claude-code session: the whole session is skipped)")


def test_a_file_of_runs_is_still_read_line_by_line(tmp_path):
    runs = [{"id": f"r{k}", "messages": [{"role": "user", "content": "hi"},
                                         {"role": "assistant", "content": "<think>x</think>ok"}]} for k in range(3)]
    report, trajs = imported("auto", write(tmp_path / "runs.jsonl", runs), tmp_path)
    assert [t.task_id for t in trajs] == ["r0", "r1", "r2"] and report.formats == {"openai": 3}
    with pytest.raises(AssertionError):  # a named session format claims only its own files
        imported("claude-code", tmp_path / "runs.jsonl", tmp_path)


# ---- Codex CLI --------------------------------------------------------------------------------------------------

def codex_reference(lines: list[dict]) -> tuple[str, str, list]:
    """(system prompt, task, [(reasoning, action, observation)]) read from the response items in order."""
    items = [d["payload"] for d in lines if d["type"] == "response_item"]
    meta = next(d["payload"] for d in lines if d["type"] == "session_meta")
    outputs = {p["call_id"]: p["output"] for p in items if p["type"] == "function_call_output"}
    first = next(i for i, p in enumerate(items) if p["type"] in ("reasoning", "function_call")
                 or p.get("role") == "assistant")
    say = [c["text"] for p in items[:first] if p["type"] == "message" for c in p["content"]]
    roles = [p["role"] for p in items[:first] if p["type"] == "message" for _ in p["content"]]
    instructions = meta.get("instructions") or (meta.get("base_instructions") or {}).get("text")
    system = "\n\n".join([instructions] * bool(instructions) + [t for t, r in zip(say, roles) if r == "developer"])
    task = "\n\n".join(t for t, r in zip(say, roles) if r == "user")
    steps, thought = [], []
    for p in items[first:]:
        if p["type"] == "reasoning":
            thought += [s["text"] for s in p["summary"]]
        elif p["type"] == "function_call":
            steps.append(("\n\n".join(thought), [(p["name"], json.loads(p["arguments"]))], outputs[p["call_id"]]))
            thought = []
        elif p.get("role") == "assistant":
            steps.append(("\n\n".join(thought), "\n".join(c["text"] for c in p["content"]), None))
            thought = []
    return system, task, steps


@pytest.mark.parametrize("path", [CX_CALLS, CX_NEW], ids=["0.58", "0.135"])
def test_codex_rollouts_equal_the_raw_files(path, tmp_path):
    lines = raw(path)
    report, (traj,) = imported("auto", path, tmp_path)
    assert report.formats == {"codex": 1}
    system, task, steps = codex_reference(lines)
    assert (traj.system_prompt, traj.task, actual(traj)) == (system, task, steps)
    meta = next(d["payload"] for d in lines if d["type"] == "session_meta")
    assert traj.task_id == meta["id"] and traj.extra["metadata"]["cli_version"] == meta["cli_version"]
    assert not [d for d in report.dropped if "(unknown)" in d]
    events = [d["payload"]["type"] for d in lines if d["type"] == "event_msg"]
    assert sum(n for d, n in report.dropped.items() if d.startswith("event_msg lines")) == len(events)
    encrypted = sum(1 for d in lines if d["payload"].get("encrypted_content"))
    assert report.dropped["response_item[reasoning].encrypted_content"] == encrypted


def test_codex_reasoning_is_the_summary_the_cli_showed(tmp_path):
    lines = raw(CX_CALLS)
    _, (traj,) = imported("codex", CX_CALLS, tmp_path)
    shown = [d["payload"]["text"] for d in lines if d["type"] == "event_msg" and d["payload"]["type"] == "agent_reasoning"]
    kept = [s.reasoning for s in traj.steps if s.reasoning]
    assert kept == shown and len(kept) == 9  # the UI's copy of each summary, an independent record of it
    assert traj.steps[0].action.calls[0].arguments == {"command": ["bash", "-lc", "ls"],
                                                       "workdir": "/home/user/projects/temp/chatbot-ui"}
    assert traj.final_answer is None  # the excerpt ends in calls
    assert traj.extra["metadata"]["models"] == ["gpt-5.1-codex"]


def test_codex_rollout_cut_before_the_answer_is_refused_with_its_reason(tmp_path):
    report = import_runs("auto", CX_NO_TURN, tmp_path / "t.jsonl")
    assert not report.written and report.converted == 0
    assert report.problems == [f"{CX_NO_TURN}:1: (file): no assistant turn: a trajectory needs at least one step"]


def test_codex_parallel_and_custom_calls_and_raw_reasoning_planted(tmp_path):
    lines = raw(CX_NEW)
    at = next(i for i, d in enumerate(lines) if d["payload"].get("role") == "assistant")
    item = lambda payload: {"timestamp": "2026-06-05T04:58:25.000Z", "type": "response_item", "payload": payload}
    lines[at:at] = [
        item({"type": "reasoning", "summary": [{"type": "summary_text", "text": "**Look**"}],
              "content": [{"type": "reasoning_text", "text": "I list, then patch."}], "encrypted_content": None}),
        item({"type": "function_call", "name": "shell", "arguments": "{\"command\":[\"ls\"]}", "call_id": "c1"}),
        item({"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch",
              "call_id": "c2", "status": "completed"}),
        item({"type": "function_call_output", "call_id": "c1", "output": "a.txt"}),
        item({"type": "custom_tool_call_output", "call_id": "c2", "output": "Done"}),
    ]
    report, (traj,) = imported("auto", write(tmp_path / "r.jsonl", lines), tmp_path)
    first = traj.steps[0]
    assert first.reasoning == "I list, then patch."
    assert [(c.tool, dict(c.arguments)) for c in first.action.calls] == [
        ("shell", {"command": ["ls"]}), ("apply_patch", {"input": "*** Begin Patch\n*** End Patch"})]
    assert list(first.observation) == ["a.txt", "Done"]
    assert report.dropped["response_item[reasoning].summary (the content text is kept)"] == 1
    assert report.dropped["response_item[custom_tool_call].status"] == 1
    assert traj.steps[1].action.text == "[REDACTED_ASSISTANT_TEXT]"


def test_codex_problems_name_the_line_and_field(tmp_path):
    lines = raw(CX_CALLS)
    k = next(i for i, d in enumerate(lines) if d["payload"].get("type") == "function_call")
    lines[k]["payload"]["arguments"] = "{\"command\": [\"ls\"]"
    source = write(tmp_path / "r.jsonl", lines)
    report = import_runs("codex", source, tmp_path / "t.jsonl")
    assert len(report.problems) == 1
    assert report.problems[0].startswith(f"{source}:{k + 1}: response_item[function_call].arguments: invalid JSON "
                                         "arguments")


def test_id_prefix_and_domain_reach_every_run_of_a_session(tmp_path):
    _, trajs = imported("auto", CC_TASKS, tmp_path, domain="web", ids=IdOptions("cc/"))
    assert all(t.task_id.startswith("cc/5c0375b4") and t.domain == "web" for t in trajs) and len(trajs) == 3


# ---- OpenHands ----------------------------------------------------------------------------------------------------

OH = REAL / "openhands"


def openhands_reference(events: list[dict]) -> tuple[str, list]:
    """(task, [(reasoning, action, observation)]): the calls as the model response wrote them, results by cause."""
    results = {e["cause"]: e["content"] for e in events if "cause" in e and e["observation"] != "null"}
    task = next(e["args"]["content"] for e in events if e["source"] == "user" and e.get("action") == "message")
    steps, by_response = [], {}
    for k, e in enumerate(events):
        if e["source"] != "agent" or "action" not in e:
            continue
        meta = e.get("tool_call_metadata")
        if meta is None:  # a text action: the user's next message is the reply
            reply = next((x["args"]["content"] for x in events[k + 1:] if x["source"] == "user"
                          and x.get("action") == "message"), None)
            steps.append((e["args"].get("thought", ""), e["args"]["content"], reply))
            continue
        message = meta["model_response"]["choices"][0]["message"]
        call = next(c for c in message["tool_calls"] if c["id"] == meta["tool_call_id"])
        entry = by_response.setdefault(meta["model_response"]["id"], [])
        if not entry:
            steps.append([message.get("reasoning_content") or message.get("content") or "", [], []])
            entry.append(steps[-1])
        entry[0][1].append((call["function"]["name"], json.loads(call["function"]["arguments"])))
        entry[0][2].append(results.get(e["id"]))
    return task, [s if isinstance(s, tuple) else (s[0], s[1], s[2][0] if len(s[2]) == 1 else s[2]) for s in steps]


@pytest.mark.parametrize("path", sorted(OH.glob("*.json")), ids=lambda p: p.stem.split("_", 1)[1])
def test_openhands_event_streams_equal_the_raw_files(path, tmp_path):
    events = json.loads(path.read_text(encoding="utf-8"))
    report, (traj,) = imported("auto", path, tmp_path)
    assert report.formats == {"openhands": 1}
    assert (traj.task, actual(traj)) == openhands_reference(events)
    assert traj.task_id == path.stem and traj.domain == "code"
    assert not [d for d in report.dropped if "(unknown)" in d]
    for e in events:  # OpenHands' own copy of the thought is the text of the model response: nothing else lost
        meta = e.get("tool_call_metadata")
        if meta and "action" in e and e["args"].get("thought"):
            assert e["args"]["thought"] == meta["model_response"]["choices"][0]["message"]["content"]
    environment = sum(1 for e in events if e["source"] == "environment")
    counted = sum(n for d, n in report.dropped.items() if d.startswith(("agent_state_changed", "environment ")))
    assert counted == environment - sum(1 for e in events if e["source"] == "environment"
                                        and e.get("observation") == "null")


def test_openhands_calls_of_one_response_are_one_step_and_plain_actions_are_calls_planted(tmp_path):
    events = json.loads((OH / "openhands-runtime-tests_wrong_initial_state.json").read_text(encoding="utf-8"))
    first = next(e for e in events if e.get("action") == "read")
    meta = first["tool_call_metadata"]
    message = meta["model_response"]["choices"][0]["message"]
    second_call = {"id": "call_planted", "type": "function",
                   "function": {"name": "execute_bash", "arguments": "{\"command\": \"ls -a\"}"}}
    message["tool_calls"].append(second_call)
    k = events.index(first)
    second = {"id": 900, "timestamp": first["timestamp"], "source": "agent", "message": "Running command: ls -a",
              "action": "run", "args": {"command": "ls -a", "thought": ""},
              "tool_call_metadata": {**meta, "tool_call_id": "call_planted", "function_name": "execute_bash"}}
    observed = {"id": 901, "timestamp": first["timestamp"], "source": "agent", "message": "", "cause": 900,
                "observation": "run", "content": ".\n..", "extras": {}}
    events[k + 2:k + 2] = [second, observed]  # after the first call's observation, as OpenHands runs them
    plain = {"id": 902, "timestamp": first["timestamp"], "source": "agent", "message": "", "action": "run",
             "args": {"command": "pwd", "thought": "Where am I?", "blocking": False}}
    events[-1:-1] = [plain, {"id": 903, "timestamp": first["timestamp"], "source": "agent", "message": "",
                             "cause": 902, "observation": "run", "content": "/workspace", "extras": {}}]
    (tmp_path / "t.json").write_text(json.dumps(events, indent=2), encoding="utf-8")
    _, (traj,) = imported("openhands", tmp_path / "t.json", tmp_path)
    step = traj.steps[0]
    assert [(c.tool, dict(c.arguments)) for c in step.action.calls] == [
        ("str_replace_editor", {"command": "view", "path": "/workspace"}), ("execute_bash", {"command": "ls -a"})]
    assert list(step.observation)[1] == ".\n.."
    plain_step = traj.steps[-2]
    assert (plain_step.reasoning, plain_step.action.calls[0].tool, dict(plain_step.action.calls[0].arguments),
            plain_step.observation) == ("Where am I?", "run", {"command": "pwd"}, "/workspace")


# ---- Gemini CLI ---------------------------------------------------------------------------------------------------

GEMINI = REAL / "gemini" / "kvsankar_session-dcbe78d3.json"


def gemini_reference(doc: dict) -> tuple[str, list[tuple]]:
    """(task, [(reasoning, action, observation)]) of a recording, read from Gemini CLI's message types."""
    def text(content) -> str:
        if isinstance(content, str):
            return content
        return "\n".join(p["text"] for p in content or [] if "text" in p)

    def output(call) -> str:
        parts = []
        for part in call.get("result") or []:
            body = part["functionResponse"]["response"]
            parts.append(body["output"] if isinstance(body.get("output"), str) else
                         body["error"] if isinstance(body.get("error"), str) else json.dumps(body, ensure_ascii=False))
        return "\n".join(parts)

    msgs = [m for m in doc["messages"] if m["type"] in ("user", "gemini")]
    first = next(i for i, m in enumerate(msgs) if m["type"] == "gemini")
    task = "\n\n".join(text(m["content"]) for m in msgs[:first] if text(m["content"]).strip())
    steps: list[tuple] = []
    for i, m in enumerate(msgs[first:], start=first):
        if m["type"] == "user":
            continue
        thoughts = "\n\n".join("\n".join(p for p in (t.get("subject", ""), t.get("description", "")) if p)
                                for t in m.get("thoughts") or [])
        calls = m.get("toolCalls") or []
        if calls:
            obs = [output(c) for c in calls]
            steps.append((thoughts or text(m["content"]), [(c["name"], c["args"]) for c in calls],
                          obs[0] if len(obs) == 1 else obs))
        else:
            nxt = msgs[i + 1] if i + 1 < len(msgs) else None
            steps.append((thoughts, text(m["content"]), text(nxt["content"]) if nxt and nxt["type"] == "user" else None))
    return task, steps


@pytest.mark.parametrize("path", sorted((REAL / "gemini").glob("*.json")), ids=lambda p: p.stem)
def test_gemini_recordings_equal_an_independent_reading(path, tmp_path):
    doc = json.loads(path.read_text(encoding="utf-8"))
    report, (traj,) = imported("auto", path, tmp_path)
    assert report.formats == {"gemini": 1} and traj.task_id == doc["sessionId"]
    assert (traj.task, actual(traj)) == gemini_reference(doc)
    assert not [d for d in report.dropped if "(unknown)" in d]  # every field of the real files is documented
    for kind in ("info", "error", "warning"):
        assert report.dropped[f"{kind} messages"] == sum(m["type"] == kind for m in doc["messages"])


def test_gemini_recording_equals_the_raw_file(tmp_path):
    doc = json.loads(GEMINI.read_text(encoding="utf-8"))
    report, (traj,) = imported("auto", GEMINI, tmp_path)
    assert report.formats == {"gemini": 1}
    user, model = doc["messages"]
    thought = model["thoughts"][0]
    assert traj.task == user["content"][0]["text"] and traj.task_id == doc["sessionId"]
    assert actual(traj) == [(f"{thought['subject']}\n{thought['description']}", model["content"], None)]
    assert traj.extra["metadata"]["models"] == [model["model"]]
    assert report.dropped["messages[].tokens"] == 1 and not [d for d in report.dropped if "(unknown)" in d]


def test_gemini_tool_calls_and_their_function_responses_planted(tmp_path):
    doc = json.loads(GEMINI.read_text(encoding="utf-8"))
    model = doc["messages"][1]
    model["toolCalls"] = [
        {"id": "ls-1", "name": "list_directory", "args": {"path": "."}, "status": "success",
         "result": [{"functionResponse": {"id": "ls-1", "name": "list_directory", "response": {"output": "a.py"}}}],
         "resultDisplay": "Listed 1 item."},
        {"id": "rd-2", "name": "read_file", "args": {"absolute_path": "/b.py"}, "status": "error",
         "result": [{"functionResponse": {"id": "rd-2", "name": "read_file", "response": {"error": "not found"}}}]}]
    doc["messages"].append({"id": "x", "timestamp": "t", "type": "info", "content": "Request cancelled."})
    (tmp_path / "g.json").write_text(json.dumps(doc), encoding="utf-8")
    report, (traj,) = imported("gemini", tmp_path / "g.json", tmp_path)
    step = traj.steps[0]
    assert [(c.tool, dict(c.arguments)) for c in step.action.calls] == [("list_directory", {"path": "."}),
                                                                          ("read_file", {"absolute_path": "/b.py"})]
    assert list(step.observation) == ["a.py", "not found"] and step.extra["is_error"] == [False, True]
    assert step.extra["assistant_text"] == model["content"]  # beside calls, with thoughts
    assert report.dropped["info messages"] == 1 and report.dropped["messages[].toolCalls[].resultDisplay"] == 1


def test_claude_code_a_subagent_file_is_the_subagents_run(tmp_path):
    lines = raw(CC_TASKS)
    roots = [d for d in lines if d.get("isSidechain") and d.get("parentUuid") is None]
    tree = {roots[0]["uuid"]}
    for d in lines:  # the first subagent's entries, as a later Claude Code writes them to a file of their own
        if d.get("isSidechain") and d.get("parentUuid") in tree:
            tree.add(d["uuid"])
    own = [d for d in lines if d.get("uuid") in tree]
    source = write(tmp_path / "agent-a1b2c3.jsonl", own)
    _, (traj,) = imported("auto", source, tmp_path)
    by_uuid, chain, leaf = {d["uuid"]: d for d in own}, [], own[-1]
    while leaf is not None:
        chain.append(leaf)
        leaf = by_uuid.get(leaf["parentUuid"])
    assert traj.task_id == "agent-a1b2c3" and (traj.task, actual(traj)) == run(chain[::-1])
    assert traj.task == roots[0]["message"]["content"] and len(traj.steps) == 3


def test_claude_code_session_opening_with_a_file_history_snapshot_is_one_run_planted(tmp_path):
    snapshot = {"type": "file-history-snapshot", "messageId": "e6781268-0d8b-4756-a547-6b89a7d7193e",
                "snapshot": {"messageId": "e6781268-0d8b-4756-a547-6b89a7d7193e", "trackedFileBackups": {},
                             "timestamp": "2026-06-05T04:56:32.812Z"}, "isSnapshotUpdate": False}
    source = write(tmp_path / "s.jsonl", [snapshot, *raw(CC_NEW)])  # how later Claude Code versions open a file
    report, (traj,) = imported("auto", source, tmp_path)
    assert report.formats == {"claude-code": 1} and report.dropped["file-history-snapshot entries"] == 1
