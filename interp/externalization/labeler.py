"""Externalization labels G_i: does derived state live only in reasoning at boundary b?

Definitions: the labelling guideline's (``interp/annotation/guideline.md``,
read by :mod:`interp.annotation.guideline`), sections *Derived state*,
*Carriers* and *G: externalization gap*; they are not restated here. This
labeler's reading of the carriers, one kind per carrier of the guideline
(``CARRIER_KINDS``). The study's list, used by default (``STUDY_CARRIERS``)::

      written_file   content-like arguments of write-like tools (``interp.data.actions.writes_code``): code, files
      tool_output    the observation of a tool-call step
      feedback       the observation after a plain-text action (environment / user feedback)

and two opt-in kinds (``GapLabelerConfig.carriers``, ``interp externalize label
--carriers``), which the study does not count as externalization (the
guideline counts a tool call's arguments once the call ran)::

      tool_argument  every other tool-call argument (one carrier per leaf value)
      text_action    the text of a plain-text action

Labels come from annotations (``annotations.boundaries[].externalization_gap``),
from a CSV ``task_id,after_step,externalization_gap`` (both read by
:mod:`interp.data.labels`, which also computes the agreement of two label
sets), or from the rule-based labeler below (:func:`label_gap`, :func:`label_gaps`).

The rule-based labeler. The reasoning of every step t is cut into *items*:

==============  ==========================================================================
kind            what (regexes in ``ITEM_PATTERNS``; earlier kinds claim their text first)
==============  ==========================================================================
url, email      ``https://...``, ``a@b.c``
path            ``a/b/c``, ``./x``, ``/abs/path``, ``dir/name.ext`` with a known extension
code_symbol     ```backticked```, ``call()``, ``dotted.name``, ``snake_case``, ``CamelCase``, ``CONST_NAME``
quoted          ``'...'`` or ``"..."`` (2-80 characters)
number          dates, times, versions, decimals, thousands (``2024-11-21``, ``14:00``, ``1,289.60``)
                and integers of 2+ digits
identifier      tokens mixing letters and digits (``n2``, ``build-4711``, ``GHSA-h75v-3vvj``)
cue             a sentence holding a cue phrase of a plan / relation / constraint / conclusion
                (``CUE_RE``: "so", "plan", "must", "root cause", "need to", "only", ...); its
                *anchors* are the other items inside it
==============  ==========================================================================

An item first written at step t is looked up (case-insensitively, on token
boundaries; numbers without thousands separators) in the *given* text (task,
system prompt, tool definitions), in the carriers of steps < t (there before
the reasoning was written) and in the carriers of steps t..b. Its status, with
every place it was found (``found_in``):

- ``given``: it copies the task, system prompt or tool definitions (not derived state);
- ``copied``: it copies a carrier of an earlier step, e.g. an observation (not derived state);
- ``externalized``: derived, and found in a carrier of steps t..b;
- ``not_externalized``: derived, and in no carrier at or before b.

A cue sentence with derived anchors takes their verdict (``not_externalized``
if any anchor is). One without is judged by its *novel words* (stemmed words
of 4+ letters, not stop or cue words, absent from the given text and earlier
carriers): none -> ``given``/``copied``; fewer than ``min_novel_words`` ->
``minor`` (too little new content to count as derived state); else
``externalized`` when at least ``min_overlap`` of them occur in the carriers of
steps t..b. ``G = 1`` when some item in scope is ``not_externalized``.

A step without reasoning holds no item: it adds no derived state (its
actions and observations still count as carriers), so a boundary whose steps
in scope all lack reasoning is ``G = 0`` (e.g. ``"latest"`` at such a step).

Scope. ``"all"`` (default) takes the reasoning of steps 1..b, the study's
definition read literally ("derived state produced in reasoning up to b");
``"since_code"`` steps k..b after the latest step k <= b that wrote code or a
file (the premise of ``clear_after_code``); ``"latest"`` step b only, a
*proxy* (``SCOPE_NOTES``; the output names it as such). Lexical rules cannot
tell state that was superseded or already acted on from live state, so
``"all"`` marks almost every boundary G=1. On the demo set (193 boundaries,
111 annotated G=1) with the study's carriers: ``"all"`` 99.5 % positive,
Cohen's kappa -0.01 against the annotations (in-sample); ``"latest"`` (proxy)
77 %, 0.28; ``"since_code"`` 95 %, 0.09 (with every carrier kind: 99.5 %,
-0.01; 75 %, 0.33; 95 %, 0.09). Held out (seed 0: 89 boundaries of 12 tasks,
thresholds tuned on the other 13): ``"all"`` kappa 0.00 [0.00, 0.00] (the
tuned labeler calls every boundary G=1), ``"latest"`` 0.30 [0.03, 0.56].

Agreement is reported honestly (:func:`held_out_report`): the thresholds are
tuned over ``TUNING_GRID`` on half of the annotated tasks (a seeded split
stratified by domain, ``interp.data.labels.task_split``) and kappa is reported
on the other, held-out half with a task-bootstrap CI
(``interp.data.labels.held_out_agreement``). The shipped thresholds
(``min_overlap=0.34``, ``min_novel_words=5``) were picked on the whole demo
set, so their whole-set kappa is optimistic; ``default_held_out`` gives them
on the held-out tasks only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, TypedDict

from interp.data.actions import CODE_ARG_KEYS, argument_leaves, writes_code
from interp.data.labels import (
    agreement,
    annotation_labels,
    held_out_agreement,
    labels_csv_text,
    read_labels_csv,
    task_split,
    write_labels_csv,
)
from interp.data.trajectory import Action, Step, Trajectory, load_trajectories
from interp.io import atomic_write_bytes, atomic_write_json
from interp.params import N_BOOT, Integer, Items, Options, Real, param, validate

ITEM_KINDS = ("url", "email", "path", "code_symbol", "quoted", "number", "identifier", "cue")
STATUSES = ("given", "copied", "minor", "externalized", "not_externalized")
SCOPES = ("all", "latest", "since_code")
SCOPE_NOTES = {
    "all": "steps 1..b: the study's definition (derived state produced in reasoning up to b)",
    "latest": "PROXY: step b's reasoning only, not the study's definition (state of earlier steps is ignored)",
    "since_code": "PROXY: steps k..b after the latest code/file write k, not the study's definition",
}
CARRIER_KINDS = ("written_file", "tool_output", "feedback", "tool_argument", "text_action")
STUDY_CARRIERS = ("written_file", "tool_output", "feedback")  # the study's list (guideline, "Carriers")


class TuningGrid(TypedDict):
    """Candidate values of each threshold of :class:`GapLabelerConfig` tuned on held-out tasks."""
    min_overlap: tuple[float, ...]
    min_novel_words: tuple[int, ...]


TUNING_GRID: TuningGrid = {"min_overlap": (0.2, 0.34, 0.5, 0.75), "min_novel_words": (2, 3, 5, 8)}

_EXT = (r"py|pyi|js|ts|tsx|jsx|go|rs|java|rb|php|c|h|cpp|md|rst|txt|csv|tsv|json|jsonl|ya?ml|toml|ini|cfg|env|"
        r"html?|j2|sql|sh|xlsx|xls|docx|pdf|log|lock|xml|conf")
ITEM_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("url", re.compile(r"https?://[^\s'\"<>()\[\]]+[^\s'\"<>()\[\].,;:]")),
    ("email", re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")),
    ("path", re.compile(rf"(?<![\w/.])(?:(?:\.{{0,2}}|~)/|/(?=\w))(?:[\w.-]+/)*[\w.-]*\w|(?<![\w/.])(?:[\w.-]+/){{2,}}[\w.-]*\w|"
                        rf"(?<![\w/])(?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.(?:{_EXT})\b")),
    ("code_symbol", re.compile(r"`([^`\n]{2,80})`|\b([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\((?=[^)]{0,40}\))|"
                               r"\b[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+\b|\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b|"
                               r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")),
    ("quoted", re.compile(r"(?<!\w)'([^'\n]{2,80})'(?!\w)|\"([^\"\n]{2,80})\"|\u2018([^\u2019\n]{2,80})\u2019|"
                          r"\u201c([^\u201d\n]{2,80})\u201d")),
    ("number", re.compile(r"(?<![\w.:])(?<![A-Za-z_]-)(?:\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}(?::\d{2})?|\d{1,3}(?:,\d{3})+(?:\.\d+)?|"
                          r"\d+(?:\.\d+)+|\d+/\d+|\d{2,})%?(?![\d])")),
    ("identifier", re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*\b")),
)
CUE_RE = re.compile(
    r"\b(?:so|therefore|thus|hence|means?|because|since|root cause|explains?|impl(?:y|ies)|confirm(?:s|ed)?|"
    r"conclu(?:de|sion)|the fix|the answer|only|must|cannot|can't|never|at most|at least|rather than|instead|"
    r"plan|next|need(?:s)? to|i need|should|will|i'll|going to|let me|first|then|before|after|decid(?:e|ed)|"
    r"choose|prefer|constraint|requires?|depends?|if|unless|which)\b", re.I)
STOPWORDS = frozenset("""
about above after again against also although among another anything around away back because been before
being below between both cannot could does doing done down during each either else even every from further
have having here itself just least less many more most much must need needs neither never none only other
otherwise over same shall should since some still such than that their them then there these they this
those though through thus together under unless until upon very want were what when where whether which
while whom whose will with within without would your yours into onto once like maybe whole
""".split())
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


@dataclass(frozen=True)
class Carrier:
    """One piece of materialized state: ``kind`` at step ``step`` (1-based), ``where`` in the step."""

    step: int
    kind: str
    where: str
    text: str


@dataclass(frozen=True)
class Item:
    """One derived-state candidate from the reasoning of ``step`` (1-based), block ``block``."""

    kind: str
    text: str
    step: int
    block: int
    anchors: tuple[Item, ...] = ()  # cue items: the specific items inside the sentence


@dataclass
class ItemEvidence:
    """Where an item was looked for and found: ``found_in`` lists ``{"source", "step", "where"}`` records."""

    kind: str
    text: str
    step: int
    block: int
    status: str
    found_in: list[dict[str, Any]] = field(default_factory=list)
    novel_words: list[str] = field(default_factory=list)  # cue items only
    overlap: float | None = None  # cue items only: fraction of novel words found in carriers t..b


@dataclass
class BoundaryLabel:
    """The rule label of one boundary with the evidence of every item in scope."""

    task_id: str
    domain: str
    after_step: int
    externalization_gap: int
    items: list[ItemEvidence]
    reference_gap: int | None = None

    def counts(self) -> dict[str, int]:
        """Number of items per status (every status present)."""
        out = dict.fromkeys(STATUSES, 0)
        for it in self.items:
            out[it.status] += 1
        return out

    def missing(self) -> list[ItemEvidence]:
        """Items of the scope that are derived and not externalized."""
        return [it for it in self.items if it.status == "not_externalized"]


@dataclass(frozen=True)
class GapLabelerConfig:
    """Rule-based G labels (``interp externalize label``): the labeler's settings (see the module docstring) and
    the seed of the tuning/evaluation task split and of the bootstrap, with its resamples for the kappa CIs
    (``n_boot`` 0: no CIs); validated on construction."""

    analysis: ClassVar[str] = "externalization_labels"  # the demo's step; its labels feed ``externalization``
    precision: ClassVar[str | None] = None  # reads text; runs no model

    scope: str = param("all", Options(SCOPES), "Derived-state scope: all, latest or since_code.")
    min_overlap: float = param(0.34, Real(0, 1, low_open=True), "Overlap with a carrier that counts as "
                               "externalized (0 would count every novel cue).", "fraction")
    min_novel_words: int = param(5, Integer(0), "Novel words a cue needs.", "words")
    kinds: tuple[str, ...] = param(ITEM_KINDS, Items(Options(ITEM_KINDS), min_len=0, unique=True),
                                   "Item kinds extracted (comma list).")
    carriers: tuple[str, ...] = param(STUDY_CARRIERS, Items(Options(CARRIER_KINDS), unique=True),
                                      "Carrier kinds that externalize (comma list).")
    seed: int = param(0, Integer(0), "Seed of the tuning/evaluation task split and of the bootstrap.")
    n_boot: int = param(N_BOOT, Integer(0), "Task-bootstrap resamples of the kappa CIs (0: none).")

    def __post_init__(self) -> None:
        validate(self)


def _normalize(text: str) -> str:
    return _THOUSANDS.sub("", text.lower())


def step_carriers(step: Step, t: int) -> list[Carrier]:
    """The carriers step ``t`` (1-based) materialized: its action's arguments or text, and its observations."""
    out: list[Carrier] = []
    if step.action.is_text:
        if step.action.text:
            out.append(Carrier(t, "text_action", "action.text", step.action.text))
    else:
        for k, call in enumerate(step.action.calls):
            prefix = f"action.calls[{k}]" if step.action.parallel else "action"
            for path, text in argument_leaves(dict(call.arguments)):
                written = path.split(".")[0].split("[")[0] in CODE_ARG_KEYS and writes_code(
                    Step("", Action(calls=(call,)), None))
                out.append(Carrier(t, "written_file" if written else "tool_argument",
                                   f"{prefix}.arguments.{path}", text))
    kind = "feedback" if step.action.is_text else "tool_output"
    obs = step.observations
    for k, text in enumerate(obs):
        out.append(Carrier(t, kind, "observation" + (f"[{k}]" if len(obs) > 1 else ""), text))
    return out


