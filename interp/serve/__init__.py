"""The policies inside a live agent: ``interp serve``, a proxy that edits each request's history (``app``) on
OpenAI chat completions (``messages``), Anthropic Messages (``anthropic``) and OpenAI Responses (``responses``),
the APIs' table (``apis``), the providers' rules (``providers``), the online policy state (``policy``) and its run
log (``runlog``)."""
