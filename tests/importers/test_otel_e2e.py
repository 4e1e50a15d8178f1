"""OpenTelemetry spans through the CLI: ``interp import`` (no code), ``validate --strict``, ``render``, ``extract``.

The trace is the OTLP JSON export of tests/importers/test_otel.py (Arize's
published GenAI chat and tool span attributes in the envelope the collector
writes), run on the tiny random Qwen3.5 in-process as in
tests/importers/test_sessions_e2e.py; then the real exported traces with
message content (any-agent, veadk: tests/importers/samples/otel/SOURCES.md).
"""

from __future__ import annotations

import json

import pytest

from interp.data.trajectory import load_trajectories

from ._support import REAL, cli
from .test_otel import attrs, otlp

pytestmark = pytest.mark.e2e

TINY = "tiny-qwen3.5"


def test_an_otel_trace_imports_validates_renders_and_extracts(tmp_path):
    from interp.extraction.store import Store

    chat, tool = attrs("otel_genai_client_span_tool_calls"), attrs("otel_genai_tool_execution_span")
    source = tmp_path / "trace.json"
    source.write_text(json.dumps(otlp([("t1", "a", "chat gpt-4", 10, chat),
                                       ("t1", "b", "execute_tool get_weather", 20, tool)])), encoding="utf-8")
    out = tmp_path / "otel.jsonl"
    assert "formats: otel 1" in cli("import", "auto", source, "--out", out, "--strict").output
    assert "1 trajectories" in cli("validate", "--strict", out).output
    (traj,) = load_trajectories(out)
    rendered = cli("render", out, "--task-id", "t1", "--after-step", 1, "--model", TINY)
    assert "reasoning_block" in rendered.output and traj.steps[0].reasoning in rendered.output
    store = tmp_path / "store"
    cli("extract", "--trajectories", out, "--store", store, "--model", TINY, "--layers", "3,7",
        "--pooling", "last,mean_reasoning")
    frame = Store(store).manifest()
    assert set(frame["status"]) == {"ok"} and len(frame) == traj.n_steps == 3


REAL_TRACES = [REAL / "otel" / "any-agent" / f"{name}_trace.json"
               for name in ("LANGCHAIN", "GOOGLE", "LLAMA_INDEX", "TINYAGENT")] + [
    REAL / "otel" / "veadk" / "chat_robot_two_turns.json"]


def test_the_real_exported_traces_import_validate_render_and_extract(tmp_path):
    """The real any-agent and veadk traces (tests/importers/samples/otel/SOURCES.md): each imported with
    ``auto --strict``, all validated strictly, a later step of each run rendered (its task and the call before
    it reach the prompt: these runs record no reasoning), and every step extracted."""
    from interp.extraction.store import Store

    outputs = []
    for i, source in enumerate(REAL_TRACES):
        out = tmp_path / f"{i}.jsonl"
        runs = 2 if source.parent.name == "veadk" else 1
        assert f"formats: otel {runs}" in cli("import", "auto", source, "--out", out, "--strict").output
        outputs.append(out)
    joined = tmp_path / "all.jsonl"
    joined.write_text("".join(p.read_text(encoding="utf-8") for p in outputs), encoding="utf-8")
    trajs = load_trajectories(joined)
    assert f"{len(trajs)} trajectories" in cli("validate", "--strict", joined).output and len(trajs) == 6
    for traj in trajs:
        rendered = cli("render", joined, "--task-id", traj.task_id, "--after-step", 1, "--model", TINY).output
        assert traj.task.split("\n")[0][:40] in rendered
        first = traj.steps[0].action
        assert ((first.text or "")[:40] if first.is_text else first.calls[0].tool) in rendered
    store = tmp_path / "store"
    cli("extract", "--trajectories", joined, "--store", store, "--model", TINY, "--layers", "3,7",
        "--pooling", "last")
    frame = Store(store).manifest()
    assert set(frame["status"]) == {"ok"} and len(frame) == sum(t.n_steps for t in trajs)
    assert set(frame["task_id"]) == {t.task_id for t in trajs}
