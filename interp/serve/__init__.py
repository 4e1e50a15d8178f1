"""The policies inside a live agent: ``interp serve``, an OpenAI-compatible proxy that edits each request's
history (``app``), its message mapping (``messages``), the online policy state (``policy``) and its run log
(``runlog``)."""
