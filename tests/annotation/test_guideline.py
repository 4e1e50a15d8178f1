"""The labelling guideline: one file, its worked examples true to the demo's annotations, cited by the labelers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from interp.annotation.guideline import guideline_html, guideline_markdown, section
from interp.data.labels import annotation_labels
from interp.data.trajectory import load_trajectories

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
FIELD = {"G": "externalization_gap", "y": "future_necessity"}
DEFINITIONS = ("Derived state", "Carriers", "Re-derivation", "Added reasoning", "Re-planning")


def test_every_definition_and_both_labels_have_a_section():
    for title in (*DEFINITIONS, "G: externalization gap", "y: future necessity", "Worked examples", "Edge cases"):
        assert len(section(title)) > 80, title
    assert "**G = 1**" in section("G: externalization gap") and "**G = 0**" in section("G: externalization gap")
    assert "**y = 1**" in section("y: future necessity") and "**y = 0**" in section("y: future necessity")
    with pytest.raises(KeyError, match="no section 'Nope'; sections: Definitions"):
        section("Nope")


def test_a_section_ends_at_the_next_heading_of_its_level():
    assert "### Carriers" not in section("Derived state") and "Carriers" in section("Definitions")
    assert section("Definitions").endswith(section("Re-planning"))


def test_the_worked_examples_are_the_demo_annotations():
    """Each example names a demo task and boundary; its label is the annotation there (all four kinds present)."""
    trajs = load_trajectories(ROOT / "data" / "demo" / "trajectories.jsonl")
    labels = {k: annotation_labels(trajs, f) for k, f in FIELD.items()}
    found = re.findall(r"^- \*\*([Gy]) = ([01])\*\*, `([\w-]+)` at `b = (\d+)`", section("Worked examples"), re.M)
    assert {(k, v) for k, v, _, _ in found} == {("G", "0"), ("G", "1"), ("y", "0"), ("y", "1")}
    for kind, value, task, b in found:
        assert labels[kind][(task, int(b))] == int(value), (kind, task, b)
        n = next(t.n_steps for t in trajs if t.task_id == task)
        assert kind == "G" or int(b) < n  # y is undefined at the final boundary: never an example


def test_the_html_is_the_markdown_rendered_with_raw_html_escaped(monkeypatch):
    html = guideline_html()
    assert html.startswith("<h1>Labelling guideline") and html.count("<h3>") == len(DEFINITIONS)
    assert "<strong>G = 1</strong>" in html and "<code>office-002</code>" in html
    from interp.annotation import guideline

    monkeypatch.setattr(guideline, "guideline_markdown", lambda: "# T\n\n<script>alert(1)</script> <b>x</b>\n")
    out = guideline.guideline_html()
    assert "<script>" not in out and "&lt;script&gt;" in out and "<b>" not in out


def test_the_labelers_cite_the_guideline_instead_of_restating_it():
    from interp.externalization import labeler
    from probes import targets

    for doc in (labeler.__doc__, targets.__doc__):
        assert "interp/annotation/guideline.md" in doc
    assert "*Derived state*" in labeler.__doc__ and "task-specific plans" not in labeler.__doc__
    assert "*Re-derivation*" in targets.__doc__
    assert "STUDY_CARRIERS" in guideline_markdown()
