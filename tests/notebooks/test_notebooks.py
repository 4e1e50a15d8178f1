"""The exploratory notebooks: committed with small outputs (readable on a code host), and each runs top to
bottom with figures. ``make notebooks`` (notebooks/refresh.py) re-executes them and slims the outputs.

Execution uses nbclient with a ``python3`` kernelspec written for this interpreter
(so the kernel is this venv's Python whatever ``jupyter kernelspec list`` says),
``INTERP_NB_MODEL=tiny-qwen3.5`` (the notebooks default to SmolLM2) and one
thread per kernel (xdist runs two notebooks on two cores). The working directory
is a temporary folder: the notebooks find the repository themselves.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = {"01_quickstart.ipynb", "02_future_necessity_probes.ipynb", "03_kl_repair_patching.ipynb",
            "04_externalization_and_interventions.ipynb", "05_public_api.ipynb"}
PLOTLY_MIME = "application/vnd.plotly.v1+json"
# The expected notebooks and any other on disk: a missing one fails its read below, a new one is checked too.
NOTEBOOKS = sorted({ROOT / "notebooks" / name for name in EXPECTED} | set((ROOT / "notebooks").glob("*.ipynb")))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_with_small_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    missing = [i for i, cell in enumerate(code) if cell.get("execution_count") is None]
    assert not missing, f"{path.name}: code cells {missing} have no outputs; run `make notebooks`"
    assert "widgets" not in nb.metadata, f"{path.name}: widget state in the notebook metadata"
    big = [(i, mime) for i, cell in enumerate(code) for out in cell.get("outputs", [])
           for mime, value in out.get("data", {}).items() if mime != "image/png" and len(json.dumps(value)) > 100_000]
    assert not big, f"{path.name}: outputs over 100 kB (inlined plotly.js?): {big}; run `make notebooks`"
    plotly = [out for cell in code for out in cell.get("outputs", []) if PLOTLY_MIME in out.get("data", {})]
    assert plotly and all("image/png" in out["data"] for out in plotly), f"{path.name}: a figure without its PNG"
    assert path.stat().st_size < 3 * 2 ** 20


# An absolute path of some machine (POSIX homes, work and temp folders, macOS, Windows drives) in an output.
MACHINE_PATH = re.compile(r"(?<![\w.])(?:/(?:work|home|root|tmp|Users|private|var/folders|mnt|opt|srv)/|[A-Za-z]:\\)")
DEFAULT_MODEL = re.compile(r'os\.environ\.get\("INTERP_NB_MODEL", "([^"]+)"\)')


def _output_text(nb) -> str:
    """Every text a reader sees in the committed outputs (streams, text bundles, errors), PNG bytes left out."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append("".join(out.get("text", "")))
            parts += ["".join(v) if isinstance(v, list) else json.dumps(v)
                      for mime, v in out.get("data", {}).items() if mime != "image/png"]
            parts += out.get("traceback", [])
    return "\n".join(parts)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_outputs_hold_no_machine_path(path):
    text = _output_text(nbformat.read(path, as_version=4))
    found = sorted({text[m.start():m.start() + 60].split("\n")[0] for m in MACHINE_PATH.finditer(text)})
    assert not found, f"{path.name}: absolute paths of a machine in the committed outputs: {found}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_outputs_come_from_the_model_the_notebook_defaults_to(path):
    """A reader who runs the notebook as committed gets the numbers shown: outputs made with its default model."""
    nb = nbformat.read(path, as_version=4)
    defaults = {m for cell in nb.cells if cell.cell_type == "code" for m in DEFAULT_MODEL.findall(cell.source)}
    assert len(defaults) == 1, f"{path.name}: one default model expected, found {sorted(defaults)}"
    shown = re.findall(r"^model: (\S+)", _output_text(nb), flags=re.M)
    assert shown == [defaults.pop()], f"{path.name}: outputs made with {shown}; run `make notebooks`"


def test_machine_path_check_can_fail():
    for bad in ("repository: /work/wt/i19", "-> /tmp/interp-nb02-x/store", "C:\\Users\\me", "/home/me/x"):
        assert MACHINE_PATH.search(bad), bad
    for fine in ("<WORK>/store", "data/demo/trajectories.jsonl", "1/2 units", "a/tmp/b"):
        assert not MACHINE_PATH.search(fine), fine


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """A JUPYTER_PATH whose python3 kernelspec runs this interpreter."""
    from ipykernel.kernelspec import install

    prefix = tmp_path_factory.mktemp("kernelspec")
    install(kernel_name="python3", prefix=str(prefix))
    spec = json.loads((prefix / "share" / "jupyter" / "kernels" / "python3" / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    return {"JUPYTER_PATH": str(prefix / "share" / "jupyter"), "INTERP_NB_MODEL": "tiny-qwen3.5",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}


def _figure_outputs(cell) -> int:
    return sum(1 for out in cell.get("outputs", []) if out.get("output_type") in ("display_data", "execute_result")
               and (PLOTLY_MIME in out.get("data", {}) or "text/html" in out.get("data", {})))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, kernel_env, tmp_path, monkeypatch):
    from jupyter_client.kernelspec import KernelSpecManager
    from nbclient import NotebookClient

    for key, value in kernel_env.items():
        monkeypatch.setenv(key, value)
    assert Path(KernelSpecManager().get_kernel_spec("python3").argv[0]) == Path(sys.executable)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name="python3", timeout=600, allow_errors=False,
                            resources={"metadata": {"path": str(tmp_path)}})
    started = time.perf_counter()
    client.execute()  # raises CellExecutionError naming the cell on the first error
    elapsed = time.perf_counter() - started
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [i for i, c in enumerate(code) if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert not errors, f"{path.name}: code cells {errors} raised"
    assert all(c.get("execution_count") for c in code), f"{path.name}: some code cells did not run"
    plotly = sum(1 for c in code for o in c.get("outputs", []) if PLOTLY_MIME in o.get("data", {}))
    assert plotly >= 1 and sum(map(_figure_outputs, code)) >= 1, f"{path.name}: no figure was shown"
    left = sorted(p.name for p in tmp_path.iterdir())
    assert not left, f"{path.name} left files in its working directory: {left}"
    print(f"{path.name}: executed in {elapsed:.1f} s, {plotly} plotly figures")
