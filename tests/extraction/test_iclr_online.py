"""Online ICLR (the study's method) against a naive from-scratch loop, and the Step Only Entropy scorer.

Reference: for t = 1..n, rebuild the history with steps 1..t-1 compressed
(blocks located by splitting the recorded text on "\\n\\n" here, not by the
code under test), render it at boundary t, run one plain unchunked HF
forward over the tokens up to the end of step t's reasoning, average the
float64 entropies (bits) at positions i-1 over each block's tokens i, drop the
floor(0.8 N) lowest (ties: earlier first), write back. The scorer under test
reuses cache snapshots across steps; in float64 the two agree to 1e-5 bits.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from interp.data.conditions import SKIP, apply_condition, step_only_history
from interp.data.render import render
from interp.extraction.entropy import EntropyScorer, entropy_table

from ._reference import entropy_bits, hf_forward

pytestmark = pytest.mark.parity


def _write_back(history, t: int, drop: set[int]):
    """Step t's k-th non-blank "\\n\\n" piece -> [SKIP] for k in ``drop`` (independent of replace_blocks)."""
    pieces = history.steps[t - 1].reasoning.split("\n\n")
    k = -1
    for i, piece in enumerate(pieces):
        if piece.strip():
            k += 1
            if k in drop:
                pieces[i] = SKIP
    steps = list(history.steps)
    steps[t - 1] = replace(steps[t - 1], reasoning="\n\n".join(pieces))
    return replace(history, steps=tuple(steps))


def _scratch_scores(sensor, history, t: int) -> tuple[list[float], int]:
    """Block scores of step t with ``history`` in context, from one from-scratch HF forward; input length."""
    r = render(history, t, sensor.tokenizer)
    spans = r.spans("reasoning_block", step=t)
    end = max(s.end for s in spans)
    need = sorted({i - 1 for s in spans for i in range(s.start, s.end)})
    h = dict(zip(need, entropy_bits(hf_forward(sensor, r.input_ids[:end], keep=need).logits).tolist()))
    return [sum(h[i - 1] for i in range(s.start, s.end)) / s.n_tokens for s in spans], end


def _naive_online(sensor, traj, rho: float = 0.8):
    """The from-scratch online loop: (final history, {step: scores}, {step: dropped set})."""
    history, scores, drops = traj, {}, {}
    for t in range(1, traj.n_steps + 1):
        scores[t], _ = _scratch_scores(sensor, history, t)
        n = len(scores[t])
        drops[t] = set(sorted(range(n), key=lambda i: (scores[t][i], i))[: math.floor(rho * n)]) if n > 1 else set()
        history = _write_back(history, t, drops[t])
    return history, scores, drops


@pytest.mark.parametrize("task_id", ["mini-code-1", "web-002", "code-003"])
def test_online_with_prefix_reuse_equals_a_naive_loop(tiny_sensor_fp64, mini_trajectory, demo_trajectories, task_id):
    traj = mini_trajectory if task_id == mini_trajectory.task_id else next(
        t for t in demo_trajectories if t.task_id == task_id)
    want, want_scores, want_drops = _naive_online(tiny_sensor_fp64, traj)
    scorer = EntropyScorer(tiny_sensor_fp64)
    got, log = apply_condition("iclr", traj, traj.n_steps, scorer=scorer)
    assert got == want
    assert {t: {e.block for e in log.edits if e.step == t} for t in want_drops} == want_drops
    for t, ref in want_scores.items():
        mine = [s.mean_entropy_bits for s in scorer.records[(traj.task_id, t)]]
        assert len(mine) == len(ref) and max(abs(a - b) for a, b in zip(mine, ref)) < 1e-5, t
    # prefix reuse happened: fewer tokens run than re-running every input from scratch
    naive = EntropyScorer(tiny_sensor_fp64, reuse=False)
    again, _ = apply_condition("iclr", traj, traj.n_steps, scorer=naive)
    assert again == got
    assert scorer.tokens_run < naive.tokens_run
    # boundaries: the online condition at b is the first b steps of the full run (prefix property, no recompute)
    before = scorer.forwards
    for b in range(1, traj.n_steps + 1):
        at_b, _ = apply_condition("iclr", traj, b, scorer=scorer)
        assert at_b.steps[:b] == got.steps[:b] and at_b.steps[b:] == traj.steps[b:]
    assert scorer.forwards == before, "repeated inputs are memoized"


