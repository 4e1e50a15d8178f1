"""Token accounting against hand figures: a character-level tokenizer with a plain chat template, so every
prompt is a string written out here by hand and its token count is its length."""

from __future__ import annotations

from fractions import Fraction

import pandas as pd
import pytest

from interp.record import RECORD_FIELDS

from interp.accounting.tokens import (CacheModel, account, decompose_pair, decomposition, parse_policy,
                                      request_tokens, table_scorer, tokens_document)
from interp.data.trajectory import Action, Step, Trajectory
from interp.schema import check

from interp.accounting.tokens import FIELDS

pytestmark = pytest.mark.unit


class CharTokenizer:
    """One token per character; template ``<role>content`` per message, generation prompt ``<assistant>``."""

    chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"  # no tool support: fallback
    name_or_path = "char"

    def apply_chat_template(self, msgs, tools=None, tokenize=False, add_generation_prompt=True):
        return "".join(f"<{m['role']}>{m['content']}" for m in msgs) + ("<assistant>" if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
        return {"input_ids": [ord(c) for c in text], "offset_mapping": [(i, i + 1) for i in range(len(text))]}


TOK = CharTokenizer()


def three_steps(task_id: str = "t", extra: int = 0) -> Trajectory:
    """Task T; step 1 has two reasoning blocks, steps 2 and 3 one each (``extra`` more steps like step 2)."""
    steps = [Step("a1\n\nb1", Action(text="X"), "o"), Step("c2", Action(text="Y"), "p")]
    steps += [Step("e", Action(text="W"), "r") for _ in range(extra)]
    steps.append(Step("d3", Action(text="Z"), None))
    return Trajectory(task_id, "dom", "", "T", tuple(steps))


# the pieces of the fallback convention: an assistant turn <think>\n...\n</think>\n\nACTION, an observation
# turn <user><tool_response>\n...\n</tool_response>
P1 = "<user>T<assistant>"
OUT1 = "<think>\na1\n\nb1\n</think>\n\nX"
OBS1 = "<user><tool_response>\no\n</tool_response><assistant>"
OUT2 = "<think>\nc2\n</think>\n\nY"
OBS2 = "<user><tool_response>\np\n</tool_response><assistant>"
OUT3 = "<think>\nd3\n</think>\n\nZ"


def test_full_history_hand_figures():
    reqs = request_tokens(three_steps(), parse_policy("full"), TOK)
    p2, p3 = P1 + OUT1 + OBS1, P1 + OUT1 + OBS1 + OUT2 + OBS2
    assert [r["input_tokens"] for r in reqs] == [len(P1), len(p2), len(p3)] == [18, 95, 168]
    assert [r["output_tokens"] for r in reqs] == [len(OUT1), len(OUT2), len(OUT3)] == [26, 22, 22]
    # the full history only appends: each request reads the whole previous prompt + output from the cache
    assert [r["cache_read_tokens"] for r in reqs] == [0, len(P1 + OUT1), len(p2 + OUT2)] == [0, 44, 117]
    assert [r["cache_write_tokens"] for r in reqs] == [18, 95 - 44, 168 - 117]


def test_an_edit_of_step_1_at_boundary_2_breaks_the_cache_there():
    """keep_latest_reasoning removes step 1's reasoning first at boundary 2 (request 3)."""
    reqs = request_tokens(three_steps(), parse_policy("keep_latest_reasoning"), TOK)
    p3 = P1 + "X" + OBS1 + OUT2 + OBS2  # step 1's think section gone
    assert [r["input_tokens"] for r in reqs] == [18, 95, len(p3)] == [18, 95, 143]
    assert [r["output_tokens"] for r in reqs] == [26, 22, 22]
    # request 3 shares "<user>T<assistant>" with request 2's prompt + output, then "X" meets "<think>"
    assert [r["cache_read_tokens"] for r in reqs] == [0, 44, 18]
    assert reqs[2]["cache_write_tokens"] == 143 - 18


def test_online_write_back_keeps_the_cache_intact_from_the_edit_on():
    """ICLR from an entropy table: step 1's lower block -> [SKIP] at boundary 1; it stays so at boundary 2."""
    table = pd.DataFrame({"task_id": ["t", "t", "t", "t"], "context": "online", "step": [1, 1, 2, 3],
                          "block": [0, 1, 0, 0], "mean_entropy_bits": [1.0, 2.0, 5.0, 5.0]})
    reqs = request_tokens(three_steps(), parse_policy("iclr"), TOK, extra={"scorer": table_scorer(table, "online")})
    out1 = "<think>\n[SKIP]\n\nb1\n</think>\n\nX"
    p2 = P1 + out1 + OBS1
    assert [r["input_tokens"] for r in reqs] == [18, len(p2), len(p2 + OUT2 + OBS2)]
    # request 2 breaks at the [SKIP] (after "<think>\n"); request 3 reads all of request 2's prompt + output
    assert reqs[1]["cache_read_tokens"] == len(P1 + "<think>\n") == 26
    assert reqs[2]["cache_read_tokens"] == len(p2 + OUT2)


def test_cache_blocks_and_minimum_prefix():
    reqs = request_tokens(three_steps(), parse_policy("full"), TOK, CacheModel(block=16, min_prefix=50))
    assert [r["cache_read_tokens"] for r in reqs] == [0, 0, 112]  # 44 < 50; 117 -> 7 blocks of 16


def test_direct_removal_and_document_schema():
    trajs = [three_steps("a"), three_steps("b")]
    rows, skipped = account(trajs, ["full", "keep_latest_reasoning", "iclr"], TOK)
    assert [s["policy"] for s in skipped] == ["iclr"]
    kl = rows[rows["policy"] == "keep_latest_reasoning"]
    assert kl["direct_removal_tokens"].tolist() == [0, 0, len(OUT1) - len("X")] * 2 == [0, 0, 25] * 2
    doc = tokens_document(rows, skipped, TOK, CacheModel())
    check(doc, [f for f in FIELDS if f not in RECORD_FIELDS], "tokens.json")  # the record: added by the stage
    tot = {r["policy"]: r for r in doc["totals"]}
    assert tot["keep_latest_reasoning"]["rel_input"] == pytest.approx((143 - 168) / (18 + 95 + 168))
    assert tot["keep_latest_reasoning"]["rel_output"] == 0.0


def test_decomposition_sums_exactly():
    for args in [(257, 3, 300, 333, 5), (1000, 7, 13, 977, 3), (5, 1, 5, 5, 1)]:
        parts = decomposition(*args)
        assert isinstance(parts["context_change"], Fraction)
        assert parts["direct_change"] + parts["request_count_change"] + parts["context_change"] \
            == parts["total_change"] == args[2] - args[0]


def test_two_extra_requests_amplify_the_change_and_no_extra_request_does_not():
    base = [three_steps("a"), three_steps("b")]
    longer = [three_steps("a", extra=2), three_steps("b", extra=2)]  # the compressed run took 2 more requests
    doc = decompose_pair(base, longer, "delete_all_reasoning", TOK, n_boot=200)
    t = doc["totals"]
    assert t["direct_change"] + t["request_count_change"] + t["context_change"] == pytest.approx(t["total_change"],
                                                                                                  abs=1e-9)
    assert t["request_count_change"] > 0 and doc["amplification"] > 1
    assert doc["amplification_ci"][0] > 1
    same = decompose_pair(base, base, "delete_all_reasoning", TOK, n_boot=200)  # signal absent: only the removal
    assert same["amplification"] == 1.0 and same["saving_ratio"] == 1.0
    assert same["totals"]["request_count_change"] == 0 and same["totals"]["context_change"] == 0
    with pytest.raises(ValueError, match="no task_id"):
        decompose_pair(base, [three_steps("c")], "full", TOK, n_boot=1000)


def test_policy_specs_are_checked():
    assert parse_policy("random:r=0.1").params == (("r", 0.1),)
    for bad, msg in [("nope", "unknown condition"), ("random:r=0.3", "fractions"), ("sliding_window:k=0", "k must"),
                     ("keep_last_k_reasoning:q=1", "takes no parameter"), ("random:r", "key=value")]:
        with pytest.raises(ValueError, match=msg):
            parse_policy(bad)


def test_direct_removal_counts_a_deleted_token_once_and_keeps_the_cumulative_column():
    """ICLR compresses step 1 at boundary 1 and it stays so: the cumulative column counts the saving in both
    later requests, the once column only in the first. Edits that show in one request each (delete the latest
    reasoning: step 1's at boundary 1, step 2's at boundary 2, step 1 whole again) count the same both ways."""
    trajs = [three_steps("a", extra=1)]
    table = pd.DataFrame({"task_id": "a", "context": "online", "step": [1, 1, 2, 3, 4],
                          "block": [0, 1, 0, 0, 0], "mean_entropy_bits": [1.0, 2.0, 5.0, 5.0, 5.0]})
    rows, _ = account(trajs, ["full", "iclr", "delete_latest_reasoning"], TOK, entropy=table)
    iclr = rows[rows["policy"] == "iclr"]
    saved = len("a1") - len("[SKIP]")  # "[SKIP]" is longer than "a1": the edit costs tokens
    cumulative = iclr["direct_removal_cumulative_tokens"].tolist()
    assert cumulative == [0, saved, saved, saved]
    assert iclr["direct_removal_tokens"].tolist() == [0, 0, 0, 0]  # a loss of -4 is never a removal
    latest = rows[rows["policy"] == "delete_latest_reasoning"]
    assert latest["direct_removal_tokens"].tolist() == latest["direct_removal_cumulative_tokens"].tolist()
    assert latest["direct_removal_tokens"].iloc[1] > 0
    assert (rows["total_tokens"] == rows["input_tokens"] + rows["output_tokens"]).all()
    long = [three_steps("b", extra=2)]
    table = pd.DataFrame({"task_id": "b", "context": "online", "step": [1, 1], "block": [0, 1],
                          "mean_entropy_bits": [2.0, 1.0]})  # block 1 ("b1") is dropped
    rows, _ = account([Trajectory("b", "dom", "", "T", (Step("a1\n\nbbbbbbbbbbbb", Action(text="X"), "o"),
                                                        *long[0].steps[1:]))], ["full", "iclr"], TOK, entropy=table)
    iclr = rows[rows["policy"] == "iclr"]
    lost = len("bbbbbbbbbbbb") - len("[SKIP]")
    assert iclr["direct_removal_cumulative_tokens"].tolist() == [0] + [lost] * 4  # counted in every request
    assert iclr["direct_removal_tokens"].tolist() == [0, lost, 0, 0, 0]  # counted once


def test_totals_carry_input_plus_output_and_the_equal_domain_mean():
    trajs = [three_steps("a"), three_steps("b", extra=3)]
    trajs.append(Trajectory("c", "other", "", "T", three_steps("c").steps))
    rows, skipped = account(trajs, ["full", "keep_latest_reasoning"], TOK)
    doc = tokens_document(rows, skipped, TOK, CacheModel())
    check(doc, [f for f in FIELDS if f not in RECORD_FIELDS], "tokens.json")  # the record: added by the stage
    for row in doc["totals"]:
        mine = rows[rows["policy"] == row["policy"]]
        assert row["total_tokens"] == int(mine["input_tokens"].sum() + mine["output_tokens"].sum())
        per_task = mine.groupby("task_id").agg(total=("total_tokens", "sum"), domain=("domain", "first"))
        by_domain = per_task.groupby("domain")["total"].mean()  # each domain's mean per task, then their mean
        assert row["domain_mean"]["total_tokens"] == pytest.approx(by_domain.mean())
        assert row["domain_mean"]["n_domains"] == 2 and by_domain.mean() != per_task["total"].mean()
