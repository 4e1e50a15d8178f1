"""``interp annotate`` (the labelling page) and ``interp labels`` (agree, status, judge: agreement, progress,
model-assisted labels)."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from interp.io import atomic_write_json, check_output_dir
from interp.params import N_BOOT
from interp.annotation.judge import JudgeConfig
from interp.pipelines.cli.common import AllowControlOpt, TrajectoriesOpt, app, at_least, config_options, console

if TYPE_CHECKING:
    from interp.annotation.session import Item

labels_app = typer.Typer(help="Labels: agreement, progress, and model-assisted (judge) labelling.",
                         no_args_is_help=True)
app.add_typer(labels_app, name="labels")


@app.command("annotate")
def annotate(
    trajectories: TrajectoriesOpt,
    labels: Annotated[Path, typer.Option("--labels", help="Output CSV (task_id,after_step,<labels>,annotator,"
                                                          "time,suggestions,note); its journal and lock live "
                                                          "in <labels>.annotate/ beside it.")],
    annotator: Annotated[str, typer.Option("--annotator", help="Your name, recorded with every label.")],
    task: Annotated[str, typer.Option("--task", help="g (externalization gap: history up to b only), y "
                                                     "(future necessity: the later steps too) or both (per "
                                                     "trajectory every G first, then every y).")] = "g",
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: any free port).")] = 0,
    adjudicate: Annotated[Optional[list[Path]], typer.Option(
        "--adjudicate", help="Two annotators' CSVs (give the option twice): walk only their disagreements; "
                             "--labels gets their agreements plus your decisions.")] = None,
    allow_control_tokens: AllowControlOpt = False,
    frame_ancestor: Annotated[Optional[list[str]], typer.Option(
        "--frame-ancestor", help="An origin that may show the page in a frame (https://hub.example.org); "
                                 "loopback notebooks and the page's own origin always may.")] = None,
    review: Annotated[Optional[Path], typer.Option(
        "--review", help="Another annotator's CSV (a judge's: annotator judge:<model>): walk its labels, each "
                         "shown with its note; confirm or correct them (recorded in reviewed, reviewed_<field>).")]
    = None,
    behind_proxy: Annotated[bool, typer.Option(
        "--behind-proxy", help="Serve through jupyter-server-proxy (open {base_url}proxy/PORT/?token=...): "
                               "admit its forwarded requests whatever their Host (the token is still checked).")]
    = False,
) -> None:
    """Serve the labelling page on 127.0.0.1 with a per-session token; every label is kept the moment it is given."""
    from interp.annotation.server import bind, make_server, open_app, plan, security_headers, session_lock, url_of

    at_least("--port", port, 0)
    if port > 65535:
        raise ValueError(f"--port {port}: must be <= 65535")
    p = plan(trajectories, labels, annotator, task, adjudicate or (), allow_control_tokens, review)
    security_headers(frame_ancestor or ())
    sock = bind(port)
    with session_lock(p.labels_csv):
        web = open_app(p, frame_ancestor or (), behind_proxy, port)
        s = web.session
        for line in s.flags:  # labels given on text that has changed since: set aside, never re-attached
            console.print(f"changed: {line}", markup=False, highlight=False)
        console.print(f"{p.labels_csv}: {s.labelled()} of {len(s.queue)} items labelled"
                      + (f" (adjudicating {' vs '.join(c.annotator for c in s.compared)})" if s.compared else "")
                      + (f" (reviewing {s.reviewed.annotator}'s labels)" if s.reviewed else "")
                      + f"; resuming at item {s.position + 1}", markup=False, highlight=False)
        if behind_proxy:
            console.print(f"through Jupyter: {{base_url}}proxy/{sock.getsockname()[1]}/?token={web.token}",
                          markup=False, highlight=False)
        console.print(f"open {url_of(sock, web.token)}  (Ctrl-C stops; labels are on disk already)",
                      markup=False, highlight=False)
        make_server(web).run(sockets=[sock])


ANNOTATIONS = "annotations"  # the name of the trajectories' own hand annotations as a label source


def _label_sources(files: list[Path], trajectories: Optional[Path], fields: list[str], with_annotations: bool,
                   required: bool) -> tuple[dict[str, dict[str, Any]], Any]:
    """``({name: {field: labels}}, trajectories)``: each CSV (named by its file name) and, when asked, the
    trajectories' annotations (named ``annotations``). A file given twice is refused with a sentence."""
    from interp.data.labels import annotation_labels, read_labels_csv
    from interp.data.trajectory import load_trajectories

    seen: dict[Path, Path] = {}
    for p in files:
        if p.resolve() in seen:
            raise ValueError(f"{p}: given twice (also as {seen[p.resolve()]}); give each file once (a file "
                             "compared with itself agrees by construction)")
        seen[p.resolve()] = p
    if with_annotations and trajectories is None:
        raise ValueError("--trajectories: needed to compare with the trajectories' annotations")
    trajs = load_trajectories(trajectories, allow_control_tokens=True) if trajectories is not None else None
    names = [p.name for p in files]
    if len(set(names)) < len(names) or (with_annotations and ANNOTATIONS in names):
        names = [str(p) for p in files]
    sources = {n: {f: read_labels_csv(p, f, trajs, required=required) for f in fields} for n, p in zip(names, files)}
    if with_annotations:
        assert trajs is not None
        sources[ANNOTATIONS] = {f: annotation_labels(trajs, f) for f in fields}
    return sources, trajs


