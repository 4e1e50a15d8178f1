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

# DRSR (Qwen3.5-9B, 566 trajectories, 1,698 decision states, ~24,122 set labels; split 80:10:10 by trajectory)
DRSR_PAIR_ACCURACY = {"sum": 0.5894, "mean": 0.5681, "max": 0.4617, "min": 0.1489}  # singleton aggregators, margin 0.020
DRSR_MAE = {"additive": 0.018, "pairwise": 0.008}  # joint-harm reconstruction, nats/token
DRSR_INTERACTION = {1: 0.0, 2: 0.008, 3: 0.016, 4: 0.027}  # mean interaction by set size, nats/token
DRSR_N_SETS = {1: 6623, 2: 9682, 3: 6287, 4: 1530}  # labelled sets by size
DRSR_GRANULARITY = {"step_range": 0.312, "block_range": 0.028, "unsafe_parent_safe_child": 0.714}  # medians; fraction
DRSR_STATE_ONLY = 0.500  # pair accuracy from the current state alone (no candidate relation)
DRSR_ATTENTION_LAYERS_1BASED = (4, 8, 12, 16, 20, 24, 28, 32)
# DRSR's set-risk gate (Qwen3.5-9B frozen; only the scorer trained): the configuration and the frozen setting
# selected on validation (the reference; the gate's own rules are in patching.gate)
# tau is an unsafe-score threshold of DRSR's own set model (Table 7): on that model's scale only, never comparable
# with the toolkit's ridge-ensemble scores (figures print it as DRSR's, apart from ours)
DRSR_GATE = {
    "candidate_dims": 1154, "candidate_embedding": 64, "set_dims": 451, "hidden": 64,
    "attention_layers_1based": DRSR_ATTENTION_LAYERS_1BASED,
    "k_grid": (2, 3), "beta_grid": (0.0, 0.25, 0.5, 1.0, 2.0),
    "k": 3, "beta": 0.0, "tau": 0.0741,
    "max_unsafe_rate": 0.100, "max_mean_harm": 0.020, "max_removal": 0.20,
}

# Where the toolkit departs from DRSR, each with its reason (docs/guides/drsr-and-gate.md, "Departures from DRSR"); figures and the
# report name them where the departing number is shown.
DEPARTURES = {
    "scorer": "by default a bootstrap ensemble of ridge regressions on pooled set features replaces DRSR's 64-d "
              "set model (Table 7; --scorer set-mlp fits that one): seconds on a CPU, scikit-learn; its unsafe "
              "scores are on another scale, so DRSR's tau is shown only as DRSR's",
    "unsafe_threshold": "0.020 nats/token as the unsafe cut is the toolkit's assumption: DRSR states 0.020 as "
                        "the pair-ordering margin and the mean-harm limit, not as its unsafe cut (--unsafe on interp "
                        "drsr and interp gate train: DrsrConfig.unsafe, GateConfig.unsafe)",
    "saving": "the gate ranks sets by the span tokens of their units, what it sees before deleting; the render's "
              "own loss is reported beside it",
    "step_units": "interp drsr draws whole-step units besides DRSR's block kinds by default (granularity compares "
                  "a step with its blocks); the rows compared with DRSR's Tables 1-2 read sets of the block kinds "
                  "only, the sets holding a step are reported apart (harm.json step_sets)",
    "attention_density_split": "Fig 10's candidates are split by the gate's selection as in DRSR's figure when a "
                               "scorer file is given (interp drsr --gate-scorer); without one by exact "
                               "singleton harm, labelled as the toolkit's split",
    "set_model": "--scorer set-mlp pools the 64-d candidate embeddings 4 ways (deleted mean and max, retained "
                 "mean, pair mean) plus size, span and span fraction: 4 x 64 + 3 = 259 inputs to its hidden layer, "
                 "where DRSR records set_dims 451 = 7 x 64 + 3; DRSR does not state which 7 pools, and the toolkit "
                 "does not guess the three it cannot name (the ridge scorer is unaffected)",
    "smoothing": "the empirical rule (GateConfig.rule 'empirical') smooths the unsafe rate add-one, (n_unsafe + 1) "
                 "/ (n_measured + 2), where DRSR states the plain rate: the search maximises removal, so the plain "
                 "rate admits settings whose few deletions happened to be safe (GateConfig.smooth false: the plain "
                 "rate); the default rule is neither but a finite-sample bound (GateConfig.rule 'bound': unsafe "
                 "rate of deletions <= alpha with confidence 1 - delta), which DRSR does not have",
    "calibration": "DRSR selects the setting on its validation split; the toolkit scores train and validation "
                   "trajectories cross-fitted (task-level K-fold, each trajectory scored by a model that never saw "
                   "it) and selects on the pooled out-of-fold scores, so every calibration trajectory informs tau",
    "direct_removal": "tokens.json counts a deleted token once, at the first request it is missing from "
                      "(DRSR's Direct, most likely); the removal summed over every later request is kept as "
                      "direct_removal_cumulative_tokens",
}