def _forwarded(sensor, traj, drops: dict[int, set[int]], cut: bool) -> int:
    """Tokens the online scorer must forward, counted by hand from the naive loop's inputs: step t's input up to
    its reasoning's end, less what it shares with step t-1's (never past its first entropy position, one token
    left to run), rounded down to a block start of step t-1 or its end unless the cache can be ``cut`` anywhere."""
    total, history, prev, marks = 0, traj, None, set()
    for t in range(1, traj.n_steps + 1):
        r = render(history, t, sensor.tokenizer)
        spans = r.spans("reasoning_block", step=t)
        if spans:
            ids = r.input_ids[:max(s.end for s in spans)]
            start = 0
            if prev is not None:
                shared = next((i for i, (a, b) in enumerate(zip(ids, prev)) if a != b), min(len(ids), len(prev)))
                shared = min(shared, len(ids) - 1, *(s.start - 1 for s in spans if s.start >= 1))
                start = shared if cut else max(p for p in marks if p <= shared)
            total += len(ids) - start
            prev, marks = ids, {start, *(s.start for s in spans), len(ids)}
        history = _write_back(history, t, drops[t])
    return total


@pytest.fixture(scope="module")
def llama_long_fp64(tmp_path_factory):
    """A random plain-attention Llama in float64 with room for a whole demo history (4,096 positions)."""
    from transformers import LlamaConfig

    from interp.sensor.models import load_model
    from tests.conftest import _save_random

    config = LlamaConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=4096, initializer_range=0.2)
    return load_model(str(_save_random(tmp_path_factory.mktemp("llama4k"), config, seed=8)), dtype="fp64")


@pytest.mark.parametrize("model", ["tiny_sensor_fp64", "llama_long_fp64"])
def test_online_forwards_only_what_the_last_drop_changed(request, model, mini_trajectory):
    """Each step continues the previous input from its first dropped block (the hybrid: a snapshot at every block
    start; plain attention: the cache cut back to the departure token), with the naive loop's decisions and
    scores (float64: 1e-5 bits against HF's own kernels, 1e-9 against the same code run from scratch); the
    tokens forwarded equal a hand count from the naive loop's inputs."""
    sensor = request.getfixturevalue(model)
    want, want_scores, want_drops = _naive_online(sensor, mini_trajectory)
    scorer = EntropyScorer(sensor)
    got, _ = apply_condition("iclr", mini_trajectory, mini_trajectory.n_steps, scorer=scorer)
    assert got == want and any(want_drops.values())
    cut = model == "llama_long_fp64"
    scratch = EntropyScorer(sensor, reuse=False)  # the same forward code, every input from its first token
    assert apply_condition("iclr", mini_trajectory, mini_trajectory.n_steps, scorer=scratch)[0] == want
    for t, ref in want_scores.items():
        mine = [s.mean_entropy_bits for s in scorer.records[(mini_trajectory.task_id, t)]]
        again = [s.mean_entropy_bits for s in scratch.records[(mini_trajectory.task_id, t)]]
        assert len(mine) == len(ref) and max(abs(a - b) for a, b in zip(mine, ref)) < 1e-5, t  # HF's kernels
        assert max(abs(a - b) for a, b in zip(mine, again)) < 1e-9, t
    assert scorer.tokens_run == _forwarded(sensor, mini_trajectory, want_drops, cut)


def test_online_scores_differ_from_full_context(tiny_sensor_fp64, mini_trajectory):
    """Step 1 sees no compression (same scores); a later step's scores move once earlier steps hold [SKIP]."""
    online = EntropyScorer(tiny_sensor_fp64)
    full = EntropyScorer(tiny_sensor_fp64, context="full")
    apply_condition("iclr", mini_trajectory, mini_trajectory.n_steps, scorer=online)
    apply_condition("iclr", mini_trajectory, mini_trajectory.n_steps, scorer=full)
    key = (mini_trajectory.task_id, 1)
    assert [s.mean_entropy_bits for s in online.records[key]] == pytest.approx(
        [s.mean_entropy_bits for s in full.records[key]], abs=1e-9)
    later = (mini_trajectory.task_id, 3)
    diff = max(abs(a.mean_entropy_bits - b.mean_entropy_bits) for a, b in zip(online.records[later], full.records[later]))
    assert diff > 1e-6
    assert online.records[later][0].input_tokens < full.records[later][0].input_tokens


