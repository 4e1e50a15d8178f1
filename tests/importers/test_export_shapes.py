"""The finishing and export shapes real producers write (issue #47), each on a real excerpt imported with no code.

Claude Code sessions whose ``parentUuid`` chain is absent (exported or hand-made
sessions) or broken (a parent the file lacks, a cycle) are read in file order
and the break is counted; OpenHands' SWE-bench ``output.jsonl`` rows (one
instance with its ``history``); Gemini CLI's API-history form; tau2-bench
submissions without ``info``; a directory mixing formats. Where no public file
has the shape, a real file is re-shaped into it and the test says how.
"""

from __future__ import annotations

import json

import pytest

from ._support import REAL
from .test_sessions import CC_NEW, CC_THINK, actual, imported, raw, run, write

pytestmark = pytest.mark.unit


# ---- Claude Code without a chain, or with a broken one -------------------------------------------------------


def file_order(lines: list[dict]) -> tuple[str, list]:
    """The independent reading of a session without a usable chain: its main user and assistant entries in file
    order."""
    return run([d for d in lines if d.get("type") in ("user", "assistant") and not d.get("isSidechain")])


@pytest.mark.parametrize("shape", ["null", "absent"])
def test_a_session_without_a_parent_chain_is_read_in_file_order(tmp_path, shape):
    """An exported session (every ``parentUuid`` null) or a hand-made one (no ``parentUuid`` key): the real
    thinking session re-shaped so. It keeps every turn (it once kept only the last entry: 0 steps)."""
    lines = raw(CC_THINK)
    for d in lines:
        if shape == "null":
            d["parentUuid"] = None
        else:
            d.pop("parentUuid", None)
    report, (traj,) = imported("auto", write(tmp_path / "s.jsonl", lines), tmp_path, strict=True)
    assert (traj.task, actual(traj)) == file_order(lines)
    _, (chained,) = imported("auto", CC_THINK, tmp_path / "c", strict=True)
    assert actual(traj) == actual(chained) and traj.final_answer == chained.final_answer  # no greeting dropped
    n = sum(1 for d in lines if d.get("type") in ("user", "assistant"))
    assert report.dropped["entries without a parentUuid chain (read in file order)"] == n
    assert "assistant turns before the task (a greeting)" not in report.dropped


def test_a_parent_missing_from_the_file_is_counted_and_the_session_read_in_file_order(tmp_path):
    """A chain broken by a parent no entry of the file has (an entry lost in an export): once refused as "tool
    result answers no open call"; now read in file order, the break counted."""
    lines = raw(CC_THINK)
    msgs = [d for d in lines if d.get("type") in ("user", "assistant")]
    msgs[len(msgs) // 2]["parentUuid"] = "00000000-0000-4000-8000-00000000dead"
    report, (traj,) = imported("auto", write(tmp_path / "s.jsonl", lines), tmp_path, strict=True)
    assert (traj.task, actual(traj)) == file_order(lines)
    assert report.dropped["parentUuid naming no entry of the file (a broken chain, read in file order)"] == 1


def test_a_parent_cycle_is_counted_not_silently_accepted(tmp_path):
    lines = raw(CC_THINK)
    msgs = [d for d in lines if d.get("type") in ("user", "assistant")]
    msgs[0]["parentUuid"] = msgs[-1]["uuid"]  # the root names the last entry: the walk back never ends
    report, (traj,) = imported("auto", write(tmp_path / "s.jsonl", lines), tmp_path, strict=True)
    assert (traj.task, actual(traj)) == file_order(lines)
    assert report.dropped["parentUuid chain with a cycle (read in file order)"] == 1


def test_a_chain_when_present_is_used_and_its_branch_points_counted(tmp_path):
    """The real 2.1 session with a retried answer (same parent, earlier in the file): the chain to the last
    entry is kept, the retried entry and the branch point counted."""
    lines = raw(CC_NEW)
    i, answer = next((i, d) for i, d in enumerate(lines) if d.get("type") == "assistant")
    retried = json.loads(json.dumps(answer))
    retried["uuid"] = "00000000-0000-4000-8000-000000000001"
    retried["message"]["content"] = [{"type": "text", "text": "an answer the user rewound"}]
    lines.insert(i, retried)
    report, (traj,) = imported("auto", write(tmp_path / "s.jsonl", lines), tmp_path)
    assert traj.final_answer == answer["message"]["content"][0]["text"] and len(traj.steps) == 1
    assert report.dropped["branch points (an entry with several children; the branch to the last entry kept)"] == 1
    assert not any("file order" in d for d in report.dropped)
