"""The labelling page inside a notebook: an IFrame of a running server's URL (token included).

    >>> import interp
    >>> run = interp.start_annotation("runs.jsonl", "labels/alice.csv", "alice", task="g")   # doctest: +SKIP
    >>> run.frame()             # the page in the cell; label with the keyboard   # doctest: +SKIP
    >>> run.stop()              # labels are already on disk (journal + CSV)      # doctest: +SKIP

On a remote kernel (a GPU box, JupyterHub, VS Code Remote) the browser cannot
reach the kernel's 127.0.0.1: with jupyter-server-proxy installed the frame
goes through the Jupyter server (``{base_url}proxy/{port}/``; the page's URLs
are relative, so the prefix is all it needs). Without it, forward the port
(``ssh -L PORT:127.0.0.1:PORT host``) and use ``run.frame(via="direct")``.

Keys and focus. The page's keys (``0``, ``1``, ``j``, ``k``, ...) reach it
only while the frame has the focus; while the notebook has it they are
Jupyter's command-mode shortcuts (``0 0`` restarts the kernel, ``j``/``k``
move between cells). A notebook output cannot, and should not, take those
shortcuts from Jupyter, so the frame's output does what an output may: a small
script gives the frame the focus when it is shown, and a line under the frame
(``HINT``) says "click in the page to label" whenever the focus is outside it
(the page says the same inside the frame). Jupyter runs an output's script
only in a trusted notebook (a cell run in this session is; a notebook opened
from disk is not until trusted; VS Code runs it): without it the line simply
stays shown and nothing takes the focus.

:func:`annotation_iframe` builds the frame for any URL ``interp annotate``
printed. It needs no IPython: the object's ``_repr_html_`` is what Jupyter shows.
The default height (640 px) shows the boundary question: the page opens at the
boundary and keeps the question in view down to a 480 px frame.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from interp.annotation.server import HOST

HINT = ("Click in the page to label: while the notebook has the focus, 0, 1, j and k are Jupyter's own "
        "shortcuts.")
# the output's script: focus the frame when shown; show HINT while the focus is outside the frame
FOCUS_SCRIPT = (
    "(function () { var box = document.currentScript && document.currentScript.parentElement; if (!box) return;"
    " var frame = box.querySelector('iframe'), hint = box.querySelector('.interp-annotation-hint');"
    " function show() { hint.style.visibility = document.activeElement === frame ? 'hidden' : 'visible'; }"
    " frame.addEventListener('load', function () { frame.focus(); show(); });"
    " window.addEventListener('blur', function () { setTimeout(show, 0); });"
    " window.addEventListener('focus', show); document.addEventListener('focusin', show);"
    " frame.focus(); show(); })();"
)


@dataclass(frozen=True)
class AnnotationFrame:
    """An ``<iframe>`` of the labelling page; Jupyter displays it through :meth:`_repr_html_`."""

    url: str
    width: str = "100%"
    height: int = 640

    def _repr_html_(self) -> str:
        """The frame, the focus hint under it and the script that focuses the frame (see the module docstring)."""
        return (f'<div class="interp-annotation"><iframe src="{html.escape(self.url, quote=True)}" '
                f'width="{html.escape(str(self.width), quote=True)}" height="{int(self.height)}" '
                'style="border:1px solid #ccc"></iframe>'
                f'<div class="interp-annotation-hint" style="font-size:90%;color:#8a5a00">{html.escape(HINT)}</div>'
                f"<script>{FOCUS_SCRIPT}</script></div>")


def annotation_iframe(url: str, width: str = "100%", height: int = 640) -> AnnotationFrame:
    """An IFrame of the labelling page for a notebook cell: at ``url`` ``http://127.0.0.1:PORT/?token=...`` or, through
    jupyter-server-proxy, at the path ``{base_url}proxy/PORT/?token=...``."""
    parts = urlsplit(url)
    direct = parts.scheme == "http" and parts.hostname in (HOST, "localhost")
    proxied = not parts.scheme and not parts.netloc and re.fullmatch(r"(/[^/?#]+)*/proxy/\d+/", parts.path)
    if not (direct or proxied) or "token=" not in parts.query:
        raise ValueError(f"url: {url!r} is not a labelling page URL (http://{HOST}:PORT/?token=... or "
                         "/proxy/PORT/?token=...)")
    return AnnotationFrame(url, width, height)