def test_step_only_scorer_equals_a_hand_forward(tiny_sensor_fp64, mini_trajectory):
    """The iclr_step_only condition (context built by the condition) and the step_only scorer under iclr
    score each step with only its reasoning in context: equal to a hand forward, same edits."""
    scorer = EntropyScorer(tiny_sensor_fp64)
    edited, _ = apply_condition("iclr_step_only", mini_trajectory, mini_trajectory.n_steps, scorer=scorer)
    step_only = EntropyScorer(tiny_sensor_fp64, context="step_only")
    same, _ = apply_condition("iclr", mini_trajectory, mini_trajectory.n_steps, scorer=step_only)
    assert same == edited
    for t in range(1, mini_trajectory.n_steps + 1):
        ref, end = _scratch_scores(tiny_sensor_fp64, step_only_history(mini_trajectory, t), 1)
        for mine in (scorer.records[(f"{mini_trajectory.task_id}@step{t}", 1)],
                     step_only.records[(mini_trajectory.task_id, t)]):
            # the recorded input is the whole render at boundary 1: past the reasoning's end (action, observation)
            whole = render(step_only_history(mini_trajectory, t), 1, tiny_sensor_fp64.tokenizer).n_tokens
            assert len(mine) == len(ref) and mine[0].input_tokens == whole > end
            assert max(abs(s.mean_entropy_bits - r) for s, r in zip(mine, ref)) < 1e-5
    # the context holds nothing but the template and the step: far shorter than the history
    assert max(s.input_tokens for rec in step_only.records.values() for s in rec) < render(
        mini_trajectory, 1, tiny_sensor_fp64.tokenizer).n_tokens


def test_limit_applies_to_the_scorer_input(tiny_sensor, mini_trajectory):
    """A step whose online input is over max_tokens is not scored, left whole, and recorded with its length."""
    free = entropy_table(tiny_sensor, [mini_trajectory], full=False)
    inputs = free.drop_duplicates("step").set_index("step")["input_tokens"]
    limit = int(inputs[2] + inputs[3]) // 2  # steps 1-2 fit, 3-4 do not
    capped = entropy_table(tiny_sensor, [mini_trajectory], max_tokens=limit, full=False)
    by_step = capped.drop_duplicates("step").set_index("step")
    assert by_step["scored"].tolist() == [True, True, False, False]
    # recorded even when over the limit; step 4's input is longer now: step 3 was left whole, not compressed
    assert by_step["input_tokens"].tolist()[:3] == inputs.tolist()[:3]
    assert by_step["input_tokens"][4] > inputs[4] > limit
    assert capped.loc[~capped["scored"], "mean_entropy_bits"].isna().all()
    assert not capped.loc[~capped["scored"], "dropped"].any()
    scorer = EntropyScorer(tiny_sensor, max_tokens=limit)
    edited, log = apply_condition("iclr", mini_trajectory, 4, scorer=scorer)
    assert edited.steps[2:] == mini_trajectory.steps[2:]
    assert any(n.startswith("step 3:") and "not scored" in n for n in log.notes)


def test_action_and_observation_count_toward_the_limit(tiny_sensor, mini_trajectory):
    """The study's scorer is given the history and the current completed step: a step whose reasoning ends
    under max_tokens but whose action and observation push the input over it is not scored (left whole)."""
    tok = tiny_sensor.tokenizer
    r2 = render(mini_trajectory, 2, tok)  # the scorer's input for step 2 (hand reference: the boundary-2 render)
    reasoning_end = max(s.end for s in r2.spans("reasoning_block", step=2))
    assert r2.n_tokens - reasoning_end >= 2  # step 2's action, observation and the template glue after them
    limit = reasoning_end + (r2.n_tokens - reasoning_end) // 2  # the reasoning fits, the whole input does not
    assert render(mini_trajectory, 1, tok).n_tokens <= limit  # step 1's whole input fits
    scorer = EntropyScorer(tiny_sensor, max_tokens=limit)
    edited, log = apply_condition("iclr", mini_trajectory, 2, scorer=scorer, rho=0.0)  # step 1 kept: r2 is the input
    assert scorer.records[(mini_trajectory.task_id, 1)][0].mean_entropy_bits is not None
    step2 = scorer.records[(mini_trajectory.task_id, 2)]
    assert all(s.mean_entropy_bits is None and s.input_tokens == r2.n_tokens for s in step2)
    assert edited.steps[1] == mini_trajectory.steps[1]
    assert any(n.startswith("step 2:") and "not scored" in n for n in log.notes), log.notes
    full = EntropyScorer(tiny_sensor, max_tokens=limit, context="full")
    assert full(mini_trajectory, 1) is not None and full(mini_trajectory, 2) is None  # the same rule, full context


def test_the_online_stage_prints_progress_lines(tiny_sensor, mini_trajectory, capsys):
    """ICLR online runs the model per step: it reports trajectories done on stderr, like extraction."""
    entropy_table(tiny_sensor, [mini_trajectory, mini_trajectory], full=False)
    err = capsys.readouterr().err
    assert "iclr (online): 0/2 trajectories" in err and "iclr (online): 2/2 trajectories (100%)" in err