def _sentence_spans(block: str) -> list[tuple[int, int]]:
    spans, pos = [], 0
    for m in _SENTENCE_END.finditer(block):
        spans.append((pos, m.start()))
        pos = m.end()
    spans.append((pos, len(block)))
    return [(a, b) for a, b in spans if block[a:b].strip()]


def extract_items(block: str, step: int, block_index: int, kinds: Iterable[str] = ITEM_KINDS) -> list[Item]:
    """Derived-state candidates of one reasoning block, in kind order (an earlier kind claims its text)."""
    kinds = set(kinds)
    found: list[tuple[int, Item]] = []
    masked = block
    for kind, pattern in ITEM_PATTERNS:
        pieces, pos = [], 0  # the claimed text blanked in one pass: linear in the block, however many matches
        for m in pattern.finditer(masked):
            text = next((g for g in m.groups() if g), m.group(0)) if m.groups() else m.group(0)
            if kind in kinds and len(text.strip()) >= 2:
                found.append((m.start(), Item(kind, text.strip(), step, block_index)))
            pieces += [masked[pos:m.start()], " " * (m.end() - m.start())]
            pos = m.end()
        masked = "".join(pieces) + masked[pos:]
    items = [it for _, it in found]
    if "cue" in kinds:
        for a, b in _sentence_spans(block):
            sentence = block[a:b].strip()
            if CUE_RE.search(sentence):
                anchors = tuple(it for pos, it in found if a <= pos < b)
                items.append(Item("cue", sentence, step, block_index, anchors))
    return items


