"""``workhive demo``: the whole story on one machine, against a local fake LLM API.

It lives in the package (not only under ``examples/``) because the worker
processes import the handler by name (``workhive.demo.handler:summarise``)
and ``workhive demo`` must work from an installed wheel, not just a checkout.

* ``fake_api`` — a real HTTP server on 127.0.0.1 with per-key rate limits (429 +
  Retry-After) and a revoked key (401);
* ``handler`` — the summarisation handler, a real HTTP client;
* ``tasks`` — the documents to summarise;
* ``run`` — wires them to a fresh SQLite hive and the fleet runtime, and checks storage.
"""
