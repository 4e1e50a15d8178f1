"""History conditions: pure, logged edits of the history at boundary b.

Expected edits are derived here from the trajectory itself (block lists,
hand-made scorers, the tokenizer's counts), never from the condition code.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from interp.data.actions import writes_code
from interp.data.conditions import CONDITIONS, HIDDEN, SKIP, apply_condition
from interp.data.trajectory import Action, Step, ToolCall, Trajectory

from ._support import ROOT, mini_record

pytestmark = pytest.mark.unit


def length_scorer(traj: Trajectory, t: int) -> list[float]:
    """Hand-made block scorer: a block's score is its length (short blocks are 'uninformative')."""
    return [float(len(b)) for b in traj.steps[t - 1].blocks]


PARAMS = {"iclr": {"scorer": length_scorer}, "iclr_step_only": {"scorer": length_scorer}}
ICLR_LIKE = ("iclr", "iclr_step_only")
# block edits (drsr_gate deletes observations and tool exchanges too: tests/gate)
REASONING_ONLY = sorted(set(CONDITIONS) - {"hide_observation", "hide_stderr", "random", "drsr_gate",
                                                 "observation_masking"})


def step_json(step: Step) -> str:
    return json.dumps(step.to_json(), sort_keys=True)


def removed_blocks(orig: Trajectory, edited: Trajectory, b: int) -> dict[int, Counter]:
    """Per step: the multiset of original blocks missing from the edited step (``[SKIP]`` counts as missing)."""
    out = {}
    for t in range(1, b + 1):
        gone = Counter(orig.steps[t - 1].blocks) - Counter(x for x in edited.steps[t - 1].blocks if x != SKIP)
        if gone:
            out[t] = gone
    return out


def check_common(name: str, traj: Trajectory, b: int, edited: Trajectory, log, counter) -> None:
    """What every reasoning-only condition must preserve, and an edit log equal to the independent diff."""
    where = f"{name} {traj.task_id} @ b={b}"
    assert edited.n_steps == traj.n_steps, where
    for field in ("task_id", "domain", "system_prompt", "task", "tools", "final_answer", "outcome",
                  "annotations", "source", "extra"):
        assert getattr(edited, field) == getattr(traj, field), f"{where}: {field}"
    for t, (s0, s1) in enumerate(zip(traj.steps, edited.steps), start=1):
        # actions and observations of ALL steps are byte-identical
        assert json.dumps(s1.action.to_json(), sort_keys=True) == json.dumps(s0.action.to_json(), sort_keys=True)
        assert json.dumps(s1.to_json()["observation"]) == json.dumps(s0.to_json()["observation"]), where
        if t > b:  # steps after the boundary are kept as recorded
            assert step_json(s1) == step_json(s0), f"{where}: later step {t} changed"
        else:
            # the edited blocks are the original ones in order, some removed (or, under iclr, -> [SKIP])
            if name in ICLR_LIKE:
                assert len(s1.blocks) == len(s0.blocks), where
                assert all(x in (y, SKIP) for x, y in zip(s1.blocks, s0.blocks)), where
            else:
                rest = iter(s0.blocks)
                assert all(any(x == y for y in rest) for x in s1.blocks), f"{where}: step {t} gained a block"
            if s1.blocks == s0.blocks:
                assert s1.reasoning == s0.reasoning, where  # blocks are edited in place: the rest is byte-identical
    gone = removed_blocks(traj, edited, b)
    assert log.condition == name and log.after_step == b
    assert log.chars_removed == sum(len(x) * k for c in gone.values() for x, k in c.items()), where
    assert log.tokens_removed == sum(counter(x) * k for c in gone.values() for x, k in c.items()), where
    logged = {}
    for e in log.edits:
        assert (e.what, e.op) == ("reasoning_block", "skipped" if name in ICLR_LIKE else "removed"), e
        blk = traj.steps[e.step - 1].blocks[e.block]
        assert (e.chars, e.tokens) == (len(blk), counter(blk)), e
        logged.setdefault(e.step, Counter())[blk] += 1
    assert logged == gone, where
    json.dumps(log.to_json())  # the log is plain JSON


