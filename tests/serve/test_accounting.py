"""Honest accounting of live runs: the proxy's removal in the upstream's terms, and `interp tokens --paired`
withholding a decomposition whose premise fails (phantom or unknown removal), stray requests, --prices."""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx
import pytest

from interp.accounting.tokens import parse_policy
from interp.pipelines.cli import main
from interp.schema import check
from interp.serve.app import Proxy
from interp.serve.runlog import PAIRED_FIELDS, read_requests

from ._support import Stub, opening, run_agent, scripted_turns

pytestmark = pytest.mark.e2e

TASKS = 3
STEPS = 3


class DropsReasoning(Stub):
    """An upstream like `transformers serve` with a template that never renders ``reasoning_content``: it bills
    the prompt without it."""

    def usage(self, body: dict[str, Any]) -> dict[str, Any]:
        seen = [{k: v for k, v in m.items() if k != "reasoning_content"} for m in body["messages"]]
        return super().usage({**body, "messages": seen})


def _runs(serving, tmp_path, stub_cls: type[Stub], policy: str, tokenizer: object) -> None:
    """Run A (full) and run B (``policy``) of TASKS scripted tasks, each named by its session header."""
    for name, pol in (("a", "full"), ("b", policy)):
        proxy = Proxy(serving(stub_cls(scripted_turns(STEPS)).build()), parse_policy(pol), tmp_path / name,
                      tokenizer=tokenizer)
        url = serving(proxy.build())
        for i in range(TASKS):
            run_agent(url, proxy.token, STEPS, session=f"task-{i}")


def _paired(tmp_path, monkeypatch, capsys, *extra: str) -> tuple[int, dict[str, Any] | None, str]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["interp", "tokens", "--trajectories", str(tmp_path / "a"), "--paired",
                                      str(tmp_path / "b"), "--out", str(tmp_path / "o"), *extra])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    path = tmp_path / "o" / "paired.json"
    doc = check(json.loads(path.read_text()), PAIRED_FIELDS, "paired.json") if path.exists() else None
    return int(exc.value.code or 0), doc, out.out + out.err


@pytest.mark.parametrize("policy", ["delete_all_reasoning", "observation_masking:m=1"])
def test_removal_is_the_template_render_difference(serving, tmp_path, tokenizer, policy):
    """Counted piece by piece between special tokens, the removal equals the whole renders' token counts."""
    stub = Stub(scripted_turns(STEPS))
    proxy = Proxy(serving(stub.build()), parse_policy(policy), tmp_path / "log", tokenizer=tokenizer)
    sent, _ = run_agent(serving(proxy.build()), proxy.token, STEPS)
    rows = read_requests(tmp_path / "log")

    def rendered(messages: list[dict]) -> int:  # the tokenizer's own call, on what each side held
        return len(tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                                 return_dict=True)["input_ids"])

    expect = [rendered(s["messages"]) - rendered(r["messages"]) for s, r in zip(sent, stub.received)]
    assert [r["removed_tokens"] for r in rows] == expect
    assert expect[0] == 0 and expect[-1] != 0  # the template renders the policies' edits (a mask can be longer)
    assert [r["removed_measure"] for r in rows] == ["template" if s != r else "unedited"
                                                    for s, r in zip(sent, stub.received)]


def test_a_removal_the_upstream_never_saw_is_flagged_and_withheld(serving, tmp_path, monkeypatch, capsys, tokenizer):
    _runs(serving, tmp_path, DropsReasoning, "delete_all_reasoning", tokenizer)
    b = read_requests(tmp_path / "b")
    assert sum(r["removed_tokens"] for r in b) > 0  # the proxy did remove reasoning (its template renders it)
    a = read_requests(tmp_path / "a")
    assert [r["prompt_tokens"] for r in a] == [r["prompt_tokens"] for r in b]  # billed as if it had not
    code, doc, text = _paired(tmp_path, monkeypatch, capsys)
    assert code == 0 and doc is not None
    assert {f["kind"] for f in doc["flags"]} == {"phantom_removal"}
    assert sorted(f["session"] for f in doc["flags"]) == [f"task-{i}" for i in range(TASKS)]
    assert doc["refused"] and doc["amplification"] is None and doc["amplification_ci"] is None
    assert doc["saving_ratio"] is None and "REFUSED" in text
    assert doc["totals"]["total_change"] == 0  # the bills themselves are reported as they are


def test_a_removal_the_upstream_saw_stands(serving, tmp_path, monkeypatch, capsys, tokenizer):
    _runs(serving, tmp_path, Stub, "delete_all_reasoning", tokenizer)  # this upstream bills the reasoning
    code, doc, text = _paired(tmp_path, monkeypatch, capsys)
    assert code == 0 and doc is not None and doc["flags"] == [] and doc["refused"] is None
    assert doc["n_tasks"] == TASKS and doc["removed_measure"] == ["template"]
    d = sum(r["removed_tokens"] for r in read_requests(tmp_path / "b"))
    assert doc["amplification"] == pytest.approx(abs(doc["totals"]["total_change"]) / d)
    assert "REFUSED" not in text and doc["provenance"]["inputs"]["base"]


def test_an_unknown_removal_is_not_read_as_zero(serving, tmp_path, monkeypatch, capsys):
    _runs(serving, tmp_path, Stub, "delete_all_reasoning", None)  # no tokenizer
    b = read_requests(tmp_path / "b")
    assert {r["removed_measure"] for r in b if r["edited"]} == {"unknown"}
    code, doc, text = _paired(tmp_path, monkeypatch, capsys)
    assert code == 0 and doc is not None
    assert {f["kind"] for f in doc["flags"]} == {"unknown_removal"} and doc["amplification"] is None
    assert "--tokenizer" in doc["flags"][0]["detail"] and "REFUSED" in text


def test_one_off_requests_are_not_paired_as_tasks(serving, tmp_path, monkeypatch, capsys, tokenizer):
    _runs(serving, tmp_path, Stub, "observation_masking:m=1", tokenizer)
    for name in ("a", "b"):  # a client's probe: the same one-off request in both runs
        proxy = Proxy(serving(Stub(scripted_turns(0)).build()), parse_policy("full"), tmp_path / name,
                      tokenizer=tokenizer)
        r = httpx.post(f"{serving(proxy.build())}/chat/completions", json={"model": "m", "messages": opening()},
                       headers={"authorization": f"Bearer {proxy.token}"}, timeout=30)
        assert r.status_code == 200
    code, doc, _ = _paired(tmp_path, monkeypatch, capsys)
    assert code == 0 and doc is not None
    assert doc["n_tasks"] == TASKS and len(doc["stray"]) == 1 and doc["stray"][0] not in \
        {t["session"] for t in doc["per_task"]}


def test_prices_with_trajectory_files_are_refused(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    demo = Path(__file__).resolve().parents[2] / "data" / "demo" / "trajectories.jsonl"
    (tmp_path / "p.json").write_text(json.dumps({"uncached_input": 1, "cache_read": 0, "cache_write": 1,
                                                 "output": 2}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["interp", "tokens", "--trajectories", str(demo), "--paired", str(demo),
                                      "--prices", str(tmp_path / "p.json"), "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code != 0 and "--prices" in capsys.readouterr().err and not (tmp_path / "o").exists()