def _fmt(value: float | None) -> str:
    """A coefficient as printed: 4 decimals, ``-`` when undefined."""
    return "-" if value is None else f"{value:.4f}"


def _print_pair(name: str, name_a: str, name_b: str, r: Mapping[str, Any], pct: str, n_boot: int, show: int) -> None:
    """One pair's block of ``labels agree``: kappa with its CI and notes, the confusion table, the disagreements."""
    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False)

    ci = r["kappa_ci"]
    say(f"{name}: {r['n']} shared boundaries of {r['n_tasks']} tasks (only {name_a}: "
        f"{r['only_first']}, only {name_b}: {r['only_second']}); Cohen's kappa {r['kappa']}, {pct} CI "
        f"[{ci[0] if ci else '-'}, {ci[1] if ci else '-'}] (task bootstrap, {r['n_boot_defined']} of {n_boot} "
        f"resamples defined); accuracy {r['accuracy']}")
    if r["kappa_note"]:
        say(f"  {r['kappa_note']}")
    if r["kappa_ci_note"] and r["kappa"] is not None:
        say(f"  kappa CI: {r['kappa_ci_note']}")
    if r["confusion"]:
        (n00, n01), (n10, n11) = r["confusion"]
        width = max(len(name_a), 8) + 4
        say(f"  confusion (rows: {name_a}, columns: {name_b}; boundaries)")
        say(f"  {'':<{width}}{name_b + ' 0':>{len(name_b) + 4}}  {name_b + ' 1':>{len(name_b) + 4}}")
        for cls, (x, y) in (("0", (n00, n01)), ("1", (n10, n11))):
            say(f"  {name_a + ' ' + cls:<{width}}{x:>{len(name_b) + 4}}  {y:>{len(name_b) + 4}}")
    for d in r["disagreements"][:show]:
        say(f"  disagree {d['task_id']!r}@{d['after_step']}: {name_a} {d['first']}, {name_b} {d['second']}")
    if len(r["disagreements"]) > show:
        say(f"  ... {len(r['disagreements']) - show} more")


