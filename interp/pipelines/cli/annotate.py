"""``interp annotate`` (the labelling page) and ``interp labels agree`` (two annotators' agreement)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from interp.io import atomic_write_json, check_output_dir
from interp.pipelines.cli.common import AllowControlOpt, TrajectoriesOpt, app, at_least, console

labels_app = typer.Typer(help="Hand labels: agreement of two annotators.", no_args_is_help=True)
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
        web = open_app(p, frame_ancestor or (), behind_proxy)
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


@labels_app.command("agree")
def labels_agree(
    first: Annotated[Path, typer.Argument(help="First annotator's CSV.")],
    second: Annotated[Path, typer.Argument(help="Second annotator's CSV.")],
    field: Annotated[Optional[str], typer.Option("--field", help="externalization_gap or future_necessity "
                                                 "(default: every label column both files hold).")] = None,
    trajectories: Annotated[Optional[Path], typer.Option("--trajectories", help="Check task ids and boundaries "
                                                         "against this trajectory file.")] = None,
    n_boot: Annotated[int, typer.Option("--n-boot", help="Task-bootstrap resamples of the kappa CI.")] = 1000,
    seed: int = 0,
    out: Annotated[Optional[Path], typer.Option("--out", help="Also write the report as JSON here.")] = None,
    show: Annotated[int, typer.Option("--show", help="Disagreements listed (all are in --out).")] = 50,
) -> None:
    """Cohen's kappa of two annotators with a task-bootstrap CI, the confusion table and the disagreements."""
    from interp.data.labels import LABEL_FIELDS, pair_agreement, read_labels_csv
    from interp.data.trajectory import load_trajectories

    at_least("--n-boot", n_boot, 0)
    if field is not None and field not in LABEL_FIELDS:
        raise ValueError(f"--field: unknown label {field!r}; use one of {', '.join(LABEL_FIELDS)}")
    if out is not None:
        check_output_dir(out.parent, "--out")
    trajs = load_trajectories(trajectories) if trajectories is not None else None
    fields = [field] if field else list(LABEL_FIELDS)
    sets = {f: [read_labels_csv(p, f, trajs, required=field is not None) for p in (first, second)] for f in fields}
    if field is None:
        sets = {f: pair for f, pair in sets.items() if pair[0] and pair[1]}
        if not sets:
            raise ValueError(f"{first}, {second}: no label column ({', '.join(LABEL_FIELDS)}) labelled in both")
    report = {}
    for name, (a, b) in sets.items():
        r = report[name] = pair_agreement(a, b, n_boot, seed)
        ci = r["kappa_ci"]
        console.print(f"{name}: {r['n']} shared boundaries of {r['n_tasks']} tasks (only {first.name}: "
                      f"{r['only_first']}, only {second.name}: {r['only_second']}); Cohen's kappa {r['kappa']} "
                      f"[{ci[0] if ci else '-'}, {ci[1] if ci else '-'}] (task bootstrap, {r['n_boot_defined']} "
                      f"of {n_boot} resamples defined); accuracy {r['accuracy']}", markup=False, highlight=False)
        if r["confusion"]:
            (n00, n01), (n10, n11) = r["confusion"]
            console.print(f"  confusion (rows {first.name}, columns {second.name}):  0: {n00:>5} {n01:>5}   "
                          f"1: {n10:>5} {n11:>5}", markup=False, highlight=False)
        for d in r["disagreements"][:show]:
            console.print(f"  disagree {d['task_id']}@{d['after_step']}: {first.name} {d['first']}, "
                          f"{second.name} {d['second']}", markup=False, highlight=False)
        if len(r["disagreements"]) > show:
            console.print(f"  ... {len(r['disagreements']) - show} more", markup=False)
    if out is not None:
        atomic_write_json(out, {"first": str(first), "second": str(second), "n_boot": n_boot, "seed": seed,
                                "fields": report})
        console.print(f"-> {out}", markup=False)
