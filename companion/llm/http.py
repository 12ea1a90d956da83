"""The HTTP client under the openai SDK: the SDK's documented ``http_client``, an httpx client whose
transport sends each request with aiohttp (the library the bot's aiogram already runs on).

The SDK keeps everything that is policy: building the request, retries with back-off, timeouts, mapping
status codes and failures to its errors. What is left out is only per-request work the model's answers
never need: the answer arrives whole (a chat completion is one JSON body; nothing here streams), so it is
read in one call instead of through two layers of async byte streams, and an absolute URL the SDK has
asked for before is not parsed again. That work was about a fifth of the CPU of each model call
(docs/benchmarks-history.md section 21).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import httpx2

# The SDK asks for a handful of URLs (chat completions, embeddings); the cap only bounds a caller that
# builds URLs with query strings of its own.
_KEPT_URLS = 64
_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=20)  # httpx's own default


class AioHttpTransport(httpx2.AsyncBaseTransport):
    """Sends an httpx request with aiohttp and answers with the whole body read.

    Failures become httpx's transport errors, which the SDK retries and maps: a timeout to
    ``APITimeoutError``, any other failure of the connection to ``APIConnectionError``."""

    def __init__(self, *, limit: int | None = 100, keepalive_expiry: float | None = 5.0) -> None:
        self._limit = limit
        self._keepalive = keepalive_expiry
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[Any, ...], aiohttp.ClientTimeout] = {}

    def _client(self) -> aiohttp.ClientSession:
        # Made on first use: an aiohttp session belongs to the running event loop.
        if self._session is None or self._session.closed:
            # aiohttp's 0 is "no limit", httpx's None.
            connector = aiohttp.TCPConnector(limit=self._limit or 0, keepalive_timeout=self._keepalive)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    def _timeout(self, timeout: dict[str, float | None]) -> aiohttp.ClientTimeout:
        key = (timeout.get("connect"), timeout.get("read"), timeout.get("pool"))
        kept = self._timeouts.get(key)
        if kept is None:
            # httpx's pool timeout bounds the wait for a connection, aiohttp's ``connect`` the same.
            kept = self._timeouts[key] = aiohttp.ClientTimeout(sock_connect=key[0], sock_read=key[1], connect=key[2])
        return kept

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        timeout = request.extensions.get("timeout", {})
        body = await request.aread() or None
        with _as_httpx_errors(request):
            async with self._client().request(
                request.method, str(request.url), headers=request.headers.multi_items(), data=body,
                allow_redirects=False, auto_decompress=False, compress=False, timeout=self._timeout(timeout),
            ) as answer:
                content = await answer.read()
        # ``content=`` gives httpx the body as read: it decodes a compressed one as it would a streamed one.
        return httpx2.Response(answer.status, headers=answer.raw_headers, content=content, request=request,
                               extensions={"http_version": b"HTTP/1.1"})

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


@contextmanager
def _as_httpx_errors(request: httpx2.Request) -> Iterator[None]:
    try:
        yield
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
        error: type[httpx2.TransportError] = (
            httpx2.ConnectTimeout if isinstance(exc, aiohttp.ConnectionTimeoutError) else httpx2.ReadTimeout)
        raise error(str(exc) or type(exc).__name__, request=request) from exc
    except aiohttp.ClientConnectorError as exc:
        raise httpx2.ConnectError(str(exc), request=request) from exc
    except aiohttp.ClientPayloadError as exc:
        raise httpx2.ReadError(str(exc), request=request) from exc
    except (aiohttp.ClientError, OSError) as exc:
        # A server that hung up, a reset connection: the request may or may not have been read.
        raise httpx2.NetworkError(str(exc) or type(exc).__name__, request=request) from exc


class LeanHttpClient(httpx2.AsyncClient):
    """httpx's client over ``AioHttpTransport``, remembering the absolute URLs it was given."""

    def __init__(self, *, limits: httpx2.Limits = _LIMITS, **kwargs: Any) -> None:
        kwargs.setdefault("transport", AioHttpTransport(limit=limits.max_connections,
                                                        keepalive_expiry=limits.keepalive_expiry))
        super().__init__(limits=limits, **kwargs)
        self._urls: dict[str, httpx2.URL] = {}

    def build_request(self, method: str, url: httpx2.URL | str, **kwargs: Any) -> httpx2.Request:
        if isinstance(url, str):
            parsed = self._urls.get(url)
            if parsed is None:
                parsed = httpx2.URL(url)
                if parsed.is_relative_url:  # merged with base_url by httpx each time
                    return super().build_request(method, url, **kwargs)
                if len(self._urls) >= _KEPT_URLS:
                    self._urls.clear()
                self._urls[url] = parsed
            url = parsed
        return super().build_request(method, url, **kwargs)