def _find(needle: str, hay: str, numeric: bool) -> bool:
    edge = r"\d" if numeric else r"\w"
    return re.search(rf"(?<!{edge}){re.escape(needle)}(?!{edge})", hay) is not None


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def _words(text: str) -> set[str]:
    """Crudely stemmed content-word candidates (4+ letters) of a text."""
    return {_stem(w.strip("'-")) for w in _WORD.findall(text.lower())}


@dataclass
class Sources:
    """Normalized texts and word sets of a trajectory's given text and carriers."""

    given: list[tuple[str, str, set[str]]]  # (where, normalized text, words)
    carriers: list[tuple[Carrier, str, set[str]]]  # (carrier, normalized text, words)
    # (needle, numeric) -> (indices into given, into carriers) holding it: every boundary in scope re-judges the
    # same items, and one search per item and text keeps a huge trajectory linear in its boundaries
    hits: dict[tuple[str, bool], tuple[frozenset[int], frozenset[int]]] = field(default_factory=dict, repr=False)

    def where(self, needle: str, numeric: bool) -> tuple[frozenset[int], frozenset[int]]:
        """Which given texts and which carriers hold ``needle`` as a whole token (searched once per trajectory)."""
        key = (needle, numeric)
        if key not in self.hits:
            self.hits[key] = (frozenset(i for i, (_, text, _) in enumerate(self.given) if _find(needle, text, numeric)),
                              frozenset(i for i, (_, text, _) in enumerate(self.carriers)
                                        if _find(needle, text, numeric)))
        return self.hits[key]

    @classmethod
    def of(cls, traj: Trajectory, kinds: Iterable[str] = STUDY_CARRIERS) -> Sources:
        """Index every step's carriers of ``kinds`` (all steps: each item only looks at those up to its boundary)."""
        given_texts = [("task", traj.task), ("system_prompt", traj.system_prompt),
                       ("tools", json.dumps([dict(t) for t in traj.tools], ensure_ascii=False))]
        kinds = set(kinds)
        carriers = [c for t, step in enumerate(traj.steps, start=1) for c in step_carriers(step, t) if c.kind in kinds]
        return cls([(w, _normalize(x), _words(x)) for w, x in given_texts],
                   [(c, _normalize(c.text), _words(c.text)) for c in carriers])


