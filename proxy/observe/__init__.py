"""What an operator sees of the proxy besides `/metrics`: the status page's recorder
(`recorder.py`), the page and its JSON (`status.py`, `page.py`), and optional traces
(`tracing.py`, the `otel` extra). docs/configuration.md "Status page" and "Traces"."""
