"""Adding an analysis, done for real: a throw-away analysis is written into a copy of the repository by editing
exactly the files the documentation's "Adding an analysis" table names, then run through the demo, figures,
tables, report.md (twice: the second run reuses the result) and the discovered common checks of that copy
(nothing patched in memory but the model).

The table is read from the page that documents it, so a page that names too few files (or a registry that needs
one more) fails here: the files the edit touched must be the files the table names.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "contributing.md"  # where "Adding an analysis" and its table live
COPIED = ("interp", "patching", "probes", "tests", "data", "docs", "pyproject.toml", "README.md")

TOY_MODULE = '''
"""The toy analysis: the mean number of steps of the trajectories, scaled (a throw-away analysis).

{table}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from interp.io import atomic_write_json
from interp.params import Real, param, validate
from interp.record import RECORD_FIELDS, record
from interp.schema import Field

FIELDS = (
    Field("mean_steps", "[]", "float", "steps", "mean steps per trajectory, times scale"),
    Field("n_trajectories", "[]", "int", "trajectories", "trajectories read"),
    *RECORD_FIELDS,
)


@dataclass(frozen=True)
class ToyConfig:
    """The toy analysis's settings."""

    analysis: ClassVar[str] = "toy"
    precision: ClassVar[str | None] = None

    scale: float = param(2.0, Real(0, low_open=True), "Factor on the mean number of steps.")

    def __post_init__(self) -> None:
        validate(self)


def toy_document(trajs: list[Any], out: Path, config: ToyConfig) -> dict[str, Any]:
    """Write toy.json."""
    doc = {"mean_steps": config.scale * sum(t.n_steps for t in trajs) / len(trajs), "n_trajectories": len(trajs),
           **record(config)}
    atomic_write_json(out / "toy.json", doc)
    return doc
'''

TOY_FIGURES = '''
"""The toy analysis's figure, table and report section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interp.reporting.ran import setting


def toy_figure(doc: dict[str, Any]) -> Any:
    """One bar."""
    import plotly.graph_objects as go

    return go.Figure(go.Bar(x=["ours"], y=[doc["mean_steps"]]),
                     layout={"title": "Toy analysis", "yaxis_title": "mean steps x scale (steps)"})


def toy_table(doc: dict[str, Any]) -> Any:
    """One row."""
    import pandas as pd

    return pd.DataFrame([("mean steps", f"{doc['mean_steps']:.2f}")], columns=["quantity", "ours"])


def toy_section(doc: dict[str, Any], folder: Path) -> list[str]:
    """One line, its parameter read from the record."""
    return [f"mean steps x {setting(doc, 'scale')} = {doc['mean_steps']:.2f} over {doc['n_trajectories']} "
            "trajectories"]
'''

RECORD = '''    Analysis(
        "toy", "Toy analysis", "toy", "toy.json",
        files=(ResultFile("toy.json", "interp.accounting.toy:FIELDS"),),
        figures=(Figure("fig99_toy", "toy.json", "interp.reporting.figures.toy:toy_figure"),),
        tables=(Table("toy", "toy.json", "interp.reporting.figures.toy:toy_table", "Toy numbers."),),
        section="interp.reporting.figures.toy:toy_section"),
'''

STAGE = '''

def toy(trajs: list[Trajectory], out: Path, config: ToyConfig) -> ToyResult:
    """The toy analysis (toy.json)."""
    from interp.accounting.toy import toy_document

    with writer_lock(out, command="toy"):
        return cast(ToyResult, toy_document(trajs, out, config))
'''

STEP = '''    Step("toy", "toy analysis", analysis("toy").path(),
         lambda ctx, s: toy(ctx.trajs, ctx.out / analysis("toy").folder, _config(ToyConfig, s)),
         lambda ctx: config_dict(ToyConfig(scale=3.0)), model=False),
'''

WRITER = '''

def _write_toy(root: Path, a: Analysis, rng: np.random.Generator, config: Any) -> None:
    from interp.accounting.toy import toy_document

    toy_document([SimpleNamespace(n_steps=int(n)) for n in rng.integers(1, 9, 5)], _mkdir(root / a.folder), config)


WRITERS["toy"] = _write_toy
'''

RUN = '''
import json, sys
from pathlib import Path
from types import SimpleNamespace

import interp
from interp.pipelines import demo, stages

assert interp.__file__.startswith(sys.argv[1]), interp.__file__  # the copy's code, not the checkout's
stages.sensor = lambda spec, *a, **k: SimpleNamespace(spec=spec, revision="rev", dtype="torch.float32",
                                                      device="cpu", kernels=None)
import interp.sensor.kernels.binding as binding
binding.kernels_line = lambda kernels: "stub"
from rich.console import Console

out = Path(sys.argv[2])
steps = tuple(s for s in stages.STEPS if s.name == "toy")
path = demo.run_demo(demo.DemoConfig(out=out, model="stub", png=False), Console(width=300), steps=steps)
doc = json.loads((out / "toy" / "toy.json").read_text())
trajs = stages.demo_trajectories(stages.trajectories(demo.DEMO_TRAJECTORIES), demo.DemoConfig.per_domain)
want = 3.0 * sum(t.n_steps for t in trajs) / len(trajs)
assert abs(doc["mean_steps"] - want) < 1e-12 and doc["config"] == {"scale": 3.0}, doc
assert (out / "figures" / "fig99_toy.html").is_file()
assert f"| mean steps | {want:.2f} |" in (out / "tables" / "toy.md").read_text()
text = path.read_text()
assert "## Toy analysis" in text and f"mean steps x 3.0 = {want:.2f} over {len(trajs)} trajectories" in text, text
again = Console(record=True, width=300)
demo.run_demo(demo.DemoConfig(out=out, model="stub", png=False), again, steps=steps)
assert "toy analysis: reusing" in again.export_text(), again.export_text()  # same settings: the result is reused
print("demo ok")
'''


def _table_files(page: Path) -> list[str]:
    """The file column of the "Adding an analysis" table (first backquoted path of each row)."""
    text = page.read_text()
    section = text[text.index("## Adding an analysis"):]
    section = section[:section.find("\n## ", 3) if "\n## " in section[3:] else len(section)]
    return [m.group(1) for m in re.finditer(r"^\| `([^`]+)`", section, re.M)]


def _matches(pattern: str, path: str) -> bool:
    """Whether ``path`` is the table's ``pattern`` (``<layer>``, ``<analysis>`` and ``<concern>`` stand for a name)."""
    return re.fullmatch(re.sub(r"<[a-z]+>", "[a-z_]+", re.escape(pattern).replace(r"\<", "<").replace(r"\>", ">")),
                        path) is not None


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def _insert_before_close(text: str, opener: str, insert: str) -> str:
    """``insert`` put before the closing parenthesis of the tuple that ``opener`` opens."""
    start = text.index(opener) + len(opener)
    depth, i = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    close = text.rindex("\n", 0, i - 1) + 1
    return text[:close] + insert + text[close:]