def _cue_words(sentence: str) -> set[str]:
    return {_stem(w.strip("'-")) for w in _WORD.findall(sentence.lower())
            if w not in STOPWORDS and not CUE_RE.fullmatch(w)}


def _judge_cue(item: Item, ev: ItemEvidence, sources: Sources, before: list[tuple[Carrier, str, set[str]]],
               window: list[tuple[Carrier, str, set[str]]], after_step: int, config: GapLabelerConfig) -> ItemEvidence:
    """A cue sentence: decided by its derived anchors when it has any, else by its novel content words."""
    anchors = [judge_item(a, sources, after_step, config) for a in item.anchors]
    derived = [a for a in anchors if a.status in ("externalized", "not_externalized")]
    if derived:
        ev.found_in = [{"source": "anchor", "step": a.step, "where": f"{a.kind}:{a.text}", "status": a.status}
                       for a in derived]
        ev.status = "not_externalized" if any(a.status == "not_externalized" for a in derived) else "externalized"
        return ev
    given_words = set().union(*(w for _, _, w in sources.given))
    known = given_words.union(*(w for _, _, w in before))
    words = _cue_words(item.text)
    novel = sorted(words - known)
    ev.novel_words = novel
    if not novel:
        ev.status = "given" if words <= given_words else "copied"
        return ev
    found: dict[tuple[int, str, str], list[str]] = {}
    for c, _, cw in window:
        for w in novel:
            if w in cw:
                found.setdefault((c.step, c.where, c.kind), []).append(w)
    hit = set().union(*found.values()) if found else set()
    ev.overlap = round(len(hit) / len(novel), 4)
    ev.found_in = [{"source": kind, "step": step, "where": where, "words": ws}
                   for (step, where, kind), ws in found.items()]
    ev.status = cue_status(ev, config)
    return ev


