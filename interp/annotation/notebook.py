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

:func:`annotation_iframe` builds the frame for any URL ``interp annotate``
printed. It needs no IPython: the object's ``_repr_html_`` is what Jupyter shows.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
import re
from urllib.parse import urlsplit

from interp.annotation.server import HOST


@dataclass(frozen=True)
class AnnotationFrame:
    """An ``<iframe>`` of the labelling page; Jupyter displays it through :meth:`_repr_html_`."""

    url: str
    width: str = "100%"
    height: int = 640

    def _repr_html_(self) -> str:
        return (f'<iframe src="{html.escape(self.url, quote=True)}" width="{html.escape(str(self.width), quote=True)}"'
                f' height="{int(self.height)}" style="border:1px solid #ccc"></iframe>')


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
