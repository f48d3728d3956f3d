"""What an operator sees of the proxy besides `/metrics`: the status page's recorder
(`recorder.py`; a failure's reason and a request's repairs: `failures.py`), the page and its JSON (`status.py`, `page.py`), and optional traces
(`tracing.py`, the `otel` extra). docs/operations.md "Status page", docs/configuration.md "Traces"."""