def cue_status(ev: ItemEvidence, config: GapLabelerConfig) -> str:
    """The thresholds' verdict on a cue judged by novel words (other items: their status, unchanged)."""
    if ev.kind != "cue" or not ev.novel_words or ev.overlap is None:
        return ev.status
    if len(ev.novel_words) < config.min_novel_words:
        return "minor"
    return "externalized" if ev.overlap >= config.min_overlap else "not_externalized"


def judge_item(item: Item, sources: Sources, after_step: int, config: GapLabelerConfig) -> ItemEvidence:
    """Status of ``item`` at boundary ``after_step`` and every place it was found (see the module docstring)."""
    ev = ItemEvidence(item.kind, item.text, item.step, item.block, "not_externalized")
    if item.kind == "cue":
        before = [(c, text, words) for c, text, words in sources.carriers if c.step < item.step]
        window = [(c, text, words) for c, text, words in sources.carriers if item.step <= c.step <= after_step]
        return _judge_cue(item, ev, sources, before, window, after_step, config)
    in_given, in_carriers = sources.where(_normalize(item.text), item.kind == "number")
    given = [{"source": "given", "step": None, "where": sources.given[i][0]} for i in sorted(in_given)]
    held = [sources.carriers[i][0] for i in sorted(in_carriers)]
    earlier = [{"source": c.kind, "step": c.step, "where": c.where} for c in held if c.step < item.step]
    later = [{"source": c.kind, "step": c.step, "where": c.where} for c in held if item.step <= c.step <= after_step]
    ev.found_in = given + earlier + later
    if given:
        ev.status = "given"
    elif earlier:
        ev.status = "copied"
    elif later:
        ev.status = "externalized"
    return ev


