"""What every pairing of one fleet member is built from (`proxy.fleet.FleetMember`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from translators.sealing import Keyring

from ..config import Settings
from ..state.v1_tasks import V1Follower
from ..upstream.backend import Backend
from .mrtr import ExchangeBook

if TYPE_CHECKING:
    from .held import HeldCalls


@dataclass(frozen=True)
class MemberParts:
    """One backend and the state its pairings share: `follower` (its v1 tasks, followed for
    modern clients), `exchanges` (held MRTR exchanges), `held` (its held tasks, `held.py`)."""

    settings: Settings
    keyring: Keyring
    backend: Backend
    follower: V1Follower
    exchanges: ExchangeBook
    held: HeldCalls | None = None