def _edit(copy: Path) -> None:
    """The documented edits, file by file."""
    from interp.record import RECORD_FIELDS
    from interp.schema import Field, schema_table

    table = schema_table((Field("mean_steps", "[]", "float", "steps", "mean steps per trajectory, times scale"),
                          Field("n_trajectories", "[]", "int", "trajectories", "trajectories read"), *RECORD_FIELDS))
    (copy / "interp/accounting/toy.py").write_text(TOY_MODULE.replace("{table}", table))
    (copy / "interp/reporting/figures/toy.py").write_text(TOY_FIGURES)
    reg = copy / "interp/reporting/analyses.py"
    reg.write_text(_insert_before_close(reg.read_text(), "ANALYSES: tuple[Analysis, ...] = (", RECORD))
    st = copy / "interp/pipelines/stages.py"
    text = _insert_before_close(st.read_text(), "STEPS: tuple[Step, ...] = (", STEP) + STAGE
    st.write_text(text.replace("\nif TYPE_CHECKING:\n", "\nfrom interp.accounting.toy import ToyConfig\n"
                                                         "from interp.reporting.results import ToyResult\n\n"
                                                         "if TYPE_CHECKING:\n", 1))
    cf = copy / "interp/pipelines/configs.py"
    text = re.sub(r"\)\n\}\)", ", ToyConfig)\n})", cf.read_text(), count=1)  # the last class of CONFIGS' tuple
    assert "ToyConfig)" in text
    cf.write_text(text.replace("\nCONFIGS:", "\nfrom interp.accounting.toy import ToyConfig  # noqa: E402\n\nCONFIGS:", 1))
    fx = copy / "tests/figures/conftest.py"
    fx.write_text(fx.read_text() + WRITER)
    # the typed results are regenerated from the writers' FIELDS, never edited
    subprocess.run([sys.executable, "-m", "interp.reporting.results_gen"], cwd=copy, check=True, timeout=300,
                   env={**os.environ, "PYTHONPATH": str(copy)})


def test_adding_an_analysis_touches_only_the_documented_files_and_runs_everywhere(tmp_path):
    copy = tmp_path / "repo"
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis"))
        else:
            shutil.copy2(src, copy / name)
    before = _hashes(copy)
    _edit(copy)
    after = _hashes(copy)
    touched = sorted(p for p in after if before.get(p) != after[p])
    documented = _table_files(copy / PAGE.relative_to(ROOT))
    unexplained = [p for p in touched if not any(_matches(d, p) for d in documented)]
    unused = [d for d in documented if not any(_matches(d, p) for p in touched) and "cli/" not in d]
    assert not unexplained and not unused, (touched, documented)
    print(f"adding an analysis touched {len(touched)} files: {', '.join(touched)}")

    env = {**os.environ, "PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1"}
    ran = subprocess.run([sys.executable, "-c", textwrap.dedent(RUN), str(copy), str(tmp_path / "out")], cwd=copy,
                         env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0 and "demo ok" in ran.stdout, ran.stdout[-3000:] + ran.stderr[-3000:]
    # the discovered checks of the copy see the new analysis without a list edited: its config's invalid values,
    # its figure and table from the synthetic fixtures, its schema declaration
    checks = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
         "tests/foundation/test_params.py", "tests/figures/test_figures.py", "tests/figures/test_tables.py",
         "tests/reporting/test_schema.py", "tests/reporting/test_results_types.py",
         "-k", "ToyConfig or toy or every_figure_is_made or one_markdown_and_one_latex or schema or typed or result"],
        cwd=copy, env=env, capture_output=True, text=True, timeout=900)
    assert checks.returncode == 0, checks.stdout[-5000:] + checks.stderr[-3000:]
    assert int(re.search(r"(\d+) passed", checks.stdout).group(1)) >= 5, checks.stdout[-2000:]
