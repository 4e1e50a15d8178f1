"""``interp demo`` reuses a stage's result only when the inputs it was made from are this run's.

The demo runs its real steps (``stages.STEPS``: the registry's result paths and the demo's settings) with each
stage function replaced by a stub that writes what it was run with, and a stub sensor: no weights. A rerun with
another model recomputes every result that depends on the model or on a recomputed result, and reuses the rest;
a changed setting recomputes only its stage; stale per-unit parts do not survive.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from interp.pipelines import demo, stages
from interp.pipelines.steps import Step, StepContext, changes, run_steps

pytestmark = pytest.mark.unit


def _stub(step: Step):
    """A stage that writes its done file: the model it ran with (when it uses one) and the done files it read."""
    def run(ctx: StepContext, settings: dict) -> None:
        reads = {n: json.loads((ctx.out / next(s for s in stages.STEPS if s.name == n).done).read_text())
                 for n in step.needs}
        path = ctx.out / step.done
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"model": ctx.sensor.spec if step.model else None, "settings": settings,
                                    "reads": reads}))
        if step.name == "kl_repair":  # a per-unit part, as the real stage leaves
            (path.parent / "parts").mkdir(exist_ok=True)
            (path.parent / "parts" / f"{ctx.sensor.spec}.json").write_text("{}")
    return run


STUBS = tuple(replace(step, run=_stub(step)) for step in stages.STEPS)


@pytest.fixture()
def run(monkeypatch, tmp_path):
    """``run(model, **config)``: the demo with stub stages and a stub sensor; returns what it printed."""
    def sensor(spec, *args, **kwargs):
        return SimpleNamespace(spec=spec, revision=f"rev-{spec}", dtype="torch.float32", device="cpu", kernels=None)

    monkeypatch.setattr(stages, "sensor", sensor)
    monkeypatch.setattr("interp.sensor.kernels.binding.kernels_line", lambda kernels: "stub")
    monkeypatch.setattr(demo, "_figures_and_report", lambda console, config, out, subsets, timings: out)

    def go(model: str, **config) -> str:
        console = Console(record=True, width=400)
        demo.run_demo(demo.DemoConfig(out=tmp_path, model=model, **config), console, steps=STUBS)
        return console.export_text()
    return go


def _done(out: Path) -> dict[str, dict]:
    return {s.name: json.loads((out / s.done).read_text()) for s in STUBS}


def _models(doc: dict) -> set:
    """Every model a result was made from, its inputs' included."""
    return {doc["model"]} - {None} | {m for r in doc["reads"].values() for m in _models(r)}


def test_a_rerun_with_another_model_reuses_no_stale_result(run, tmp_path):
    first = run("model-a")
    assert first.count("reusing") == 0 and all(_models(d) <= {"model-a"} for d in _done(tmp_path).values())
    assert run("model-a").count("reusing") == len(STUBS)  # same inputs: everything reused

    second = run("model-b")
    done = _done(tmp_path)
    assert all("model-a" not in _models(d) for d in done.values()), "no result of model-a is left"
    assert done["probe"]["reads"]["store"]["model"] == "model-b"  # the probe does not use the model, its store does
    assert "model: 'model-a' -> 'model-b'" in second and "revision: 'rev-model-a' -> 'rev-model-b'" in second
    reused = {s.title for s in STUBS if f"{s.title}: reusing" in second}
    assert reused == {"externalization labels (rule-based vs annotations)"}  # made from the trajectories alone
    assert not (tmp_path / "patching" / "parts" / "model-a.json").exists(), "stale parts are removed"
    record = json.loads((tmp_path / "patching" / "kl_repair.inputs.json").read_text())
    assert record["model"] == "model-b" and record["dtype"] == "float32" and len(record["trajectories_sha256"]) == 64


def test_a_changed_setting_recomputes_only_its_stage(run, tmp_path):
    run("model-a", patch_trajectories=2)
    text = run("model-a", patch_trajectories=3)
    assert text.count("reusing") == len(STUBS) - 1 and "KL Repair per layer: inputs changed (settings.task_ids" in text
    assert len(_done(tmp_path)["kl_repair"]["settings"]["task_ids"]) == 3


