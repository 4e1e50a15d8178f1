"""Headline values of the reference study (Qwen3.5-9B, 32 layers), shown beside ours in figures and tables.

Probabilities and gaps are fractions (0.673 = 67.3 %); Repair and scores are unitless.
"""

from __future__ import annotations

MODEL = "Qwen3.5-9B"
N_LAYERS = 32

PROBE = {"auroc": 0.844, "ap": 0.811, "balanced_accuracy": 0.760, "n_tasks": 31, "n_samples": 265, "n_positive": 112}
KL_REPAIR = {4: 0.047, 20: 0.459, 28: 0.724, 31: 0.978}  # layer -> mean Repair
RISK = {"G1": 0.673, "G0": 0.362}  # future behavioural risk by externalization gap G
WITHIN_TASK_GAP = 0.198  # risk(G=1) - risk(G=0) within task, as a fraction (19.8 pp)
HIDDEN_SCORE_GAP = 0.283  # mean probe score, G=1 minus G=0
CONTINUATIONS = {  # controlled continuations: mean rubric score by history condition
    "full": 0.872,
    "keep_latest_reasoning": 0.872,
    "delete_latest_reasoning": 0.760,
    "delete_all_reasoning": 0.675,
    "clear_after_code": 0.759,
}
# token change of ICLR against the full-history agent, relative (fraction), 260 tasks (re-run agents, so
# output changes too)
TOKENS = {"iclr": {"input": -0.255, "output": -0.144, "cache_read": -0.333}}
TOKENS_N_TASKS = 260