def scope_steps(traj: Trajectory, after_step: int, scope: str) -> range:
    """Steps whose reasoning holds the boundary's derived state under ``scope``."""
    if scope == "latest":
        return range(after_step, after_step + 1)
    if scope == "since_code":
        k = next((t for t in range(after_step, 0, -1) if writes_code(traj.steps[t - 1])), 1)
        return range(k, after_step + 1)
    return range(1, after_step + 1)


def label_gap(traj: Trajectory, after_step: int, config: GapLabelerConfig = GapLabelerConfig(),
              sources: Sources | None = None) -> BoundaryLabel:
    """Rule label G of boundary ``after_step`` with the evidence of every item in scope."""
    if not 1 <= after_step <= traj.n_steps:
        raise ValueError(f"{traj.task_id}: boundary {after_step} out of range 1..{traj.n_steps}")
    sources = sources or Sources.of(traj, config.carriers)
    seen: set[tuple[str, str]] = set()
    evidence = []
    for t in scope_steps(traj, after_step, config.scope):
        for k, block in enumerate(traj.steps[t - 1].blocks):
            for item in extract_items(block, t, k, config.kinds):
                key = (item.kind, _normalize(item.text))
                if key in seen:
                    continue
                seen.add(key)
                evidence.append(judge_item(item, sources, after_step, config))
    gap = int(any(e.status == "not_externalized" for e in evidence))
    ann = traj.annotation(after_step)
    return BoundaryLabel(traj.task_id, traj.domain, after_step, gap, evidence,
                         ann.externalization_gap if ann else None)


def label_gaps(trajectories: Iterable[Trajectory],
               config: GapLabelerConfig = GapLabelerConfig()) -> list[BoundaryLabel]:
    """Rule labels of every boundary 1..n_steps of every trajectory."""
    out: list[BoundaryLabel] = []
    for traj in trajectories:
        sources = Sources.of(traj, config.carriers)
        out.extend(label_gap(traj, b, config, sources) for b in range(1, traj.n_steps + 1))
    return out


def tuning_grid(base: GapLabelerConfig = GapLabelerConfig()) -> list[GapLabelerConfig]:
    """``base`` with every threshold pair of ``TUNING_GRID`` (scope, kinds and carriers kept)."""
    return [replace(base, min_overlap=o, min_novel_words=n)
            for o in TUNING_GRID["min_overlap"] for n in TUNING_GRID["min_novel_words"]]


def grid_labeler(trajectories: list[Trajectory]) -> Callable[[GapLabelerConfig], dict[tuple[str, int], int]]:
    """A ``config -> {(task_id, after_step): G}`` function for threshold grids: items are judged once per
    (scope, kinds, carriers) and only the thresholds' verdict on cues (:func:`cue_status`) is redone."""
    judged: dict[tuple[Any, ...], list[BoundaryLabel]] = {}

    def label(config: GapLabelerConfig) -> dict[tuple[str, int], int]:
        key = (config.scope, config.kinds, config.carriers)
        if key not in judged:
            judged[key] = label_gaps(trajectories, config)
        return {(lab.task_id, lab.after_step): int(any(cue_status(it, config) == "not_externalized"
                                                       for it in lab.items)) for lab in judged[key]}
    return label


