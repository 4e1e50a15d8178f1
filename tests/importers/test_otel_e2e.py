"""OpenTelemetry spans through the CLI: ``interp import`` (no code), ``validate --strict``, ``render``, ``extract``.

The trace is the OTLP JSON export of tests/importers/test_otel.py (Arize's
published GenAI chat and tool span attributes in the envelope the collector
writes), run on the tiny random Qwen3.5 in-process as in
tests/importers/test_sessions_e2e.py.
"""

from __future__ import annotations

import json

import pytest

from interp.data.trajectory import load_trajectories

from ._support import cli
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