@labels_app.command("agree")
def labels_agree(
    files: Annotated[list[Path], typer.Argument(help="Annotators' CSVs (a judge's too), two or more; one alone is "
                                                     "compared with the trajectories' own annotations (needs "
                                                     "--trajectories). The first two are the rows and columns of "
                                                     "the confusion table.")],
    field: Annotated[Optional[str], typer.Option("--field", help="externalization_gap or future_necessity "
                                                 "(default: every label column both hold).")] = None,
    trajectories: Annotated[Optional[Path], typer.Option("--trajectories", help="Check task ids and boundaries "
                                                         "against this trajectory file (and take its "
                                                         "annotations when only one CSV is given).")] = None,
    n_boot: Annotated[int, typer.Option("--n-boot", help="Task-bootstrap resamples of the CIs.")] = N_BOOT,
    level: Annotated[float, typer.Option("--level", help="Confidence level of the CIs.")] = 0.95,
    seed: int = 0,
    out: Annotated[Optional[Path], typer.Option("--out", help="Also write the report as JSON here.")] = None,
    show: Annotated[int, typer.Option("--show", help="Disagreements listed (all are in --out).")] = 50,
) -> None:
    """Agreement of annotators (or a judge and people): percent agreement, Krippendorff's alpha and Gwet's AC1 of
    all of them, Cohen's kappa, the confusion table and the disagreements of every pair; each coefficient with a
    task-bootstrap CI and a note when that CI says little."""
    from itertools import combinations

    from interp.data.labels import LABEL_FIELDS, pair_agreement
    from interp.data.reliability import reliability

    at_least("--n-boot", n_boot, 0)
    if not 0 < level < 1:
        raise ValueError(f"--level {level}: must be in (0, 1), e.g. 0.95")
    if field is not None and field not in LABEL_FIELDS:
        raise ValueError(f"--field: unknown label {field!r}; use one of {', '.join(LABEL_FIELDS)}")
    if out is not None:
        check_output_dir(out.parent, "--out")
    fields = [field] if field else list(LABEL_FIELDS)
    sources, _ = _label_sources(files, trajectories, fields, len(files) == 1, field is not None)
    names = list(sources)
    if field is None:
        fields = [f for f in fields if sum(1 for n in names if sources[n][f]) >= 2]
        if not fields:
            raise ValueError(f"{', '.join(names)}: no label column ({', '.join(LABEL_FIELDS)}) labelled in two of "
                             "them; nothing to compare")
    report: dict[str, Any] = {}
    pct = f"{level * 100:g}%"
    for name in fields:
        sets = {n: sources[n][name] for n in names}
        empty = [n for n, labels in sets.items() if not labels]
        if len(empty) > len(sets) - 2:
            raise ValueError(f"{name}: {', '.join(empty)} {'holds' if len(empty) == 1 else 'hold'} no {name} "
                             "label; agreement needs two annotators' labels")
        rel = reliability(sets, (0, 1), n_boot=n_boot, seed=seed, level=level)
        console.print(f"{name}: {len(sets)} annotators, {rel['n_pairable']} boundaries labelled by two or more "
                      f"({rel['n_units']} by any) of {rel['n_tasks']} tasks", markup=False, highlight=False)
        for stat, title in (("percent_agreement", "percent agreement"),
                            ("krippendorff_alpha", "Krippendorff's alpha (nominal)"), ("gwet_ac1", "Gwet's AC1")):
            r = rel[stat]
            ci = r["ci"]
            console.print(f"  {title} {_fmt(r['value'])}, {pct} CI [{_fmt(ci[0]) if ci else '-'}, "
                          f"{_fmt(ci[1]) if ci else '-'}] (task bootstrap, {r['n_boot_defined']} of {n_boot} "
                          f"resamples defined)" + (f"; {r['note']}" if r["note"] else ""),
                          markup=False, highlight=False)
        pairs = {}
        for a, b in combinations(names, 2):
            pairs[f"{a} vs {b}"] = p = pair_agreement(sets[a], sets[b], n_boot, seed, level, (a, b))
            _print_pair(name if len(names) == 2 else f"{name}, {a} vs {b}", a, b, p, pct, n_boot, show)
        report[name] = {**pairs[f"{names[0]} vs {names[1]}"], "reliability": rel,
                        **({"pairs": pairs} if len(names) > 2 else {})}
    if out is not None:
        atomic_write_json(out, {"files": [str(f) for f in files], "first": str(files[0]),
                                "second": str(files[1]) if len(files) > 1 else ANNOTATIONS,
                                "n_boot": n_boot, "level": level, "seed": seed, "fields": report})
        console.print(f"-> {out}", markup=False)