def test_a_result_without_a_record_is_recomputed(run, tmp_path):
    run("model-a")
    (tmp_path / "harm" / "harm.inputs.json").unlink()  # e.g. made by an older demo
    text = run("model-a")
    assert "set-level deletion harm (from the DRSR stage's forwards): inputs changed (no record of the inputs it was made from)" in text


def test_steps_run_in_order_of_their_needs_and_changes_name_fields(tmp_path):
    later = Step("b", "b", "b/done.json", lambda ctx, s: None, needs=("a",))
    with pytest.raises(ValueError, match=r"step 'b' needs \['a'\], which do not run before it"):
        run_steps([later], StepContext(None, tmp_path, None, [], {}), Console(file=open("/dev/null", "w")))
    assert changes({"settings": {"k": 1}, "x": "a" * 64}, {"settings": {"k": 2}, "x": "b" * 64}) == [
        "settings.k: 1 -> 2", "x: aaaaaaaaaaaa... -> bbbbbbbbbbbb..."]
    assert changes({"a": 1}, {"a": 1}) == []


def test_the_cpu_subset_keeps_the_fewest_step_trajectories_of_every_domain():
    trajs = stages.trajectories(demo.DEMO_TRAJECTORIES)
    chosen = stages.demo_trajectories(trajs, 3)
    by_domain: dict[str, list] = {}
    for t in trajs:
        by_domain.setdefault(t.domain, []).append(t)
    assert len(by_domain) == 4 and len(chosen) == 12
    for domain, group in by_domain.items():  # a hand rule per domain: the 3 smallest step counts, file order on ties
        expected = sorted(range(len(group)), key=lambda i: (group[i].n_steps, i))[:3]
        assert [t.task_id for t in chosen if t.domain == domain] == [group[i].task_id for i in sorted(expected)]
    assert chosen == [t for t in trajs if t in chosen], "file order"
    assert stages.demo_trajectories(trajs, None) == trajs == stages.demo_trajectories(trajs, 99)


def test_a_changed_trajectory_subset_recomputes_what_reads_the_model_stages(run, tmp_path):
    run("model-a", per_domain=2)
    text = run("model-a", per_domain=3)
    done = _done(tmp_path)
    ids = done["store"]["settings"]["task_ids"]
    assert ids == [t.task_id for t in stages.demo_trajectories(stages.trajectories(demo.DEMO_TRAJECTORIES), 3)]
    assert "extract boundary features: inputs changed (settings.task_ids" in text
    for name in ("iclr", "probe", "tokens", "externalization"):  # read the store, directly or through a step
        title = next(s.title for s in STUBS if s.name == name)
        assert f"{title}: inputs changed (needs." in text, name
    assert "externalization labels (rule-based vs annotations): reusing" in text  # every trajectory, no model
    states = done["interventions"]["settings"]["states"]
    assert states and all(s.rpartition("@")[0] in ids for s in states)
    assert len(states) == demo.DemoConfig.intervention_states
    assert set(done["kl_repair"]["settings"]["task_ids"]) <= set(ids)
    assert {k.rpartition("@")[0] for k in done["drsr"]["settings"]["boundaries"]} <= set(ids)


def test_the_demo_records_the_generation_settings_it_runs(run, tmp_path, monkeypatch):
    """A DemoConfig whose continuations differ from RunSettings' defaults in every field: the real interventions
    step runs exactly those settings, and its record (the reuse key) equals what ran, field by field."""
    from interp.continuations.run import RunSettings
    from interp.params import settings as record

    wanted = RunSettings(conditions=("full", "delete_all_reasoning"), samples=1, max_new_tokens=64, seed=7,
                         temperature=0.3, top_p=0.9, max_tokens=5000)
    ran: list[RunSettings] = []
    monkeypatch.setattr(stages, "intervene", lambda sensor, states, trajs, out, settings: ran.append(settings))
    steps = tuple(s if s.name == "interventions" else replace(s, run=lambda ctx, settings: None)
                  for s in STUBS)
    real = next(s for s in stages.STEPS if s.name == "interventions")
    steps = tuple(real if s.name == "interventions" else s for s in steps)
    console = Console(record=True, width=400)
    demo.run_demo(demo.DemoConfig(out=tmp_path, model="m", interventions=wanted), console, steps=steps)
    assert ran == [wanted]
    saved = json.loads(real.record_path(tmp_path).read_text())["settings"]["settings"]
    assert saved == record(wanted) == record(ran[0])
    assert RunSettings(**saved) == wanted
