"""The protected-resource metadata of the backends, served under the proxy's public URL
(docs/configuration.md "Servers behind OAuth"; docs/decisions.md §81).

`GET /.well-known/oauth-protected-resource` (and the path-suffixed form, RFC 9728 §3.1) answers
the document of the backend that speaks for the resource (`resource_backend`, else the first HTTP
backend that has one) with `resource` set to the proxy's public URL
(`translators.oauth.metadata_for_resource`). The document is fetched from the backend's own
address (the well-known URL of its configured `url`, path-suffixed first, then the root form),
never from the `resource_metadata` URL of a challenge, which names the backend's public name and
may be the proxy itself. It is kept for the `max-age` of the backend's `Cache-Control`
(`translators.oauth.cache_lifetime_ms`) and answered with that header. With several backends
behind one URL, their documents must name the same authorization servers unless
`resource_backend` is set: `check_agreement` refuses the start otherwise.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from translators.oauth import (
    WELL_KNOWN,
    authorization_servers,
    cache_lifetime_ms,
    metadata_for_resource,
    metadata_url,
    origin_and_path,
)

from ..config import ConfigError, Settings, Upstream

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 10.0


class MetadataUnavailable(Exception):
    """No backend's metadata could be fetched (unreachable, or an answer that is not a document)."""


@dataclass
class Document:
    """A backend's metadata document as it sent it, its `Cache-Control` and when it expires
    (monotonic s; 0 for a document not to be reused)."""

    backend: str
    body: dict[str, Any]
    cache_control: str | None
    expires: float


def backend_metadata_urls(url: str) -> list[str]:
    """Where a backend at `url` serves its metadata (RFC 9728 §3.1): the path-suffixed well-known
    URL of its endpoint first, then the root one (one URL when the endpoint has no path)."""
    suffixed = metadata_url(url)
    root = origin_and_path(url)[0] + WELL_KNOWN
    return [suffixed] if suffixed == root else [suffixed, root]


class ResourceMetadata:
    """The backends' protected-resource metadata: fetched on demand, cached by `Cache-Control`."""

    def __init__(self, settings: Settings, http: aiohttp.ClientSession, options: Callable[[str], Mapping[str, Any]] | None = None):
        self.settings = settings
        self.http = http
        self.options = options or (lambda name: {})
        """A backend's request options by its name (TLS, outbound proxy: `Endpoint.request_options`)."""
        self._cache: dict[str, Document] = {}
        candidates = [u for u in settings.upstream if u.url]
        if settings.resource_backend is not None:
            candidates = [u for u in candidates if u.name == settings.resource_backend]
        self.candidates: list[Upstream] = candidates
        """The backends that may speak for the resource, in order: `resource_backend` alone when set."""

    async def fetch(self, upstream: Upstream) -> Document | None:
        """The metadata document of `upstream` (from the cache while its `max-age` lasts); None when
        it serves none (404 at both well-known URLs). Raises `MetadataUnavailable` when it cannot be
        reached or answers something that is not a document."""
        cached = self._cache.get(upstream.name)
        if cached is not None and time.monotonic() < cached.expires:
            return cached
        for url in backend_metadata_urls(upstream.url):
            try:
                async with self.http.get(url, headers={"Accept": "application/json"}, timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S),
                                         **self.options(upstream.name)) as response:
                    if response.status == 404:
                        continue
                    raw = await response.read()
                    if response.status != 200:
                        raise MetadataUnavailable(f"backend {upstream.name!r} answered HTTP {response.status} for {url}")
                    cache_control = response.headers.get("Cache-Control")
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise MetadataUnavailable(f"backend {upstream.name!r}: cannot fetch {url} ({exc.__class__.__name__})") from None
            try:
                body = json.loads(raw)
                metadata_for_resource(body, "")  # validates the document's shape
            except ValueError as exc:
                raise MetadataUnavailable(f"backend {upstream.name!r}: {url} is not protected-resource metadata: {exc}") from None
            lifetime_s = cache_lifetime_ms(cache_control) / 1000
            document = Document(upstream.name, body, cache_control, time.monotonic() + lifetime_s if lifetime_s else 0.0)
            self._cache[upstream.name] = document
            return document
        self._cache.pop(upstream.name, None)
        return None

    async def for_resource(self) -> Document | None:
        """The document of the backend that speaks for the resource: the first candidate that has
        one. None when none serves any. Raises `MetadataUnavailable` when none could be reached."""
        failure: MetadataUnavailable | None = None
        for upstream in self.candidates:
            try:
                document = await self.fetch(upstream)
            except MetadataUnavailable as exc:
                failure = failure or exc
                continue
            if document is not None:
                return document
        if failure is not None:
            raise failure
        return None

    def served(self, document: Document, resource: str) -> dict[str, Any]:
        """`document` as the proxy serves it: `resource` is the proxy's public URL."""
        return metadata_for_resource(document.body, resource)

    async def check_agreement(self) -> None:
        """At start, with several HTTP backends and no `resource_backend`: the documents of those
        that serve one must name the same authorization servers (docs/decisions.md §81). Backends
        that cannot be reached now are skipped (logged). Raises `ConfigError` naming each backend's
        authorization servers when they differ."""
        if self.settings.resource_backend is not None or len(self.candidates) < 2:
            return
        seen: dict[str, frozenset[str]] = {}
        for upstream in self.candidates:
            try:
                document = await self.fetch(upstream)
            except MetadataUnavailable as exc:
                log.warning("protected-resource metadata not checked at start: %s", exc)
                continue
            if document is not None:
                seen[upstream.name] = authorization_servers(document.body)
        if len(set(seen.values())) > 1:
            named = "; ".join(f"{name}: {', '.join(sorted(servers))}" for name, servers in seen.items())
            raise ConfigError(f"the backends behind one public URL name different authorization servers ({named}): "
                              'set resource_backend = "<name>" to the backend that speaks for the resource, '
                              "or give each set of backends a proxy of its own")


def metadata_routes(settings: Settings) -> list[str]:
    """The protected-resource metadata's paths (RFC 9728 §3.1): the root form, and the forms
    suffixed with `path` and with the path of `public_url` (when it has one of its own)."""
    paths = [settings.path, urlsplit(settings.public_url).path if settings.public_url else ""]
    return list(dict.fromkeys([WELL_KNOWN, *(WELL_KNOWN + p.rstrip("/") for p in paths if p.rstrip("/"))]))
