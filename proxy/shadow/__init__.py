"""The shadow mirror (docs/behaviour.md §8, decisions 89–93): answers a primary backend gave its
clients, compared with a candidate's (`mirror.py`: the queue, the comparison and its counts), the
candidate asked in the proxy's event loop or in its child process (`sides.py`, `ask.py`,
`process.py`: `python -m proxy.shadow.process`)."""
