"""Writing figures: HTML sharing one plotly.js beside them (offline, no CDN) and PNG through kaleido + Chromium.

Every HTML figure loads ``plotly.min.js`` from its own directory
(``include_plotlyjs="directory"``), written once by ``write_plotlyjs``: eight
figures cost one 4.6 MB library, not eight.

kaleido 1.x renders in a Chromium it drives through ``choreographer``, which
looks, in order, at a browser kaleido downloaded itself, ``$BROWSER_PATH``,
``chromium``/``chromium-browser``/``google-chrome`` on ``$PATH`` and the usual
install paths. ``find_chromium`` asks that same search, so "found here" means
"kaleido will find it too". Nothing here touches the network: the page kaleido
renders loads plotly.js from the installed plotly package.

kaleido can evaluate its export page before the page's script has loaded (a
busy machine: ``ReferenceError: kaleido_scopes is not defined``); that one
known start-up error is retried (``KALEIDO_START_RETRIES`` times, a new
browser each time) and the retry is said on stderr; any other error is not.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TypeVar

import plotly.graph_objects as go
import plotly.io as pio

from interp.io import atomic_path, atomic_write_bytes

PLOTLY_JS = "plotly.min.js"  # the name include_plotlyjs="directory" loads
PNG_WIDTH = 1100  # CSS pixels; scale 2 gives print resolution
PNG_SCALE = 2
DEFAULT_HEIGHT = 550
KALEIDO_NOT_LOADED = "kaleido_scopes is not defined"  # the export page evaluated before its script loaded
KALEIDO_START_RETRIES = 2
KALEIDO_TIMEOUT_S = 600  # per figure (kaleido: 90 s); a loaded 2-core machine can take minutes to render one
T = TypeVar("T")

NO_CHROMIUM = (
    "PNG export skipped: kaleido needs a Chromium/Chrome browser and none was found "
    "(looked at $BROWSER_PATH, chromium, chromium-browser, google-chrome on $PATH and the usual install paths). "
    "Install one with `apt-get install chromium` (Debian/Ubuntu) or point BROWSER_PATH at a Chrome binary; "
    "the HTML figures were written."
)


def find_chromium() -> str | None:
    """Path of the Chromium kaleido would use, or None when there is none (PNG export impossible)."""
    from choreographer.browsers.chromium import Chromium

    path = Chromium.find_browser(skip_local=False)
    return path if path and os.path.isfile(path) and os.access(path, os.X_OK) else None


def write_plotlyjs(out_dir: Path) -> Path:
    """Write the installed plotly.js as out_dir/plotly.min.js (the one copy the HTML figures there load)."""
    from plotly.offline import get_plotlyjs

    path = Path(out_dir) / PLOTLY_JS
    data = get_plotlyjs().encode("utf-8")
    if not path.is_file() or path.stat().st_size != len(data) or path.read_bytes() != data:
        atomic_write_bytes(path, data)
    return path


def write_html(fig: go.Figure, path: Path) -> Path:
    """Write fig as an HTML file that loads plotly.min.js from its directory (written here too), atomically."""
    write_plotlyjs(path.parent)
    html = fig.to_html(include_plotlyjs="directory", full_html=True, div_id=path.stem,
                       config={"displaylogo": False})
    atomic_write_bytes(path, html.encode("utf-8"))
    return path


def write_pngs(figures: dict[str, go.Figure], out_dir: Path) -> tuple[list[Path], str | None]:
    """Render all figures to out_dir/<name>.png with one browser start; return (paths, None) or ([], why not)."""
    if not figures:
        return [], None
    browser = find_chromium()
    if browser is None:
        bad = os.environ.get("BROWSER_PATH")
        return [], NO_CHROMIUM + (f" (BROWSER_PATH={bad} is set but is not an executable file.)" if bad else "")
    final = [out_dir / f"{name}.png" for name in figures]
    try:
        kaleido_call(lambda: _render_pngs(figures, final))
    except Exception as exc:  # a browser that starts but fails (missing libraries, sandbox) must not lose the HTML
        return [], f"PNG export failed in {browser}: {type(exc).__name__}: {exc}; the HTML figures were written."
    return final, None


def kaleido_call(render: Callable[[], T]) -> T:
    """``render()`` (a kaleido call), retried with a new browser when kaleido evaluated its page before the page
    loaded (the one known start-up error, said on stderr); any other error propagates at once."""
    retries = 0
    while True:
        try:
            return render()
        except Exception as exc:
            if KALEIDO_NOT_LOADED not in str(exc) or retries == KALEIDO_START_RETRIES:
                raise
            retries += 1
            print(f"kaleido evaluated its page before it loaded ({KALEIDO_NOT_LOADED}); "
                  f"retrying with a new browser ({retries}/{KALEIDO_START_RETRIES})", file=sys.stderr)


def full_layout(fig: go.Figure) -> go.Figure:
    """Plotly's full figure (every default resolved: ranges, margins, fonts), computed by kaleido in Chromium."""
    return kaleido_call(lambda: fig.full_figure_for_development(warn=False))


def _render_pngs(figures: dict[str, go.Figure], final: list[Path]) -> None:
    """One kaleido call for every figure; each PNG renamed into place only when all were rendered."""
    import kaleido

    with ExitStack() as stack:
        temporary = [stack.enter_context(atomic_path(path)) for path in final]
        specs = [{"fig": fig, "path": tmp, "topojson": pio.defaults.topojson,
                  "opts": {"format": "png", "width": PNG_WIDTH, "height": fig.layout.height or DEFAULT_HEIGHT,
                           "scale": PNG_SCALE}} for fig, tmp in zip(figures.values(), temporary)]
        kopts = {k: getattr(pio.defaults, k) for k in ("plotlyjs", "mathjax", "headers") if getattr(pio.defaults, k)}
        kopts["timeout"] = KALEIDO_TIMEOUT_S
        # kaleido directly, not pio.write_images: plotly drops the per-figure errors kaleido returns (it deletes a
        # failed figure's file and goes on), so a render that failed under load surfaced as a missing file
        kaleido.write_fig_from_object_sync(specs, kopts=kopts, cancel_on_error=True)
