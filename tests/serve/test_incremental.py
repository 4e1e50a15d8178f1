"""A session's per-request work is incremental: each prompt is tokenized from where it departs from the last
(``interp.data.render.Renderer``), and the proxy's edits equal those of the full path (every prompt rendered
and tokenized whole, nothing remembered between requests)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from interp.accounting.tokens import parse_policy
from interp.data.render import Renderer, render
from interp.serve.app import Proxy
from interp.serve.messages import history_of

from ._support import TOOLS, opening, scripted_turns, tool_result

pytestmark = pytest.mark.parity

N = 6


def bodies(n: int) -> list[dict]:
    """The request bodies of an n-step run: request k holds the opening and k tool steps."""
    turns, messages, out = scripted_turns(n), opening(), []
    for k in range(n):
        messages = [*messages, turns[k], tool_result(turns[k], k + 1)]
        out.append({"model": "stub", "messages": messages, "tools": TOOLS})
    return out


def test_renderer_equals_render_and_tokenizes_only_what_is_new(tokenizer):
    renderer = Renderer()
    histories = [history_of(b, "run") for b in bodies(N)]
    runs = [h.trajectory for h in histories if h is not None]
    # an edit of an earlier step (its reasoning rewritten) departs inside the history: the renderer must
    # notice and take over only the prompt before that step
    edited = replace(runs[-1], steps=(runs[-1].steps[0], replace(runs[-1].steps[1], reasoning="rewritten"),
                                      *runs[-1].steps[2:]))
    kept = []
    for traj in [*runs, edited]:
        before = renderer.reused
        mine, full = renderer(traj, traj.n_steps, tokenizer), render(traj, traj.n_steps, tokenizer)
        assert (mine.text, mine.input_ids, mine.offsets, mine.segments) == \
            (full.text, full.input_ids, full.offsets, full.segments)
        kept.append(renderer.reused - before)
    start = tokenizer.convert_tokens_to_ids("<|im_start|>")

    def last_start(traj):  # where the prompt's generation prompt opens: its last <|im_start|>
        return max(i for i, t in enumerate(render(traj, traj.n_steps, tokenizer).input_ids) if t == start)

    # request k+1 takes over request k's prompt up to its generation prompt
    assert kept[0] == 0 and all(kept[k] == last_start(runs[k - 1]) for k in range(1, N))
    # the edited history repeats the last prompt only up to its second step's assistant turn
    assert kept[-1] == last_start(replace(runs[-1], steps=runs[-1].steps[:1])) < kept[-2]
    assert renderer.tokenized + renderer.reused == sum(render(t, t.n_steps, tokenizer).n_tokens
                                                       for t in [*runs, edited])


@pytest.mark.parametrize("policy", ["iclr:rho=0.5", "observation_masking:m=2"])
def test_session_edits_equal_the_full_path(tiny_sensor, tmp_path, policy):
    sent: dict[str, list[tuple[bytes, dict | None, int | None]]] = {}
    for mode in ("incremental", "full"):
        proxy = Proxy("http://127.0.0.1:9/v1", parse_policy(policy), tmp_path / mode, sensor=tiny_sensor)
        session = proxy.session("run")
        sent[mode] = []
        for body in bodies(N):
            if mode == "full":  # nothing remembered between requests: whole renders, every text counted anew
                if session.state.scorer is not None:
                    session.state.scorer.scorer.renderer = render
                session.state.counts.clear()
            out = proxy.edit(json.dumps(body).encode(), body, session, "run")
            assert out.failure is None
            sent[mode].append((out.content, out.log, out.removed_tokens))
    assert sent["incremental"] == sent["full"]
    assert any(log and log["edits"] for _, log, _ in sent["full"]) and sent["full"][-1][2] != 0  # the policy did edit
