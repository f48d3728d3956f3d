"""The sealing key: from `MCP_TASKS_PROXY_KEY`, a configured key file, or one created on first start.

The key is 64 random bytes written as base64url (docs/behaviour.md §6). A single proxy with neither
setting creates `<state_dir>/key` (mode 0600) once and reuses it, so task ids survive restarts.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from translators.sealing import KEY_BYTES

from .config import ConfigError, Settings

ENV_KEY = "MCP_TASKS_PROXY_KEY"


def decode_key(text: str, where: str) -> bytes:
    """The 64 key bytes in base64url `text`. Raises `ConfigError` naming `where` otherwise."""
    value = text.strip()
    try:
        key = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise ConfigError(f"{where}: not base64url") from None
    if len(key) != KEY_BYTES:
        raise ConfigError(f"{where}: must hold {KEY_BYTES} bytes (base64url), got {len(key)}")
    return key


def encode_key(key: bytes) -> str:
    """base64url text of a key, without padding."""
    return base64.urlsafe_b64encode(key).rstrip(b"=").decode("ascii")


def new_key_text() -> str:
    """A fresh random key as base64url (for `MCP_TASKS_PROXY_KEY` or a key file)."""
    return encode_key(secrets.token_bytes(KEY_BYTES))


def load_master_key(settings: Settings, environ: Mapping[str, str] = os.environ) -> tuple[bytes, str]:
    """The master key and where it came from ("environment", the key file path, or the created file).

    Raises `ConfigError` for a malformed key or an unreadable key file.
    """
    if environ.get(ENV_KEY):
        return decode_key(environ[ENV_KEY], ENV_KEY), "environment"
    if settings.replicas > 1 and not settings.key_file:
        raise ConfigError(
            f"replicas: {settings.replicas} replicas must share one sealing key: set {ENV_KEY} or key_file "
            "(an auto-created key would differ on each replica)"
        )
    if settings.key_file:
        path = Path(settings.key_file).expanduser()
        try:
            return decode_key(path.read_text(), f"key_file {path}"), str(path)
        except OSError as exc:
            raise ConfigError(f"key_file: cannot read {path}: {exc.strerror}") from None
    path = Path(settings.state_dir).expanduser() / "key"
    try:
        return decode_key(path.read_text(), str(path)), str(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process won the race
        return decode_key(path.read_text(), str(path)), str(path)
    with os.fdopen(fd, "w") as fh:
        fh.write(new_key_text() + "\n")
    return decode_key(path.read_text(), str(path)), f"{path} (created)"
