"""The nine pairings: what the proxy does for a client of one dialect in front of a backend of
another (docs/behaviour.md §1, §3–§5), as one table, `PAIRINGS[(client, backend)]`.

A pairing answers a client's requests in front of one backend. The diagonal relays
(`relay.Relay`); the others translate. A translating pairing for modern clients answers a
`proxy.faces.modern.ModernRequest` with a `Reply` (`answer`), which carries the notifications to
send before its result (none today); one for session clients answers a session's request
(`initialize_result`, `dispatch`), asking the client on the POST's stream. Each fleet member
(`proxy.fleet.FleetMember`) builds one instance of each class, from its `parts.MemberParts`.
"""

from __future__ import annotations

from typing import Final

from .carriage import V2OverV2Session, V2SessionCarriage
from .relay import Relay
from .v1_over_v2 import V1OverV2
from .v2_over_v1 import V2OverV1

Pairing = Relay | V2OverV1 | V1OverV2 | V2SessionCarriage
"""Any pairing (`V2OverV2Session` is a `V2OverV1`)."""

PAIRINGS: Final[dict[tuple[str, str], type[Pairing]]] = {
    ("v2-modern", "v2-modern"): Relay,
    ("v2-modern", "v1"): V2OverV1,
    ("v2-modern", "v2-session"): V2OverV2Session,
    ("v1", "v1"): Relay,
    ("v1", "v2-modern"): V1OverV2,
    ("v1", "v2-session"): V1OverV2,
    ("v2-session", "v2-session"): Relay,
    ("v2-session", "v2-modern"): V2SessionCarriage,
    ("v2-session", "v1"): V2SessionCarriage,
}
"""(client dialect, backend dialect) → the pairing class that serves it."""

__all__ = ["PAIRINGS", "Pairing", "Relay", "V1OverV2", "V2OverV1", "V2OverV2Session", "V2SessionCarriage"]
