"""Trajectory datasets as they ship (issue #47): Parquet shards, Arrow files and a local ``datasets`` folder.

Each test writes a shard in a public dataset's published schema (its columns and
types, from the dataset cards: nvidia/Open-SWE-Traces,
nebius/SWE-rebench-openhands-trajectories, nebius/SWE-agent-trajectories) whose
rows are real public records re-shaped into it (the hub is out of reach offline;
see ``tests/importers/samples/SOURCES.md``, "Datasets"), imports it with no code,
validates it under ``--strict`` and compares every step with an independent
reading of the shard (pyarrow directly, and the source run's own parse).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from interp.data.importers.dataset import Selection
from interp.data.importers.registry import import_runs
from interp.data.trajectory import load_trajectories, validate_file

from ._support import REAL
from .test_conformance import actual, read_chat

pytestmark = pytest.mark.unit

TAU2_THINKING = REAL / "tau2" / "claude-sonnet-4-5_airline.json"
MOPENHANDS = REAL / "openhands" / "nunu0404-mopenhands_output_alibaba__fastjson2-2775.jsonl"
SWE_AGENT_0X = REAL / "swe-agent" / "gpt4_swe-agent-test-repo-i1.traj"
PARAMETERS = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


def tool(name: str) -> dict:
    """A tool declaration in OpenAI's form, as the datasets' ``tools`` column holds them (text shortened)."""
    return {"type": "function", "function": {"name": name, "description": f"{name} (shortened)",
                                             "parameters": PARAMETERS}}


def tools_called(chat: list[dict]) -> list[dict]:
    """The declarations of the tools a chat calls, in first-call order."""
    names = [c["function"]["name"] for m in chat for c in m.get("tool_calls") or []]
    return [tool(n) for n in dict.fromkeys(names)]


def _message(role: str, content: str | None, tool_calls: list | None = None, tool_call_id: str | None = None,
             reasoning: str | None = None) -> dict:
    """One message in the datasets' struct (every field present, null when unused, as Parquet stores them)."""
    return {"role": role, "content": content, "name": None, "tool_call_id": tool_call_id,
            "tool_calls": tool_calls, "reasoning_content": reasoning}


def open_swe_traces_rows() -> list[dict]:
    """Rows of nvidia/Open-SWE-Traces' schema; the chat is a real thinking run: tau2-bench's claude-sonnet-4-5
    airline simulation (12 messages), each assistant turn's thinking blocks as its ``reasoning_content`` (how a
    thinking model's turn is stored there), tool calls in OpenAI's form; the id, repo, license and metadata
    values of the dataset viewer's first rows."""
    doc = json.loads(TAU2_THINKING.read_text(encoding="utf-8"))
    chat = []
    for m in doc["simulations"][0]["messages"]:
        thinking = [b["thinking"] for b in (m.get("raw_data") or {}).get("thinking_blocks") or []]
        calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"],
                                                                   "arguments": json.dumps(c["arguments"])}}
                 for c in m.get("tool_calls") or []] or None
        chat.append(_message(m["role"], m["content"], calls, m["id"] if m["role"] == "tool" else None,
                             "\n\n".join(thinking) or None))
    base = {"repo": "python-attrs/attrs", "license": "MIT", "language": "python", "messages": chat,
            "tools": [json.dumps(t) for t in tools_called(chat)], "hf_dataset_name": "nebius/SWE-rebench-V2",
            "metadata": {"category": "bug-fix", "teacher_model": {"name": "MiniMax-M2.5", "enable_thinking": True}}}
    return [{**base, "instance_id": "python-attrs__attrs-770", "trajectory_id": "f8853683-87bd-418b-b87f-19ab95c60317",
             "resolved": 1},
            {**base, "instance_id": "altair-viz__altair-3118", "trajectory_id": "4003b9f9-720f-4897-a270-586055e35ab7",
             "resolved": -1}]


def nebius_openhands_rows() -> list[dict]:
    """Rows of nebius/SWE-rebench-openhands-trajectories' schema; the chat is the real MopenHands run (gpt-5) as
    OpenHands sent it to the model: the instruction, each response's message with its tool call, each
    observation as the tool result; ids and outcome columns of the viewer's first two rows."""
    row = json.loads(MOPENHANDS.read_text(encoding="utf-8"))
    chat = [_message("system", "You are OpenHands agent, a helpful AI assistant."),
            _message("user", row["instruction"])]
    for event in row["history"]:
        meta = event.get("tool_call_metadata")
        if "action" in event and meta:
            message = meta["model_response"]["choices"][0]["message"]
            chat.append(_message("assistant", message["content"], [
                {"id": c["id"], "type": "function", "function": {"name": c["function"]["name"],
                                                                 "arguments": c["function"]["arguments"]}}
                for c in message["tool_calls"]]))
        elif "observation" in event and meta:
            chat.append({**_message("tool", event["content"], tool_call_id=meta["tool_call_id"]),
                         "name": meta["function_name"]})
    base = {"repo": "PlasmaFAIR/sdf-xarray", "trajectory": chat, "tools": tools_called(chat), "model_patch": "diff --git a/x",
            "exit_status": "submit"}
    return [{**base, "trajectory_id": "chatcmpl-27dd0152801d38b5a37ff92d729c9fc1",
             "instance_id": "PlasmaFAIR__sdf-xarray-24", "resolved": 0, "gen_tests_correct": 0.0,
             "pred_passes_gen_tests": 1.0},
            {**base, "trajectory_id": "chatcmpl-eb27c5fe3baa10d5272928b4e016d84f",
             "instance_id": "tianocore__edk2-pytool-library-372", "resolved": 1, "gen_tests_correct": None,
             "pred_passes_gen_tests": None}]