@pytest.mark.parametrize("name", REASONING_ONLY)
def test_reasoning_conditions_touch_only_reasoning(name, corpus, counter):
    _, trajs = corpus
    for traj in trajs:
        before = json.dumps(traj.to_json(), sort_keys=True)
        for b in range(1, traj.n_steps + 1):
            edited, log = apply_condition(name, traj, b, counter=counter, **PARAMS.get(name, {}))
            check_common(name, traj, b, edited, log, counter)
        assert json.dumps(traj.to_json(), sort_keys=True) == before, "the input trajectory was mutated"


def _cleared(traj: Trajectory, edited: Trajectory) -> list[int]:
    return [t for t, (s0, s1) in enumerate(zip(traj.steps, edited.steps), start=1) if s0.blocks and not s1.blocks]


def _untouched(traj: Trajectory, edited: Trajectory) -> list[int]:
    return [t for t, (s0, s1) in enumerate(zip(traj.steps, edited.steps), start=1) if s1 == s0]


def test_which_steps_lose_reasoning(corpus):
    _, trajs = corpus
    for traj in trajs:
        n = traj.n_steps
        for b in range(1, n + 1):
            full, log = apply_condition("full", traj, b)
            assert full == traj and not log.edits
            e, _ = apply_condition("delete_all_reasoning", traj, b)
            assert _cleared(traj, e) == list(range(1, b + 1))
            assert _untouched(traj, e) == list(range(b + 1, n + 1))
            e, _ = apply_condition("delete_latest_reasoning", traj, b)
            assert _cleared(traj, e) == [b]
            assert _untouched(traj, e) == [t for t in range(1, n + 1) if t != b]
            e, _ = apply_condition("keep_latest_reasoning", traj, b)
            assert _cleared(traj, e) == list(range(1, b))
            assert _untouched(traj, e) == list(range(b, n + 1))


def test_clear_after_code_on_mini(mini_trajectory):
    t = mini_trajectory  # step 3 writes utils/dates.py (write_file with content); no earlier step writes
    for b in (1, 2):
        e, log = apply_condition("clear_after_code", t, b)
        assert e == t and not log.edits and "nothing cleared" in log.notes[0]
    for b in (3, 4):
        e, log = apply_condition("clear_after_code", t, b)
        assert _cleared(t, e) == [1, 2, 3]
        assert e.steps[3] == t.steps[3]
        assert log.params["code_step"] == 3
        assert log.chars_removed == sum(len(x) for s in t.steps[:3] for x in s.blocks)


def test_clear_after_code_on_corpus(corpus):
    """k = the latest step <= b whose action calls a write-like tool with a content argument."""
    _, trajs = corpus
    for traj in trajs:
        for b in range(1, traj.n_steps + 1):
            e, log = apply_condition("clear_after_code", traj, b)
            ks = [t for t in range(1, b + 1) if writes_code(traj.steps[t - 1])]
            if not ks:
                assert e == traj and log.notes
            else:
                assert log.params["code_step"] == max(ks)
                assert _cleared(traj, e) == [t for t in range(1, max(ks) + 1) if traj.steps[t - 1].blocks]


@pytest.mark.parametrize("tool, args, expected", [
    ("write_file", {"path": "a.py", "content": "x = 1"}, True),
    ("edit_file", {"path": "a.py", "new_content": "x"}, True),
    ("apply_patch", {"patch": "--- a\n+++ b"}, True),
    ("write_file", {"path": "a.py"}, False),  # no content argument
    ("read_file", {"path": "a.py"}, False),
    ("run_tests", {}, False),
])
def test_writes_code_hand_cases(tool, args, expected):
    step = Step("r", Action(calls=(ToolCall(tool, args),)), None)
    assert writes_code(step) is expected


def test_writes_code_ignores_substring_verbs():
    for tool in ("input_text", "compute_checksum"):
        step = Step("r", Action(calls=(ToolCall(tool, {"selector": "#q", "text": "weather"}),)), None)
        assert writes_code(step) is False, tool


# ---------------------------------------------------------------------------------------------
# iclr


