"""Result files of every kind made by the real writers on synthetic, seeded inputs; no model involved.

gate.json / gate_scorer.json: ``patching.gate_eval.train`` + ``evaluate`` on the synthetic drsr records.

probe_results.json / oof_predictions.csv: ``probes.report.probe_document`` + ``write_probe_results``;
kl_repair.json: ``patching.kl_repair.summarize`` on ``BoundaryRepair`` rows; harm.json:
``patching.harm.summarize_harm`` on boundary records; externalization.json:
``interp.externalization.risk.risk_command`` on label and score CSVs; interventions.json:
``interp.continuations.run.interventions_document`` on scored rows. attention.json and
iclr_blocks.csv are written by the demo's stages (from an activation store), so they stay
hand-built here in the demo's layout.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd


from interp.accounting.tokens import TokensConfig
from interp.continuations.run import RunSettings, interventions_document, write_results as write_interventions
from interp.externalization.risk import RiskConfig, risk_command
from interp.extraction.attention_summary import attention_document, condition_summary
from interp.extraction.entropy import IclrConfig, drop_table, table_record
from interp.io import atomic_write_json
from interp.pipelines.configs import CONFIGS as REGISTERED
from interp.record import record
from interp.reporting.analyses import ANALYSES, Analysis, analysis
from patching.attribution import agreement, summarize as summarize_attribution
from patching.anchors import AnchorConfig, summarize_anchors
from patching.config import DrsrConfig, GateConfig, HarmConfig, PatchConfig
from patching.drsr import summarize_drsr
from patching.gate_eval import evaluate, train
from patching.harm import summarize_harm
from patching.kl_repair import BoundaryRepair, default_sites, summarize
from probes.config import ProbeConfig
from probes.data import FeatureSet
from probes.nested_cv import OOF_COLUMNS, NestedCVResult
from probes.report import oof_frame, probe_document, write_probe_results
from probes.sae import SCHEMA as SAE_SCHEMA
from probes.baselines import BaselineComparison
from probes.stats import BootstrapResult, PairedGain, PermutationResult

KINDS = ["system", "tools", "task", "reasoning_block", "action", "observation", "glue"]
MODEL = {"spec": "qwen3.5-toy", "revision": "synthetic", "n_layers": 32, "layer_types": ["linear_attention"] * 32}


def write_results(root: Path, seed: int = 0, configs: Mapping[str, Any] | None = None) -> Path:
    """Write the files of every analysis of the registry under root (a results directory) and return root.

    Each writer gets its analysis's folder from ``interp.reporting.analyses`` and its config (``configs``, else
    ``CONFIGS``, else its config class's defaults: the one it computes with and records); an analysis without a writer here fails (a new analysis
    adds its synthetic writer to ``WRITERS``)."""
    missing = sorted({a.name for a in ANALYSES} - set(WRITERS))
    assert not missing, f"tests/figures/conftest.py: no synthetic writer for {missing}"
    rng = np.random.default_rng(seed)  # one stream, drawn in WRITERS' order (the expected values depend on it)
    for name, write in WRITERS.items():
        chosen = {**CONFIGS, **(configs or {})}
        write(root, analysis(name), rng, chosen[name] if name in chosen else REGISTERED[name]())  # else its defaults
    return root


def _write_probe(root: Path, a: Analysis, rng: np.random.Generator, config: ProbeConfig) -> None:
    _probe(root / a.folder, rng, config)


def _write_kl_repair(root: Path, a: Analysis, rng: np.random.Generator, config: PatchConfig) -> None:
    atomic_write_json(root / a.path(), kl_repair_doc(rng, config=config))


def _write_attribution(root: Path, a: Analysis, rng: np.random.Generator, config: PatchConfig) -> None:
    atomic_write_json(root / a.path(), attribution_doc(rng, config=config))


def _write_externalization(root: Path, a: Analysis, rng: np.random.Generator, config: RiskConfig) -> None:
    risk_command(root / a.folder, **_risk_inputs(root / "_inputs", _externalization_cells()), config=config)


def _write_interventions(root: Path, a: Analysis, rng: np.random.Generator, config: RunSettings) -> None:
    write_interventions(_interventions(config), root / a.folder)


def _write_attention(root: Path, a: Analysis, rng: np.random.Generator, config: dict) -> None:
    _json(root / a.path(), {**_attention(rng), **record(config, model=MODEL)})


def _write_iclr(root: Path, a: Analysis, rng: np.random.Generator, config: IclrConfig) -> None:
    _mkdir(root / a.folder)
    _iclr(rng, config.rho).to_csv(root / a.path(), index=False)
    atomic_write_json(root / a.path("iclr_blocks.json"), table_record(a.result, record(config, model=MODEL)))


def _write_harm(root: Path, a: Analysis, rng: np.random.Generator, config: HarmConfig) -> None:
    atomic_write_json(root / a.path(), {**summarize_harm(_harm_boundaries(rng), model=MODEL, margin=config.margin,
                                                         n_boot=1000),
                                        **record(config, model=MODEL)})


def _write_drsr(root: Path, a: Analysis, rng: np.random.Generator, config: DrsrConfig) -> None:
    atomic_write_json(root / a.path(), {**summarize_drsr(drsr_records(rng), model=MODEL, margin=config.margin,
                                                         unsafe=config.unsafe, n_boot=config.n_boot),
                                        **record(config, model=MODEL)})


def _write_gate(root: Path, a: Analysis, rng: np.random.Generator, config: GateConfig) -> None:
    records = drsr_records(rng, n_tasks=10)
    gate, info = train(records, MODEL, n_members=3, unsafe=config.unsafe)
    gate.save(root / a.path("gate_scorer.json"), record(config, model=MODEL))
    atomic_write_json(root / a.path(), {**evaluate(records, gate, MODEL, n_boot=config.n_boot,
                                                   scorer_file="gate_scorer.json", train_seconds=info["train_seconds"]),
                                        **record(config, model=MODEL)})


def _write_tokens(root: Path, a: Analysis, rng: np.random.Generator, config: TokensConfig) -> None:
    atomic_write_json(root / a.path(), _tokens(config))  # hand figures: draws nothing from the stream


def _write_anchors(root: Path, a: Analysis, rng: np.random.Generator, config: AnchorConfig) -> None:
    """anchors.json by ``patching.anchors.summarize_anchors`` on synthetic boundaries of six blocks each."""
    results = []
    for t in range(4):
        rows = [{"task_id": f"t{t}", "after_step": 2, "step": 1 + k // 3, "block": k % 3, "n_tokens": 20,
                 "harm": float(rng.normal(0.05, 0.05)), "received": float(rng.uniform(0, 0.01)),
                 "suppression": float(rng.exponential(0.05)), "iclr_dropped": bool(k % 3 != 2),
                 "entropy_bits": float(rng.uniform(1, 4))} for k in range(6)]
        for m in ("harm", "received", "suppression"):
            for rank, i in enumerate(sorted(range(6), key=lambda i: -rows[i][m])):
                rows[i][f"rank_{m}"] = rank + 1
        results.append({"blocks": rows, "receiver_heads": {"task_id": f"t{t}", "after_step": 2,
                                                          "heads": [[3, 1, 2.5], [7, 0, 1.9]]}})
    results.append({"skipped": {"task_id": "t9", "after_step": 1, "n_tokens": 9000, "reason": "over max_tokens"}})
    atomic_write_json(_mkdir(root / a.folder) / a.result, {**summarize_anchors(results),
                                                           **record(config, model=MODEL)})


def _write_sae(root: Path, a: Analysis, rng: np.random.Generator, config: ProbeConfig) -> None:
    """sae_probe.json's layout with a hand-built probe document (the probe's own writer is tested on its own)."""
    sae = {"path": "sae", "hook_name": "blocks.20.hook_resid_pre", "architecture": "topk", "d_in": 576,
           "d_sae": 1024, "k": 16, "model_name": "qwen3.5-toy", "sha256": {}}
    probe = {"auroc": 0.71, "auroc_ci": [0.6, 0.8], "ap": 0.66, "permutation_p": 0.09, "permutation_p_min": 1 / 11,
             "control_auroc": 0.52}
    top = [{"rank": r + 1, "feature": int(f), "coef": float(rng.normal()), "coef_per_sd": float(1.0 / (r + 1)),
            "pooling": "last", "contexts": [{"sample_id": "t1@2:full", "task_id": "t1", "after_step": 2,
                                             "activation": 1.5, "text": "reasoning"}]}
           for r, f in enumerate(rng.choice(1024, 5, replace=False))]
    repair = [{"rank": r + 1, "feature": int(f), "mean_diff": float(rng.normal()), "pooling": "last", "n_pairs": 12}
              for r, f in enumerate(rng.choice(1024, 5, replace=False))]
    doc = {"schema": SAE_SCHEMA, "sae": sae, "top_k": 32, "condition": "full", "fvu": {"last": 0.21},
           "spliced_kl": {"mean": 0.03, "median": 0.02, "max": 0.11, "n": 24}, "probe": probe, "top_features": top,
           "repair_features": repair, **record(config, model=MODEL)}
    atomic_write_json(_mkdir(root / a.folder) / a.result, doc)


def _tokens(config: TokensConfig | None = None) -> dict:
    """tokens.json of three hand trajectories under four policies, with a paired run (hand tokenizer)."""
    from interp.accounting.tokens import run_accounting
    from tests.accounting.test_tokens import TOK, three_steps

    config = config or CONFIGS["tokens"]
    base = [three_steps(f"t{i}") for i in range(3)]
    return {**run_accounting(base, list(config.policies), TOK,
                             paired=([three_steps(f"t{i}", extra=i) for i in range(3)], config.paired_policy)),
            **record(config, model={"spec": "hand tokenizer"})}


# analysis name -> the config its synthetic writer computes with and records (the defaults the figure tests expect)
CONFIGS: dict[str, Any] = {
    "probe": ProbeConfig(permutation="fixed"), "kl_repair": PatchConfig(),
    "attribution": PatchConfig(method="attribution"), "externalization": RiskConfig(n_boot=200),
    "interventions": RunSettings(conditions=("full", "keep_latest_reasoning", "delete_latest_reasoning",
                                             "delete_all_reasoning", "clear_after_code", "hide_observation"),
                                 samples=1, max_new_tokens=64),
    "attention": {"condition": "full"}, "iclr": IclrConfig(), "harm": HarmConfig(margin=0.0),
    "drsr": DrsrConfig(n_boot=100), "gate": GateConfig(n_boot=50),
    "anchors": AnchorConfig(), "sae": ProbeConfig(n_perm=10),
    "tokens": TokensConfig(policies=("full", "keep_latest_reasoning", "delete_all_reasoning", "sliding_window:k=1"),
                           paired_policy="delete_all_reasoning"),
}


# analysis name -> synthetic writer of its files, in the order they draw from the seeded stream
WRITERS: dict[str, Callable[[Path, Analysis, np.random.Generator, Any], None]] = {
    "probe": _write_probe, "kl_repair": _write_kl_repair, "attribution": _write_attribution,
    "externalization": _write_externalization,
    "interventions": _write_interventions, "attention": _write_attention, "iclr": _write_iclr, "harm": _write_harm,
    "drsr": _write_drsr, "tokens": _write_tokens, "gate": _write_gate, "anchors": _write_anchors, "sae": _write_sae,
}


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _json(path: Path, obj: dict) -> None:
    _mkdir(path.parent)
    path.write_text(json.dumps(obj, indent=2))


# ---------------------------------------------------------------- probe

def _probe(out: Path, rng: np.random.Generator, config: ProbeConfig) -> None:
    n, n_tasks = 120, 15
    y = np.zeros(n, dtype=int)
    y[rng.permutation(n)[:50]] = 1
    groups = np.array([f"t{i % n_tasks}" for i in range(n)])
    ids = [f"t{i % n_tasks}@{1 + i // n_tasks}:full" for i in range(n)]
    layers = list(range(0, 32, 2))
    fs = FeatureSet(features={(layer, pooling): np.zeros((n, 2), np.float32) for layer in layers
                              for pooling in ("last", "mean")}, y=y, groups=groups, sample_ids=ids)
    score = rng.normal(1.2 * y - 0.6, 1.0)
    fold = np.arange(n) % 5
    oof = pd.DataFrame({"sample_id": ids, "task_id": groups, "y": y, "score": score, "fold": fold,
                        "threshold": 0.0, "pred": (score >= 0).astype(int)})[OOF_COLUMNS]
    folds = [{"fold": i, "test_tasks": sorted(set(groups[fold == i])), "n_train": int((fold != i).sum()),
              "n_test": int((fold == i).sum()), "layer": 20 if i < 4 else 24, "pooling": "last", "standardize": True,
              "pca": None, "C": 1.0, "threshold": 0.0, "inner_auroc": 0.79, "auroc": 0.8, "n_inner_skipped": 0}
             for i in range(5)]
    curve = {pooling: {"layers": layers, "auroc": [0.55 + 0.25 * np.sin(np.pi * l / 40) + shift for l in layers]}
             for pooling, shift in (("last", 0.02), ("mean", -0.05))}
    cv = NestedCVResult(folds=folds, oof=oof, auroc=0.812, ap=0.774, balanced_accuracy=0.731)
    boot = BootstrapResult(cis={"auroc": [0.751, 0.868], "ap": [0.70, 0.84]}, n_used=1000, n_skipped=0)
    null = rng.uniform(0.45, 0.7, 249)
    perm = PermutationResult(observed=0.83, null=null, p_value=0.004, candidate_auroc=np.full(len(fs.keys), 0.7))
    # The position baseline (AUROC 0.700 [0.640, 0.760]), probe + baseline (0.825) and the paired gain (+0.112).
    base_folds = [{**f, "layer": -1, "pooling": "nuisance"} for f in folds]
    comparison = BaselineComparison(
        names=["after_step", "n_steps", "rel_position"],
        baseline=NestedCVResult(folds=base_folds, oof=oof, auroc=0.700, ap=0.61, balanced_accuracy=0.65),
        baseline_boot=BootstrapResult(cis={"auroc": [0.640, 0.760], "ap": [0.5, 0.7]}, n_used=1000, n_skipped=0),
        combined=NestedCVResult(folds=folds, oof=oof, auroc=0.825, ap=0.78, balanced_accuracy=0.74),
        combined_boot=BootstrapResult(cis={"auroc": [0.77, 0.88], "ap": [0.7, 0.85]}, n_used=1000, n_skipped=0),
        gain=PairedGain(estimate={"auroc": 0.112, "ap": 0.164}, cis={"auroc": [0.051, 0.170], "ap": [0.08, 0.25]},
                        n_used=1000, n_skipped=0))
    position = PermutationResult(observed=0.83, null=rng.uniform(0.6, 0.8, 249), p_value=0.036,
                                 candidate_auroc=None, fixed_tasks=1)
    doc = probe_document(cv, boot, perm, curve, 0.52, fs, [], config, {"nested_cv": 1.0},
                         comparison=comparison, position=position)
    write_probe_results(doc, oof_frame(doc), out)


# ---------------------------------------------------------------- KL Repair

def kl_repair_doc(rng: np.random.Generator, n_layers: int = 32, config: PatchConfig | None = None) -> dict:
    """kl_repair.json from 40 kept and 2 excluded synthetic boundaries of 10 tasks."""
    sites = default_sites(n_layers)
    base = np.array([(layer / (n_layers - 1)) ** 1.5 for _, layer in sites[:-1]] + [1.0])
    rows = []
    for i in range(42):
        excluded = i >= 40
        repair = [float("nan")] * len(sites) if excluded else np.clip(
            base + rng.normal(0, 0.08, len(sites)), -0.2, 1.0).tolist()
        if not excluded:
            repair[-1] = 1.0  # the final resid_post restores the output exactly
        d = 0.0 if excluded else float(rng.gamma(2.0, 0.3))
        rows.append(BoundaryRepair(f"t{i % 10}", 1 + i // 10, d, repair=repair, top1=[bool(r > 0.6) for r in repair],
                                   kl_patch=[0.0 if excluded else d * (1.0 - r) for r in repair],  # Repair = 1 - kl / d
                                   excluded=excluded, n_tokens_full=400, n_tokens_deleted=300))
    sensor = SimpleNamespace(describe=lambda: MODEL, full_attention_layers=list(range(3, n_layers, 4)))
    config = config or CONFIGS["kl_repair"]
    return {**summarize(rows, sites, config.condition, sensor, config.method, config.positions, n_boot=200, rule=config.noise_rule),
            **record(config, model=MODEL)}


# ---------------------------------------------------------------- attribution

def attribution_doc(rng: np.random.Generator, n_layers: int = 8, config: PatchConfig | None = None) -> dict:
    """attribution.json from 6 synthetic boundaries of 3 tasks: exact Repair rising with depth, the first order
    twice as steep plus noise, 4 history sites and 3 singleton units per boundary (one boundary without harm)."""
    sites = default_sites(n_layers)
    labels = [f"{s}.{layer}" for s, layer in sites]
    rows = []
    for i in range(6):
        d = float(rng.gamma(2.0, 0.3))
        exact = np.clip(np.linspace(0, 1, len(sites)) + rng.normal(0, 0.05, len(sites)), 0, 1)
        linear = 2 * exact + rng.normal(0, 0.1, len(sites))
        history = [{"site": labels[k], "position": int(p), "estimate": float(e + rng.normal(0, 1e-3)), "exact": float(e)}
                   for k, p, e in zip(rng.integers(0, n_layers, 4), rng.integers(0, 300, 4), rng.normal(0, 1e-2, 4))]
        harm = {"reason": "no recorded next output (the last boundary)"} if i == 5 else {
            "nll_full": 1.5, "units": [{"members": [["reasoning", 1, j]], "tokens": 20, "harm_exact": float(h),
                                        "harm_linear": float(h + rng.normal(0, 0.01))}
                                       for j, h in enumerate(rng.normal(0.02, 0.02, 3))]}
        row = {"task_id": f"t{i % 3}", "after_step": 1 + i // 3, "d": d, "n_tokens_full": 400,
               "n_tokens_deleted": 300, "n_aligned": 298, "site_labels": labels,
               "kl_change_linear": (-linear * d).tolist(), "repair_linear": linear.tolist(),
               "kl_change_exact": (-exact * d).tolist(), "repair_exact": exact.tolist(), "units": [],
               "history": history, "harm": harm, "forwards": {"attribution": 5, "exact": 2 + n_layers * 298 + 3}}
        pairs = {"tail": (row["kl_change_linear"], row["kl_change_exact"], labels),
                 "history": ([h["estimate"] for h in history], [h["exact"] for h in history], labels[:4]),
                 "harm": ([u["harm_linear"] for u in harm.get("units", [])],
                          [u["harm_exact"] for u in harm.get("units", [])], ["u"] * len(harm.get("units", [])))}
        row["agreement"] = {k: agreement(*v) for k, v in pairs.items()}
        rows.append(row)
    sensor = SimpleNamespace(describe=lambda: MODEL)
    config = config or CONFIGS["attribution"]
    return {**summarize_attribution(rows, [], sites, config.condition, sensor, config.positions),  # type: ignore[arg-type]
            **record(config, model=MODEL)}


# ---------------------------------------------------------------- externalization

def _risk_inputs(where: Path, cells: list[tuple[str, int, int, int, float]]) -> dict:
    """Label and score CSVs for risk_command from (task_id, G, n, n_positive, score) cells."""
    rows, step = [], {}
    for task, g, n, positive, score in cells:
        for j in range(n):
            step[task] = step.get(task, 0) + 1
            rows.append({"task_id": task, "after_step": step[task], "externalization_gap": g,
                         "future_necessity": int(j < positive), "score": score})
    frame = pd.DataFrame(rows)
    _mkdir(where)
    frame[["task_id", "after_step", "externalization_gap", "future_necessity"]].to_csv(where / "labels.csv",
                                                                                       index=False)
    pd.DataFrame({"sample_id": [f"{t}@{b}:full" for t, b in zip(frame["task_id"], frame["after_step"])],
                  "task_id": frame["task_id"], "y": frame["future_necessity"], "score": frame["score"]}
                 ).to_csv(where / "oof_predictions.csv", index=False)
    return {"labels": where / "labels.csv", "probe_results": where / "oof_predictions.csv"}


def _externalization_cells() -> list[tuple[str, int, int, int, float]]:
    """P(y|G=1) = 80/125 = 0.64, P(y|G=0) = 57/150 = 0.38, within-task gap 0.21, log-odds score gap 0.27."""
    p1 = [3, 4, 5, 5, 6, 6, 7, 7, 8, 9]  # positives of 10 G=1 boundaries per task: sum 60
    p0 = [2, 5, 3, 4, 3, 5, 4, 5, 4, 4]  # of 10 G=0 boundaries: sum 39; mean per-task difference 0.21
    cells = []
    for i, (a, b) in enumerate(zip(p1, p0)):
        cells += [(f"t{i}", 1, 10, a, 0.1 * i + 0.27), (f"t{i}", 0, 10, b, 0.1 * i)]
    return cells + [("t10", 1, 25, 20, 1.0), ("t11", 0, 50, 18, 0.0)]  # tasks with one G value only


def _probability_root(gap: float = 0.9, target: float = 0.15) -> float:
    """x with sigmoid(x + gap) - sigmoid(x) = target (the root below the peak at -gap / 2), by bisection."""
    def f(x: float) -> float:
        return 1 / (1 + math.exp(-x - gap)) - 1 / (1 + math.exp(-x)) - target
    lo, hi = -20.0, -gap / 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


def risk_layout_externalization(tmp: Path) -> dict:
    """externalization.json from risk_command: P(y|G=1) 0.6, P(y|G=0) 0.3, per-task gaps 0.1..0.4, score gap 0.9."""
    x = _probability_root()
    cells = []
    for i, a in enumerate([4, 5, 6, 7]):
        cells += [(f"t{i}", 1, 10, a, x + 0.9), (f"t{i}", 0, 10, 3, x)]
    cells.append(("t4", 1, 10, 8, 0.0))
    return risk_command(tmp / "externalization", **_risk_inputs(tmp / "_inputs", cells), config=RiskConfig(n_boot=200))


# ---------------------------------------------------------------- interventions

def _rows(condition: str, scores: list[float], reacquired: list[bool | None] | None = None,
          states_per_task: int = 5) -> list[dict]:
    reacquired = reacquired or [None] * len(scores)
    return [{"state_id": f"s{i}", "task_id": f"t{i // states_per_task}", "domain": "code", "after_step": 2,
             "condition": condition, "sample": "greedy", "seed": None, "text": "", "parsed": {"status": "ok"},
             "parse_failure": False, "score": score, "checks": [], "reacquired": r, "hidden_step": 2,
             "n_prompt_tokens": 300, "n_new_tokens": 40, "stopped": True, "edit": {"condition": condition}}
            for i, (score, r) in enumerate(zip(scores, reacquired))]


def _scores(mean: float, n: int) -> list[float]:
    """n state scores (rubric 0..1) with exactly that mean: ones, one partial score, zeros."""
    ones = int(mean * n)
    rest = round(mean * n - ones, 6)
    return [1.0] * ones + ([rest] if rest else []) + [0.0] * (n - ones - bool(rest))


def _interventions(settings: RunSettings | None = None) -> dict:
    means = {"full": 0.86, "keep_latest_reasoning": 0.85, "delete_latest_reasoning": 0.74,
             "delete_all_reasoning": 0.66, "clear_after_code": 0.75, "hide_observation": 0.70}
    rows, seen = [], {}
    for condition, mean in means.items():
        reacq = [i < 83 for i in range(100)] if condition == "hide_observation" else None
        scores = _scores(mean, 50)
        rows += _rows(condition, scores + scores, reacq)  # two generations per state: greedy and one sample
    for r in rows:
        if r["state_id"] in seen.setdefault(r["condition"], set()):
            r["sample"], r["seed"] = 0, 1
        seen[r["condition"]].add(r["state_id"])
    settings = settings or CONFIGS["interventions"]
    return {**interventions_document(rows, settings, MODEL, 50, [], n_boot=200), **record(settings, model=MODEL)}


def summary_layout_interventions() -> dict:
    """interventions.json from interventions_document: full 0.9 (re-acquisition 0.1), delete_all 0.61, hide 0.5
    (re-acquisition 0.75), keep_latest_reasoning without rows (no score)."""
    rows = (_rows("delete_all_reasoning", _scores(0.61, 100)) + _rows("full", _scores(0.9, 10), [True] + [False] * 9)
            + _rows("hide_observation", _scores(0.5, 4), [True, True, True, False]))
    settings = RunSettings(conditions=("delete_all_reasoning", "full", "hide_observation", "keep_latest_reasoning"),
                           samples=0)
    return json.loads(json.dumps({**interventions_document(rows, settings, MODEL, 114, [], n_boot=200),
                                  **record(settings, model=MODEL)}))


# ---------------------------------------------------------------- demo files (attention, ICLR)

def _attention(rng: np.random.Generator) -> dict:
    layers = list(range(3, 32, 4))
    per_boundary = {c: rng.dirichlet(np.ones(len(KINDS)), size=(40, len(layers))) for c in ("full", "delete_all_reasoning")}
    tokens = rng.integers(0, 400, size=(40, len(KINDS))).astype(float)
    conditions = {c: condition_summary(m, tokens) for c, m in per_boundary.items()}
    return attention_document(per_boundary["full"].mean(axis=0), layers, "full", 40, conditions)  # the real writer's


def _iclr(rng: np.random.Generator, rho: float) -> pd.DataFrame:
    rows = []
    for task in range(6):
        for step in range(1, 7):
            n = int(rng.integers(1, 7))
            scored = not (task == 5 and step > 4)
            entropy = rng.gamma(2.0, 0.6, n)
            rows += [{"task_id": f"t{task}", "domain": "code", "step": step, "block": b,
                      "n_tokens": int(rng.integers(10, 200)), "mean_entropy_bits": entropy[b] if scored else None}
                     for b in range(n)]
    return drop_table(pd.DataFrame(rows), rho)  # the real writer: ICLR's drop rule at the config's rho


# ---------------------------------------------------------------- harm

# Orders of the true joint harms of five same-size sets, by rank of their additive prediction:
# two inverted pairs of ten (pair-ordering accuracy 0.8 at margin 0) for k = 2, three (0.7) for k = 3.
_ORDER = {2: [1, 0, 3, 2, 4], 3: [2, 0, 1, 4, 3]}


def _harm_boundaries(rng: np.random.Generator) -> list[dict]:
    """boundary_harm records of 4 boundaries: 6 singletons and 5 sets each of size 2 and 3."""
    boundaries = []
    for task in range(4):
        blocks = [("reasoning", s, b) for s in (1, 2) for b in range(3)]
        single = {m: float(rng.gamma(2.0, 0.02)) for m in blocks}
        sets = [{"members": [list(m)], "tokens_removed": 20, "nll": 1.0 + h, "harm": h, "interaction": None}
                for m, h in single.items()]
        for k, order in _ORDER.items():
            chosen = [tuple(sorted(rng.choice(len(blocks), k, replace=False).tolist())) for _ in range(50)]
            chosen = list(dict.fromkeys(chosen))[:5]
            members = [[blocks[i] for i in c] for c in chosen]
            predicted = [sum(single[m] for m in ms) for ms in members]
            ranked = sorted(range(5), key=predicted.__getitem__)
            factor = float(rng.uniform(0.5, 0.9))
            for rank, j in enumerate(ranked):
                joint = factor * predicted[ranked[order[rank]]]
                sets.append({"members": [list(m) for m in members[j]], "tokens_removed": 20 * k, "nll": 1.0 + joint,
                             "harm": joint, "interaction": joint - predicted[j]})
        boundaries.append({"task_id": f"t{task}", "after_step": 3, "units": ["reasoning"], "target": "y",
                           "target_tokens": 12, "nll_full": 1.0, "sets": sets})
    return boundaries


def drsr_records(rng: np.random.Generator, n_tasks: int = 8, n_layers: int = 8, dim: int = 6) -> list[dict]:
    """drsr boundary records (harm record + captured representations and attention) of steps with a reasoning
    block, an observation and a tool exchange each, 3-step histories; set harms 0.9-1.3 x additive."""
    records = []
    for i in range(n_tasks):
        b = 3
        units = [[kind, t, None if kind == "step" else 0] for t in range(1, b + 1)
                 for kind in ("reasoning", "observation", "tool_exchange", "step")]
        harm = {tuple(u): float(abs(rng.normal(0.08 if u[0] == "step" else 0.02, 0.03))) for u in units}
        sets = [{"members": [u], "tokens_removed": 10, "nll": 1.0 + harm[tuple(u)], "harm": harm[tuple(u)],
                 "interaction": None} for u in units]
        blocks = [u for u in units if u[0] == "reasoning"] + [u for u in units if u[0] == "observation"]
        for a, c in [(0, 3), (1, 4), (0, 4), (2, 5), (0, 1), (1, 2)]:
            members = [blocks[a], blocks[c]]
            additive = sum(harm[tuple(m)] for m in members)
            joint = additive * float(rng.uniform(0.9, 1.3))
            sets.append({"members": members, "tokens_removed": 20, "nll": 1.0 + joint, "harm": joint,
                         "interaction": joint - additive})
        trio = [blocks[0], blocks[1], blocks[2]]
        additive = sum(harm[tuple(m)] for m in trio)
        sets.append({"members": trio, "tokens_removed": 30, "nll": 1.0, "harm": 1.2 * additive,
                     "interaction": 0.2 * additive})
        records.append({"task_id": f"t{i}", "after_step": b, "units": ["reasoning", "observation", "tool_exchange",
                                                                        "step"],
                        "target": "y", "target_tokens": 12, "nll_full": 1.0, "sets": sets,
                        "shapes": [[1, 1, 1, 0]] * b,  # per step: a block, a call, its result
                        "layers": list(range(n_layers)), "attention_layers": [3, 7], "prompt_tokens": 400,
                        "state": rng.normal(size=(n_layers, dim)).round(4).tolist(),
                        "candidates": [{"unit": u, "n_tokens": int(rng.integers(5, 60)),
                                        "rep": rng.normal(size=(n_layers, dim)).round(4).tolist(),
                                        "attention": rng.uniform(0, 0.15, size=(2, 4)).round(4).tolist()}
                                       for u in units]})
    return records