def nebius_swe_agent_rows() -> list[dict]:
    """Rows of nebius/SWE-agent-trajectories' schema; the turns are the real SWE-agent 0.x run (gpt-4): its
    system prompt, the issue, and per step the model's response (its thought, then the action in a fenced block:
    the run's own ``response`` text, rebuilt from thought and action where the sample trimmed it) and the
    observation."""
    doc = json.loads(SWE_AGENT_0X.read_text(encoding="utf-8"))
    history = [m for m in doc["history"] if not m.get("is_demo")]

    def turn(role: str, text: str, mask: bool) -> dict:
        return {"cutoff_date": None, "mask": mask, "role": role, "system_prompt": None, "text": text}

    turns = [turn("system", history[0]["content"], False), turn("user", history[1]["content"], False)]
    for entry in doc["trajectory"]:
        turns += [turn("ai", f"{entry['thought']}```\n{entry['action']}```", True),  # = its response
                  turn("user", entry["observation"], False)]
    return [{"instance_id": "swe-agent__test-repo-i1", "model_name": "gpt4", "target": True, "trajectory": turns,
             "exit_status": "submitted", "generated_patch": "diff --git a/tests/missing_colon.py", "eval_logs": ""}]


SHARDS = {"open-swe-traces": open_swe_traces_rows, "nebius-openhands": nebius_openhands_rows,
          "nebius-swe-agent": nebius_swe_agent_rows}