def _many_blocks_traj(sizes_per_step: list[list[int]]) -> Trajectory:
    """A synthetic trajectory whose step t has blocks of the given lengths (distinct letters)."""
    raw = mini_record()
    steps = []
    for t, sizes in enumerate(sizes_per_step):
        blocks = [chr(ord("a") + (t + k) % 26) * n for k, n in enumerate(sizes)]
        steps.append({"reasoning": "\n\n".join(blocks), "action": {"tool": "run_tests", "arguments": {}},
                      "observation": f"obs {t}"})
    raw["steps"] = steps
    raw["annotations"] = {"boundaries": []}
    return Trajectory.from_json(raw)


def _expected_iclr(blocks: list[str], rho_num: int = 4, rho_den: int = 5) -> list[str]:
    n = len(blocks)
    if n <= 1:
        return blocks
    k = (rho_num * n) // rho_den  # floor(0.8 * N), integer arithmetic
    lowest = sorted(range(n), key=lambda i: (len(blocks[i]), i))[:k]
    return [SKIP if i in lowest else blk for i, blk in enumerate(blocks)]


def test_iclr_skips_floor_rho_n_lowest_blocks(corpus):
    _, trajs = corpus
    synthetic = _many_blocks_traj([[5, 3, 9, 1, 7], [2] * 10, [4], [8, 2, 6, 2, 6, 9, 1, 3, 3, 12, 5, 7, 11]])
    for traj in [*trajs, synthetic]:
        for b in range(1, traj.n_steps + 1):
            e, log = apply_condition("iclr", traj, b, scorer=length_scorer)
            for t in range(1, traj.n_steps + 1):
                want = _expected_iclr(traj.steps[t - 1].blocks) if t <= b else traj.steps[t - 1].blocks
                assert e.steps[t - 1].blocks == want, (traj.task_id, b, t)
            assert log.params["rho"] == 0.8
    e, _ = apply_condition("iclr", synthetic, 4, scorer=length_scorer)
    assert [sum(x == SKIP for x in s.blocks) for s in e.steps] == [4, 8, 0, 10]


def test_iclr_scorer_calls_and_over_long_steps(mini_trajectory):
    calls = []

    def scorer(traj, t):
        calls.append(t)
        return None if t == 2 else length_scorer(traj, t)

    e, log = apply_condition("iclr", mini_trajectory, 4, scorer=scorer)
    assert calls == [1, 2, 3, 4]  # every step is scored; step 4 (N = 1) is never edited
    assert e.steps[1] == mini_trajectory.steps[1]  # not scored: left whole
    assert e.steps[3] == mini_trajectory.steps[3]
    assert len(log.notes) == 1 and log.notes[0].startswith("step 2:")
    assert [x == SKIP for x in e.steps[0].blocks] == [True, False]  # floor(0.8*2) = 1, the shorter one


def test_iclr_scorer_sees_the_compressed_history(mini_trajectory):
    """scorer(history, t): steps 1..t-1 already compressed ([SKIP] written back), step t and later as recorded."""
    seen = {}

    def scorer(traj, t):
        seen[t] = traj
        return length_scorer(traj, t)

    e, _ = apply_condition("iclr", mini_trajectory, 4, scorer=scorer)
    for t in range(1, 5):
        assert seen[t].steps[: t - 1] == e.steps[: t - 1], t
        assert seen[t].steps[t - 1:] == mini_trajectory.steps[t - 1:], t


def _three_step() -> Trajectory:
    """Three steps of two blocks; the scorer below makes step 3's decision depend on step 2's compression."""
    raw = mini_record()
    raw["steps"] = [{"reasoning": f"s{t} alpha\n\ns{t} beta", "action": {"tool": "run_tests", "arguments": {}},
                     "observation": f"obs {t}"} for t in (1, 2, 3)]
    raw["annotations"] = {"boundaries": []}
    return Trajectory.from_json(raw)


def context_scorer(traj: Trajectory, t: int) -> list[float]:
    """A block scores higher when more [SKIP] markers precede it: a context-dependent hand scorer.

    Step t's block 0 scores 1 + (#SKIP in steps < t), block 1 scores 2 if t is odd else 1.5.
    """
    skips = sum(blk == SKIP for s in traj.steps[: t - 1] for blk in s.blocks)
    return [1.0 + skips, 2.0 if t % 2 else 1.5]


