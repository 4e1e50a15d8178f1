"""The DRSR appendix section of ``report.md`` from ``drsr.json``, each number beside the reference study's."""

from __future__ import annotations

from typing import Any

from interp.reporting import reference as ref
from interp.reporting.figures.drsr import density_split_labels
from interp.reporting.numbers import ci_text, num, pct, shown
from interp.reporting.ran import setting


def drsr_section(res: dict[str, Any]) -> list[str]:
    """Lines of the section: granularity, relations by depth, accuracy at the margin, interaction, attention."""
    g, rel, inter, dens = res["granularity"], res["relations"], res["interaction"], res["attention_density"]
    rg = ref.DRSR_GRANULARITY
    apart = (" (whole steps enter the granularity rows only; relations, interaction and attention read the sets "
             "of DRSR's block kinds)") if "step" in res["units"] else ""
    margin = setting(res, "margin")
    lines = [f"{len(res['boundaries'])} boundaries, units {', '.join(res['units'])}{apart}; sets up to "
             f"{setting(res, 'max_k')} units, {setting(res, 'budget')} sampled per size; margin {shown(num(margin))} "
             f"nats/token; unsafe: harm above {shown(num(setting(res, 'unsafe')))} nats/token; CIs from "
             f"{setting(res, 'n_boot')} task-bootstrap resamples. Reference numbers: "
             f"{ref.MODEL}, 1,698 decision states of 566 trajectories.", "",
             "| history granularity | this run | 95% CI (task bootstrap) | n | reference study |", "|---|---|---|---|---|",
             f"| median within-state step-harm range | {shown(num(g['step_range']['median']))} | {shown(ci_text(g['step_range']['ci']))} | "
             f"{g['step_range']['n_states']} states | {rg['step_range']} |",
             f"| median within-state block-harm range | {shown(num(g['block_range']['median']))} | "
             f"{shown(ci_text(g['block_range']['ci']))} | {g['block_range']['n_states']} states | {rg['block_range']} |",
             f"| unsafe parent steps holding a safe block | {pct(g['unsafe_parent_safe_child_fraction']) or 'n/a'} | | "
             f"{g['n_unsafe_parents_with_safe_child']} of {g['n_unsafe_parents']} | {pct(rg['unsafe_parent_safe_child'])} |"]
    if rel["families"]:
        chosen = rel["margin_curve"]["layer"]
        lines += ["", f"Pair-ordering accuracy at the margin of out-of-fold predictions (ridge, grouped CV by "
                  f"trajectory; {rel['n_sets']} sets of 2+ units, {rel['n_tasks']} trajectories): the best layer "
                  f"(chosen after the fact, so optimistic) and layer {chosen} (fixed).", "",
                  "| features | best layer | accuracy there | accuracy at the fixed layer | 95% CI | pairs | "
                  "reference study |", "|---|---|---|---|---|---|---|"]
        for family, rows in rel["families"].items():
            known = [r for r in rows if r["pair_accuracy"] is not None]
            best = max(known, key=lambda r: r["pair_accuracy"]) if known else None
            fixed = rows[0] if family == "surface" else next((r for r in rows if r["layer"] == chosen), rows[0])
            reference = pct(ref.DRSR_STATE_ONLY) if family == "state" else ""
            lines.append(f"| {family} | {'-' if family == 'surface' or not best else best['layer']} | "
                         f"{shown(pct(best['pair_accuracy'] if best else None))} | {shown(pct(fixed['pair_accuracy']))} | "
                         f"{ci_text(fixed['ci'], 100, ' %') or 'n/a'} | {fixed['n_pairs']} | {reference} |")
        curve = rel["margin_curve"]
        at = min(range(len(curve["margins"])), key=lambda i: abs(curve["margins"][i] - margin))
        lines += ["", f"Singleton aggregators at margin {curve['margins'][at]} (the curve over 0..0.1 is figure 9b):", "",
                  "| aggregator | pair-ordering accuracy | reference study |", "|---|---|---|"]
        lines += [f"| {name} | {shown(pct(curve['accuracy'][name][at]))} | {pct(value)} |"
                  for name, value in ref.DRSR_PAIR_ACCURACY.items()]
    else:
        lines += ["", f"Relations: not computed ({rel['n_tasks']} trajectories; grouped CV needs 2)."]
    lines += ["", "| set size | mean interaction (nats/token) | 95% CI | sets | reference study (sets) |",
              "|---|---|---|---|---|"]
    for row in inter["by_size"]:
        k = int(row["group"])
        lines.append(f"| {k} | {num(row['mean_interaction'], 4)} | {ci_text(row['ci']) or 'n/a'} | {row['n_sets']} | "
                     f"{ref.DRSR_INTERACTION.get(k, '')} ({ref.DRSR_N_SETS.get(k, '')}) |")
    selected, retained, source = density_split_labels(dens)
    lines += ["", f"Boundary attention mass per token on the candidates, mean over heads (figure 11), {source}. "
              "Lower attention alone is not a deletion-safety test.", "",
              f"| full-attention layer | {selected} | n | {retained} | n |", "|---|---|---|---|---|"]
    for entry in dens["layers"]:
        s, r = entry["selected"], entry["retained"]
        lines.append(f"| {entry['layer']} | {num(s['mean'], 5) or 'n/a'} | {s['n']} | {num(r['mean'], 5) or 'n/a'} | "
                     f"{r['n']} |")
    return lines
