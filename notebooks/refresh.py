"""Execute every notebook in notebooks/ and keep its outputs small enough to commit and readable on a code host.

    python notebooks/refresh.py                 # all notebooks (make notebooks)
    python notebooks/refresh.py 01_quickstart   # the ones named

Runs each notebook top to bottom with nbclient in this interpreter's kernel
with the model the notebook defaults to (SmolLM2), so the committed numbers are
the ones a reader who runs it gets (``INTERP_NB_MODEL`` overrides it for a
quick local check; tests/notebooks refuses committed outputs of another model),
then for every plotly figure output adds a static PNG
(``image/png`` through kaleido, which code hosts display; needs Chromium) and
drops the HTML/JavaScript bundles (the inlined plotly.js is megabytes; the
plotly JSON stays for Jupyter). Widget state and execution timing metadata are
removed. tests/notebooks/test_notebooks.py checks the committed result.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
PLOTLY_MIME = "application/vnd.plotly.v1+json"
MAX_OUTPUT = 100_000  # bytes of one output's text bundle kept; larger HTML/JS bundles are dropped
PNG_WIDTH, PNG_SCALE = 900, 1


def slim(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Add a PNG beside each plotly figure output, drop big HTML/JS bundles, widget state and timing metadata."""
    import plotly.io as pio

    from interp.reporting.figures.export import kaleido_call

    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if PLOTLY_MIME in data and "image/png" not in data:
                fig = pio.from_json(json.dumps(data[PLOTLY_MIME]))
                png = kaleido_call(lambda: fig.to_image(format="png", width=PNG_WIDTH,  # retried once if kaleido's
                                                        height=fig.layout.height or 500,  # page was not ready
                                                        scale=PNG_SCALE))
                data["image/png"] = base64.b64encode(png).decode()
            for mime in ("text/html", "application/javascript"):
                if mime in data and (PLOTLY_MIME in data or len(json.dumps(data[mime])) > MAX_OUTPUT):
                    del data[mime]
            if out.get("output_type") in ("display_data", "execute_result") and not data:
                continue  # e.g. the plotly.js loader of the notebook renderer: nothing left to show
            kept.append(out)
        cell.outputs = kept
    return nb


def refresh(path: Path) -> None:
    """Execute one notebook in a temporary working directory and write it back with slim outputs."""
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as cwd:
        NotebookClient(nb, kernel_name="python3", timeout=7200, resources={"metadata": {"path": cwd}}).execute()
    nbformat.validate(nb)
    raw = path.with_name(path.stem + ".executed.ipynb")  # kept until slimmed: a failed PNG export loses no run
    nbformat.write(nb, raw)
    nbformat.write(slim(nb), path)
    raw.unlink()
    print(f"{path.name}: {path.stat().st_size / 1024:.0f} KB", flush=True)


def main(names: list[str]) -> None:
    """Refresh the named notebooks (all when none) with a python3 kernel that is this interpreter."""
    from ipykernel.kernelspec import install

    os.environ.pop("INTERP_NB_MODEL", None)  # each notebook's own default: what a reader runs
    paths = [HERE / f"{n.removesuffix('.ipynb')}.ipynb" for n in names] or sorted(HERE.glob("*.ipynb"))
    with tempfile.TemporaryDirectory() as prefix:
        install(kernel_name="python3", prefix=prefix)
        os.environ["JUPYTER_PATH"] = str(Path(prefix) / "share" / "jupyter")
        for path in paths:
            refresh(path)


if __name__ == "__main__":
    main(sys.argv[1:])