@labels_app.command("status")
def labels_status(
    files: Annotated[list[Path], typer.Argument(help="Labels CSVs (people's, a judge's, an adjudicated one).")],
    trajectories: Annotated[Optional[Path], typer.Option("--trajectories", help="Count against every item of "
                                                         "this trajectory file (G at b = 1..n, y at 1..n-1).")] = None,
    annotations: Annotated[bool, typer.Option("--annotations", help="Also count the trajectories' own "
                                              "annotations as a source.")] = False,
) -> None:
    """Who labelled what (per file and annotator, per label, against the items to label) and the overlap of every
    pair of sources (the boundaries their agreement is measured on)."""
    from interp.data.labels import LABEL_FIELDS, annotator_counts, final_boundaries, overlap

    fields = sorted(LABEL_FIELDS)  # G first
    sources, trajs = _label_sources(files, trajectories, fields, annotations, False)
    from interp.annotation.judge import missing_counts

    totals: dict[str, int] = {}
    if trajs is not None:  # y is undefined at a final boundary: a label given there is not counted (nor compared)
        finals = final_boundaries(trajs)
        for name, sets in sources.items():
            dropped = {k: v for k, v in sets["future_necessity"].items() if k in finals}
            if dropped:
                sets["future_necessity"] = {k: v for k, v in sets["future_necessity"].items() if k not in finals}
                console.print(f"{name}: {len(dropped)} y labels at final boundaries (undefined there) not counted",
                              markup=False, highlight=False)
        n_boundaries = sum(t.n_steps for t in trajs)
        totals = {"externalization_gap": n_boundaries,
                  "future_necessity": n_boundaries - len(final_boundaries(trajs))}
    short = {"externalization_gap": "G", "future_necessity": "y"}

    def count(name: str, n: int) -> str:
        return f"{short[name]} {n}" + (f"/{totals[name]}" if totals else "")

    for (name, sets), path in zip(sources.items(), [*files, None]):
        tasks = {k[0] for labels in sets.values() for k in labels}
        console.print(f"{name}: " + ", ".join(count(f, len(sets[f])) for f in fields) + f" labelled, {len(tasks)} "
                      "tasks" + (f" of {len(trajs)}" if trajs is not None else ""), markup=False, highlight=False)
        if path is not None:
            for who, counts in annotator_counts(path, fields).items():
                console.print(f"  {who}: " + ", ".join(count(f, counts[f]) for f in fields), markup=False,
                              highlight=False)
            missing = missing_counts(path)
            if missing:
                console.print("  missing (the judge's failed or unusable answers): "
                              + ", ".join(f"{short[f]} {missing.get(f, 0)}" for f in fields), markup=False)
    if len(sources) > 1:
        console.print("overlap (boundaries labelled by both, per label):", markup=False)
        shared = {f: overlap({n: s[f] for n, s in sources.items()}) for f in fields}
        for pair in shared[fields[0]]:
            console.print(f"  {pair[0]} & {pair[1]}: " + ", ".join(f"{short[f]} {shared[f][pair]}" for f in fields),
                          markup=False, highlight=False)


@labels_app.command("judge")
@config_options(JudgeConfig)
def labels_judge(
    trajectories: TrajectoriesOpt,
    labels: Annotated[Path, typer.Option("--labels", help="Output CSV (task_id,after_step,<labels>,annotator,model,"
                                                          "prompt_sha256,time,rationale,missing); its journal "
                                                          "(the cache) and lock live in <labels>.judge/ beside it.")],
    config: JudgeConfig,
    task: Annotated[str, typer.Option("--task", help="g (G: history up to b only), y (y: the later steps too) "
                                                     "or both.")] = "both",
    retry_missing: Annotated[bool, typer.Option("--retry-missing", help="Ask again the items whose earlier reply "
                                                "was unusable (failed requests are always asked again).")] = False,
    max_items: Annotated[Optional[int], typer.Option("--max-items", help="A pilot: only this many items, those "
                                                     "with the shortest prompts, shortest first (a later run asks "
                                                     "the rest).")] = None,
    allow_control_tokens: AllowControlOpt = False,
) -> None:
    """Label G and y with an OpenAI-compatible chat model, the labelling guideline as its rubric; cached, resumable."""
    from interp.annotation.judge import run_judge

    check_output_dir(labels.parent, "--labels")

    def show(i: int, n: int, item: Item, rec: Mapping[str, Any], cached: bool) -> None:
        value = "missing (" + rec["problem"] + ")" if rec["label"] is None else rec["label"]
        console.print(f"[{i + 1}/{n}] {item.task_id}@{item.after_step} {item.field}: {value}"
                      + (" (cached)" if cached else ""), markup=False, highlight=False)

    summary = run_judge(trajectories, labels, config, task, allow_control_tokens=allow_control_tokens,
                        retry_missing=retry_missing, on_answer=show, max_items=max_items,
                        log=lambda line: console.print(f"  {line}", markup=False, highlight=False))
    for name, c in summary["fields"].items():
        console.print(f"{name}: {c['labelled']} labelled ({c['positive']} positive), {c['missing']} missing",
                      markup=False)
    console.print(f"{summary['n_asked']} asked, {summary['n_cached']} cached; rubric sha256 "
                  f"{summary['prompt_sha256'][:12]}; -> {labels}", markup=False)