def held_out_report(trajectories: list[Trajectory], reference: dict[tuple[str, int], int],
                    config: GapLabelerConfig = GapLabelerConfig(), seed: int = 0,
                    *, n_boot: int) -> dict[str, Any]:
    """Thresholds tuned on half the tasks (split by task, stratified by domain), kappa with CI on the other half."""
    tasks = sorted({k[0] for k in reference})
    split = task_split(tasks, {t.task_id: t.domain for t in trajectories}, seed=seed)
    return held_out_agreement(grid_labeler(trajectories), tuning_grid(config), reference, split,
                              default=config, n_boot=n_boot, seed=seed)


LABEL_COLUMNS = ["task_id", "after_step", "externalization_gap", "reference_gap",
                 *(f"n_{status}" for status in STATUSES), "missing"]
EVIDENCE_COLUMNS = ["task_id", "after_step", "kind", "text", "step", "block", "status", "overlap", "found_in"]
LABELS_SCHEMA = {
    "config": "GapLabelerConfig of the run: scope, min_overlap, min_novel_words, item kinds, carrier kinds, seed, n_boot",
    "scope_note": "what the scope means; 'PROXY: ...' when it is not the study's definition (steps 1..b)",
    "reference": "where reference labels came from: 'annotations', a CSV path, or null",
    "agreement": "rule labels vs reference on boundaries with both: n, Cohen's kappa (sklearn), accuracy, "
                 "confusion [[ref0-pred0, ref0-pred1], [ref1-pred0, ref1-pred1]], positive rates; in-sample: "
                 "the shipped thresholds were picked on the demo annotations",
    "held_out": "{labeler: report} (null without reference labels of two tasks or more): 'externalization_gap' (this labeler, thresholds "
                "of TUNING_GRID) and any other rule labeler passed in (e.g. 'future_necessity', probes.targets, "
                "reference = annotations). Report (interp.data.labels.held_out_agreement): tune_tasks, eval_tasks "
                "(disjoint, split by task, stratified by domain), grid [{config, tune_kappa}], chosen config, tune "
                "(its agreement on the tuning tasks), held_out (its agreement on the evaluation tasks with kappa_ci: "
                "95% task-bootstrap CI), default and default_held_out (the shipped config on the evaluation tasks)",
    "agreement_by_domain": "the same per trajectory domain",
    "boundaries": "one record per boundary: task_id, domain, after_step, externalization_gap (rule G, 0/1), "
                  "reference_gap (0/1 or null), counts (items per status), items (evidence)",
    "boundaries[].items": "kind, text, step (1-based step of the reasoning), block, status "
                          "(given|copied|minor|externalized|not_externalized), found_in [{source (given, a carrier "
                          "kind, or anchor), step, where, words (cue items)}], novel_words and overlap (cue items)",
    "externalization_labels.csv": "one row per boundary: task_id, after_step, externalization_gap (rule G), "
                                  "reference_gap, n_<status> item counts, missing (the first 8 missing items)",
    "externalization_evidence.csv": "one row per item: task_id, after_step, kind, text, step, block, status, "
                                    "overlap, found_in (source@step:where; ...)",
}


def _reference(trajectories: list[Trajectory],
               labels_csv: Path | None) -> tuple[dict[tuple[str, int], int], str | None]:
    if labels_csv is not None:
        return read_labels_csv(labels_csv, "externalization_gap", trajectories), str(labels_csv)
    ann = annotation_labels(trajectories, "externalization_gap")
    return ann, "annotations" if ann else None


# Another rule labeler evaluated the same way: (config -> labels, grid, shipped config, annotation field of its reference)
OtherLabeler = tuple[Callable[[Any], Mapping[tuple[str, int], int]], list[Any], Any, str]