def write_shard(rows: list[dict], path: Path, row_group_size: int = 1) -> Path:
    """The rows as a Parquet shard (one row per row group: the reader must stream across groups)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return path


def imported(source: Path, tmp_path: Path, **options):
    """Import with no code (``auto``), then ``validate --strict``."""
    out = tmp_path / "t.jsonl"
    report = import_runs("auto", source, out, strict=True, **options)
    assert report.written and not report.problems, report.problems
    strict = validate_file(out, strict=True)
    assert not strict.problems and not strict.unknown_fields
    return report, load_trajectories(out)


def expected(schema: str, row: dict) -> list[tuple]:
    """The steps of a row read independently: the chat by the OpenAI rules, a SWE-agent row by SWE-agent's own
    parse of the source run (its thought, action and observation per step)."""
    if schema == "nebius-swe-agent":
        doc = json.loads(SWE_AGENT_0X.read_text(encoding="utf-8"))
        return [(e["thought"], [("bash", {"command": e["action"]})], e["observation"])
                for e in doc["trajectory"]]
    chat = row["messages"] if "messages" in row else row["trajectory"]
    return read_chat([{k: v for k, v in m.items() if v is not None} for m in chat])


@pytest.mark.parametrize("schema", sorted(SHARDS))
def test_a_shard_in_each_datasets_schema_imports_field_by_field(tmp_path, schema):
    shard = write_shard(SHARDS[schema](), tmp_path / "data" / "train-00000-of-00001.parquet")
    report, trajs = imported(shard, tmp_path)
    table = pq.read_table(shard).to_pylist()  # the independent reader: pyarrow directly
    assert len(trajs) == len(table) == report.converted
    for row, traj in zip(table, trajs, strict=True):
        assert actual(traj) == expected(schema, row)
        own_id = row.get("trajectory_id", row["instance_id"])
        assert traj.task_id == own_id
        verdict = row.get("resolved", row.get("target"))
        assert traj.outcome == ({"reward": float(verdict)} if verdict in (0, 1, True, False) else {})
        kept = traj.extra["metadata"]["dataset_row"]
        mapped = {"messages", "trajectory", "tools", "trajectory_id", "resolved", "target"}
        if schema == "nebius-swe-agent":
            mapped.add("instance_id")
        assert {k: v for k, v in kept.items() if k != "trajectory_fields"} == {
            k: v for k, v in row.items() if k not in mapped}
        if schema != "nebius-swe-agent":
            declared = [json.loads(t) if isinstance(t, str) else t for t in row["tools"]]
            assert [dict(t) for t in traj.tools] == [
                {"name": t["function"]["name"], "description": t["function"]["description"],
                 "parameters": t["function"]["parameters"]} for t in declared] != []
        else:
            assert kept["trajectory_fields"] == {"mask": [t["mask"] for t in row["trajectory"]]}
    if schema == "open-swe-traces":  # the thinking of each assistant turn after the task is its step's reasoning
        chat = table[0]["messages"]
        task_at = next(i for i, m in enumerate(chat) if m["role"] == "user")
        thinking = [m["reasoning_content"] for m in chat[task_at:] if m["role"] == "assistant"]
        assert [s.reasoning for s in trajs[0].steps] == thinking and all(thinking)


def test_an_arrow_file_and_a_saved_datasets_folder_read_as_the_parquet_shard(tmp_path):
    """``datasets``' ``save_to_disk`` layout (Arrow IPC stream, ``state.json``, ``dataset_info.json``) and a
    cache's ``cache-*.arrow`` file beside it (a ``map`` result, not rows of the dataset)."""
    rows = nebius_openhands_rows()
    _, from_parquet = imported(write_shard(rows, tmp_path / "p" / "train.parquet"), tmp_path / "a")
    saved = tmp_path / "saved" / "train"
    saved.mkdir(parents=True)
    table = pa.Table.from_pylist(rows)
    with pa.OSFile(str(saved / "data-00000-of-00001.arrow"), "wb") as sink, \
            pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=1)
    (saved / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    (saved / "dataset_info.json").write_text("{}")
    with pa.OSFile(str(saved / "cache-0123.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table.slice(0, 1))
    report, from_folder = imported(saved.parent, tmp_path / "b")
    assert from_folder == from_parquet and report.not_read == []
    file_format = tmp_path / "f.arrow"  # the IPC file format too
    with pa.OSFile(str(file_format), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    _, from_file = imported(file_format, tmp_path / "c")
    assert from_file == from_parquet


def test_filter_and_sample_take_a_reproducible_subset(tmp_path):
    rows = [{**r, "trajectory_id": f"{r['trajectory_id']}-{k}", "resolved": k % 3 % 2}
            for k, r in enumerate(nebius_openhands_rows() * 6)]
    shard = write_shard(rows, tmp_path / "train.parquet", row_group_size=4)
    _, kept = imported(shard, tmp_path / "f", selection=Selection(filters=(("resolved", "1"),)))
    assert [t.task_id for t in kept] == [r["trajectory_id"] for r in rows if r["resolved"] == 1]
    pick = Selection(filters=(("resolved", "1"),), sample=3, seed=7)
    _, first = imported(shard, tmp_path / "s1", selection=pick)
    _, again = imported(shard, tmp_path / "s2", selection=pick)
    matching = [r["trajectory_id"] for r in rows if r["resolved"] == 1]
    drawn = sorted(np.random.default_rng(7).choice(len(matching), size=3, replace=False))
    assert [t.task_id for t in first] == [t.task_id for t in again] == [matching[i] for i in drawn]


def test_a_named_schema_the_file_lacks_and_a_bad_filter_are_refused_naming_them(tmp_path):
    shard = write_shard(nebius_swe_agent_rows(), tmp_path / "train.parquet")
    with pytest.raises(ValueError, match=r"--dataset-schema open-swe-traces: the file lacks column\(s\) language"):
        import_runs("auto", shard, tmp_path / "t.jsonl", selection=Selection(schema="open-swe-traces"))
    with pytest.raises(ValueError, match="--filter: no column resolved"):
        import_runs("auto", shard, tmp_path / "t.jsonl", selection=Selection(filters=(("resolved", "1"),)))
    with pytest.raises(ValueError, match="--dataset-schema 'nope': expected one of"):
        import_runs("auto", shard, tmp_path / "t.jsonl", selection=Selection(schema="nope"))
    assert not (tmp_path / "t.jsonl").exists()


def test_the_cli_reads_a_shard_with_a_filter_and_a_sample(tmp_path):
    from ._support import cli

    rows = [{**r, "trajectory_id": f"t-{k}", "resolved": k % 2} for k, r in enumerate(nebius_openhands_rows() * 3)]
    shard = write_shard(rows, tmp_path / "train.parquet")
    out = tmp_path / "t.jsonl"
    cli("import", "auto", shard, "--out", out, "--filter", "resolved=1", "--sample", "2", "--seed", "5", "--strict")
    matching = [r["trajectory_id"] for r in rows if r["resolved"] == 1]
    drawn = sorted(np.random.default_rng(5).choice(len(matching), size=2, replace=False))
    assert [t.task_id for t in load_trajectories(out)] == [matching[i] for i in drawn]
    bad = cli("import", "auto", shard, "--out", tmp_path / "u.jsonl", "--filter", "resolved", code=1)
    assert isinstance(bad.exception, ValueError)  # an input error: `interp` prints it on one line, exit 2
    assert str(bad.exception) == "--filter 'resolved': expected COLUMN=VALUE (a top-level column of the dataset)"
    assert not (tmp_path / "u.jsonl").exists()


def test_a_file_that_is_not_parquet_is_one_problem_naming_it(tmp_path):
    """Once `not UTF-8 (byte 148)`: a Parquet file is never read as JSON; one that is not Parquet is refused."""
    bad = tmp_path / "train.parquet"
    bad.write_bytes(b"PAR1 not really a parquet file \\x00\\xff")
    report = import_runs("auto", bad, tmp_path / "t.jsonl")
    assert not report.written and len(report.problems) == 1
    assert report.problems[0].startswith(f"{bad}:1: (file): unreadable parquet file: ")