def test_iclr_online_differs_from_full_context_and_equals_a_from_scratch_loop():
    from interp.data.conditions import iclr_dropped

    traj = _three_step()
    online, _ = apply_condition("iclr", traj, 3, scorer=context_scorer)
    full_scores = {t: context_scorer(traj, t) for t in (1, 2, 3)}  # every step under the uncompressed history
    full_drops = {t: iclr_dropped(full_scores[t]) for t in (1, 2, 3)}
    # from scratch: re-render (here: rebuild) the compressed history at every step and re-score
    history, online_drops = traj, {}
    for t in (1, 2, 3):
        online_drops[t] = iclr_dropped(context_scorer(history, t))
        blocks = [SKIP if k in online_drops[t] else b for k, b in enumerate(history.steps[t - 1].blocks)]
        steps = list(history.steps)
        steps[t - 1] = dataclasses.replace(steps[t - 1], reasoning="\n\n".join(blocks))
        history = dataclasses.replace(history, steps=tuple(steps))
    assert online == history
    assert [{k for k, b in enumerate(s.blocks) if b == SKIP} for s in online.steps] == [online_drops[t] for t in (1, 2, 3)]
    assert full_drops == {1: {0}, 2: {0}, 3: {0}}
    assert online_drops == {1: {0}, 2: {1}, 3: {1}}  # the compressed history changes steps 2 and 3
    assert online_drops != full_drops


def test_iclr_step_only_scores_each_step_alone(mini_trajectory):
    from interp.data.conditions import step_only_history

    seen = []

    def scorer(traj, t):
        seen.append((traj, t))
        return length_scorer(traj, t)

    e, log = apply_condition("iclr_step_only", mini_trajectory, 4, scorer=scorer)
    assert [t for _, t in seen] == [1, 1, 1, 1]
    for k, (traj, _) in enumerate(seen):
        assert traj.steps == (mini_trajectory.steps[k],) and traj.task == "" and traj.system_prompt == ""
        assert traj.tools == ()
        assert traj == step_only_history(mini_trajectory, k + 1)
    same, _ = apply_condition("iclr", mini_trajectory, 4, scorer=length_scorer)
    assert e == same  # a length scorer ignores context: both conditions agree
    assert log.params == {"rho": 0.8}


def test_iclr_errors(mini_trajectory):
    with pytest.raises(ValueError, match="scorer"):
        apply_condition("iclr", mini_trajectory, 2)
    with pytest.raises(ValueError, match="scores for"):
        apply_condition("iclr", mini_trajectory, 2, scorer=lambda traj, t: [1.0])
    with pytest.raises(ValueError, match="rho"):
        apply_condition("iclr", mini_trajectory, 2, scorer=length_scorer, rho=1.5)


# ---------------------------------------------------------------------------------------------
# random


@pytest.mark.parametrize("r", [0.05, 0.1, 0.2, 0.4])
def test_random_removes_fraction_r_of_each_steps_tokens(corpus, tokenizer, counter, r):
    """Per step: k = round(r * n) of its n tokens removed (within one token of r * n), chosen by
    (seed, task, step) only, so identical at every boundary after the step; the log records k / n."""
    from interp.data.conditions import token_spans

    _, trajs = corpus
    for traj in trajs:
        first = {}
        for b in range(1, traj.n_steps + 1):
            e, log = apply_condition("random", traj, b, counter=counter, r=r, seed=1, tokenizer=tokenizer)
            assert log.params == {"r": r, "seed": 1}
            for t in range(1, traj.n_steps + 1):
                s0, s1 = traj.steps[t - 1], e.steps[t - 1]
                assert s1.action == s0.action and s1.observation == s0.observation
                if t > b:
                    assert s1 == s0
                    continue
                n = len(token_spans(s0.reasoning, tokenizer))
                rec = log.per_step[t]
                assert rec["units"] == n and abs(rec["removed"] - r * n) <= 1, (traj.task_id, t, rec)
                assert rec["fraction"] == rec["removed"] / n
                # the edit is a deletion: the kept text is a subsequence of the recorded reasoning
                rest = iter(s0.reasoning)
                assert all(c in rest for c in s1.reasoning), (traj.task_id, t)
                first.setdefault(t, (s1.reasoning, rec))
                assert (s1.reasoning, rec) == first[t], f"{traj.task_id} step {t} changed at boundary {b}"
            assert log.tokens_removed == sum(log.per_step[t]["removed"] for t in range(1, b + 1))
        again, _ = apply_condition("random", traj, traj.n_steps, r=r, seed=1, tokenizer=tokenizer)
        assert [s.reasoning for s in again.steps] == [first[t][0] for t in range(1, traj.n_steps + 1)]