def label_command(trajectories: Path, out: Path, labels_csv: Path | None = None,
                  config: GapLabelerConfig = GapLabelerConfig(),
                  others: Mapping[str, OtherLabeler] | None = None) -> dict[str, Any]:
    """``interp externalize label``: rule labels with evidence, and agreement with reference labels when present.

    Writes ``externalization_labels.json`` (schema, agreement, held-out agreement
    of this and the ``others`` labelers, every boundary with its evidence),
    ``externalization_labels.csv`` (one row per boundary) and
    ``externalization_evidence.csv`` (one row per item); returns the agreement summary.
    """
    trajs = load_trajectories(trajectories, allow_control_tokens=True)  # read as text, never rendered
    reference, ref_source = _reference(trajs, labels_csv)
    seed, n_boot = config.seed, config.n_boot
    held_out: dict[str, Any] | None = None
    if len({k[0] for k in reference}) >= 2:  # a split needs a tuning and an evaluation task
        held_out = {"externalization_gap": held_out_report(trajs, reference, config, seed, n_boot=n_boot)}
        strata = {t.task_id: t.domain for t in trajs}
        for name, (label_fn, grid, default, field_name) in (others or {}).items():
            ref = annotation_labels(trajs, field_name)
            if len({k[0] for k in ref}) >= 2:
                split = task_split(sorted({k[0] for k in ref}), strata, seed=seed)
                held_out[name] = held_out_agreement(label_fn, grid, ref, split, default, n_boot=n_boot, seed=seed)
    labels = label_gaps(trajs, config)
    for lab in labels:
        lab.reference_gap = reference.get((lab.task_id, lab.after_step))
    predicted = {(lab.task_id, lab.after_step): lab.externalization_gap for lab in labels}
    overall = agreement(predicted, reference)
    by_domain = {}
    for domain in sorted({lab.domain for lab in labels}):
        keys = {(lab.task_id, lab.after_step) for lab in labels if lab.domain == domain}
        by_domain[domain] = agreement({k: predicted[k] for k in keys},
                                      {k: v for k, v in reference.items() if k in keys})
    doc = {
        "schema": LABELS_SCHEMA, "trajectories": str(trajectories), "config": asdict(config),
        "scope_note": SCOPE_NOTES[config.scope],
        "reference": ref_source, "agreement": overall, "agreement_by_domain": by_domain, "held_out": held_out,
        "n_boundaries": len(labels), "rule_positive_rate": round(sum(predicted.values()) / max(len(labels), 1), 4),
        "boundaries": [{"task_id": lab.task_id, "domain": lab.domain, "after_step": lab.after_step,
                        "externalization_gap": lab.externalization_gap, "reference_gap": lab.reference_gap,
                        "counts": lab.counts(), "items": [asdict(it) for it in lab.items]} for lab in labels],
    }
    label_rows = [{"task_id": lab.task_id, "after_step": lab.after_step, "externalization_gap": lab.externalization_gap,
                   "reference_gap": "" if lab.reference_gap is None else lab.reference_gap,
                   **{f"n_{s}": n for s, n in lab.counts().items()},
                   "missing": " | ".join(f"{it.kind}:{it.text[:60]}" for it in lab.missing()[:8])} for lab in labels]
    evidence_rows = [{"task_id": lab.task_id, "after_step": lab.after_step, "kind": it.kind, "text": it.text,
                      "step": it.step, "block": it.block, "status": it.status, "overlap": it.overlap,
                      "found_in": "; ".join(f"{f['source']}@{f['step']}:{f['where']}" for f in it.found_in)}
                     for lab in labels for it in lab.items]
    out = Path(out)
    atomic_write_bytes(out / "externalization_evidence.csv", labels_csv_text(evidence_rows, EVIDENCE_COLUMNS).encode())
    write_labels_csv(out / "externalization_labels.csv", label_rows, "externalization_gap", LABEL_COLUMNS[3:])
    atomic_write_json(out / "externalization_labels.json", doc)
    return {"n_boundaries": len(labels), "rule_positive_rate": doc["rule_positive_rate"], "reference": ref_source,
            "agreement": overall, "scope_note": doc["scope_note"], "held_out": held_out}