def test_random_is_seeded(mini_trajectory, tokenizer):
    t = mini_trajectory
    runs = {seed: apply_condition("random", t, 4, r=0.2, seed=seed, tokenizer=tokenizer)[0] for seed in range(6)}
    again = apply_condition("random", t, 4, r=0.2, seed=3, tokenizer=tokenizer)[0]
    assert again == runs[3]
    assert len({json.dumps(e.to_json(), sort_keys=True) for e in runs.values()}) > 1


def test_random_is_reproducible_across_processes(mini_trajectory):
    """Same seed in a fresh interpreter with another hash seed: same edit."""
    # A bare `interp` package object keeps the child from importing torch via interp/__init__ (2 s).
    code = ("import json, sys, types; pkg = types.ModuleType('interp'); "
            f"pkg.__path__ = [{str(ROOT / 'interp')!r}]; sys.modules['interp'] = pkg; "
            "from interp.data.trajectory import load_trajectories; from interp.data.conditions import apply_condition; "
            f"t = load_trajectories({str(ROOT / 'tests/data/mini.jsonl')!r})[0]; "
            "e, _ = apply_condition('random', t, 4, r=0.4, seed=11); "
            "assert 'torch' not in sys.modules; "
            "print(json.dumps([s.reasoning for s in e.steps]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}, cwd=ROOT, timeout=120)
    e, _ = apply_condition("random", mini_trajectory, 4, r=0.4, seed=11)
    assert json.loads(out.stdout) == [s.reasoning for s in e.steps]


def test_random_without_tokenizer_measures_characters(mini_trajectory):
    e, log = apply_condition("random", mini_trajectory, 4, r=0.4, seed=0)
    assert any("characters" in n for n in log.notes)
    for t, s in enumerate(mini_trajectory.steps, start=1):
        assert log.per_step[t]["units"] == len(s.reasoning)
        assert len(s.reasoning) - len(e.steps[t - 1].reasoning) == log.per_step[t]["removed"]
    assert log.tokens_removed is None


def test_random_rejects_fractions_outside_the_study(mini_trajectory):
    for r in (1.5, 0.5, 0.0):
        with pytest.raises(ValueError, match="r must be one of"):
            apply_condition("random", mini_trajectory, 2, r=r)


# ---------------------------------------------------------------------------------------------
# hide_observation


def test_hide_observation_changes_only_that_observation(corpus, counter):
    _, trajs = corpus
    for traj in trajs:
        before = json.dumps(traj.to_json(), sort_keys=True)
        for b in range(1, traj.n_steps + 1):
            for k in sorted({1, b}):
                e, log = apply_condition("hide_observation", traj, b, counter=counter,
                                         **({} if k == b else {"step": k}))
                want = copy.deepcopy(traj.to_json())
                obs = traj.steps[k - 1].observation
                if obs is None:
                    assert e == traj and not log.edits and log.notes
                    continue
                want["steps"][k - 1]["observation"] = HIDDEN if isinstance(obs, str) else [HIDDEN] * len(obs)
                assert e.to_json() == want, (traj.task_id, b, k)
                olist = traj.steps[k - 1].observations
                assert [(ed.step, ed.block, ed.what, ed.op, ed.chars, ed.tokens) for ed in log.edits] == [
                    (k, i, "observation", "hidden", len(o), counter(o)) for i, o in enumerate(olist)]
                assert log.params["step"] == k
        assert json.dumps(traj.to_json(), sort_keys=True) == before


def test_hide_observation_outside_history_raises(mini_trajectory):
    with pytest.raises(ValueError, match="not in the history"):
        apply_condition("hide_observation", mini_trajectory, 2, step=3)


# ---------------------------------------------------------------------------------------------
# registry and purity


def test_unknown_condition_lists_known_ones(mini_trajectory):
    with pytest.raises(ValueError) as exc:
        apply_condition("delete_everything", mini_trajectory, 1)
    msg = str(exc.value)
    assert "delete_everything" in msg
    for name in ("full", "delete_all_reasoning", "delete_latest_reasoning", "keep_latest_reasoning", "iclr",
                 "iclr_step_only", "random", "hide_observation", "clear_after_code"):
        assert name in msg
    assert set(CONDITIONS) >= {"full", "delete_all_reasoning", "delete_latest_reasoning", "keep_latest_reasoning",
                               "iclr", "iclr_step_only", "random", "hide_observation", "clear_after_code"}


@pytest.mark.parametrize("b", [0, 5, -1])
def test_boundary_out_of_range(mini_trajectory, b):
    with pytest.raises(ValueError, match="out of range 1..4"):
        apply_condition("full", mini_trajectory, b)


def test_conditions_return_new_frozen_objects(mini_trajectory):
    e, _ = apply_condition("delete_all_reasoning", mini_trajectory, 4)
    assert e is not mini_trajectory
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.steps[0].reasoning = "x"  # type: ignore[misc]
    assert mini_trajectory.steps[0].blocks  # the original keeps its reasoning



# ---------------------------------------------------------------------------------------------
# the ICLR drop rule (one home: iclr_dropped) and validate_condition


def test_iclr_dropped_rule():
    from interp.data.conditions import iclr_dropped

    assert iclr_dropped([5, 3, 9, 1, 7]) == {1, 3, 0, 4}  # the default rho 0.8: floor(0.8 * 5) = 4 lowest
    assert iclr_dropped([2.0, 2.0, 2.0], 0.5) == {0}  # ties: the earlier block first
    assert iclr_dropped([1.0, 1.0, 0.5, 1.0], 0.5) == {2, 0}
    assert iclr_dropped([3.0]) == set() and iclr_dropped([3.0], 1.0) == set()  # N = 1 untouched
    assert iclr_dropped([]) == set()
    assert iclr_dropped([1.0, 2.0], 0.0) == set() and iclr_dropped([1.0, 2.0], 1.0) == {0, 1}
    for rho in (-0.1, 1.5):
        with pytest.raises(ValueError, match="rho"):
            iclr_dropped([1.0, 2.0], rho)


def test_iclr_condition_uses_iclr_dropped(mini_trajectory):
    from interp.data.conditions import iclr_dropped

    for rho in (0.8, 0.5, 1.0):
        e, log = apply_condition("iclr", mini_trajectory, mini_trajectory.n_steps, scorer=length_scorer, rho=rho)
        for t, step in enumerate(mini_trajectory.steps, start=1):
            drop = iclr_dropped(length_scorer(mini_trajectory, t), rho)
            assert [x == SKIP for x in e.steps[t - 1].blocks] == [k in drop for k in range(len(step.blocks))]


def test_validate_condition():
    from interp.data.conditions import validate_condition

    validate_condition("full")
    validate_condition("iclr", {"scorer": length_scorer, "rho": 0.5})
    validate_condition("random", {"r": 0.2, "seed": 1})
    validate_condition("iclr_step_only", {"scorer": length_scorer})
    with pytest.raises(ValueError, match="unknown condition 'ful'.*known: full"):
        validate_condition("ful")
    with pytest.raises(ValueError, match="takes no parameter.*rh.*accepted: scorer, rho"):
        validate_condition("iclr", {"scorer": length_scorer, "rh": 0.5})
    with pytest.raises(ValueError, match="scorer"):
        validate_condition("iclr", {})
    with pytest.raises(ValueError, match="rho"):
        validate_condition("iclr", {"scorer": length_scorer, "rho": 2})
    with pytest.raises(ValueError, match="r must be"):
        validate_condition("random", {"r": 0.3})
    with pytest.raises(ValueError, match="takes no parameter"):
        validate_condition("full", {"rho": 0.5})
