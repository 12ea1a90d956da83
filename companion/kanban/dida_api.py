"""The Dida365 (TickTick) Open API v1 over aiohttp: the OAuth code exchange and the few calls the kanban
uses, each answer mapped to a typed error (``companion.core.errors``): 401 -> ``DidaAuthError``; HTTP 500
with ``errorCode: exceed_query_limit`` (Dida365's rate limit answer, not 429) -> ``DidaRateLimitedError``;
a timeout, refused connection or other 5xx -> ``DidaUnavailableError``. ``requests`` counts the calls
made (the benchmark's figure). The token is sent, never logged."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from companion.core.errors import DidaAuthError, DidaError, DidaRateLimitedError, DidaUnavailableError

log = logging.getLogger(__name__)

JSON = dict[str, Any]
API_PATH = "/open/v1"
SCOPES = "tasks:read tasks:write"
RATE_LIMIT_CODE = "exceed_query_limit"


@dataclass(frozen=True, slots=True)
class Grant:
    access_token: str
    expires_in: int  # seconds


@dataclass(frozen=True, slots=True)
class ProjectData:
    """``GET /project/{id}/data``; ``found`` is False for the ``200 {}`` of a deleted or unknown project."""

    found: bool
    closed: bool
    tasks: list[JSON]
    columns: list[JSON]


def authorize_url(auth_base: str, client_id: str, redirect_uri: str, state: str) -> str:
    from urllib.parse import urlencode

    query = urlencode({"client_id": client_id, "scope": SCOPES, "state": state, "redirect_uri": redirect_uri,
                       "response_type": "code"})
    return f"{auth_base}/oauth/authorize?{query}"


class DidaClient:
    """One session for every user; each call names the user's token. Calls of one token are paced to
    ``per_minute`` in any 60 seconds (under Dida365's ~100), so a first push of many cards waits its turn
    instead of running into ``exceed_query_limit``; other users' calls are not held up by it."""

    def __init__(self, api_base: str, auth_base: str, *, timeout: float = 20.0, per_minute: int = 80) -> None:
        self._api = api_base.rstrip("/") + API_PATH
        self._auth = auth_base.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._per_minute = per_minute
        self._recent: dict[str, deque[float]] = {}  # token -> loop times of its calls in the last minute
        self.requests = 0

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def exchange_code(self, code: str, client_id: str, client_secret: str, redirect_uri: str) -> Grant:
        """The authorization code for an access token (form body; the app's id and secret as Basic auth)."""
        form = {"code": code, "grant_type": "authorization_code", "scope": SCOPES, "redirect_uri": redirect_uri}
        basic = base64.b64encode(f"{client_id}:{client_secret}".encode()).decode("ascii")
        body = await self._send("POST", f"{self._auth}/oauth/token", {"Authorization": f"Basic {basic}"}, form=form)
        if not isinstance(body, dict) or not isinstance(body.get("access_token"), str):
            raise DidaError("the token answer has no access_token")
        return Grant(body["access_token"], int(body.get("expires_in") or 180 * 86400))

    # ---- projects and columns ----

    async def projects(self, token: str) -> list[JSON]:
        found = await self._call(token, "GET", "/project")
        return [p for p in found if isinstance(p, dict)] if isinstance(found, list) else []

    async def create_project(self, token: str, name: str) -> JSON:
        return await self._object(token, "POST", "/project", {"name": name, "viewMode": "kanban", "kind": "TASK"})

    async def columns(self, token: str, project_id: str) -> list[JSON]:
        found = await self._call(token, "GET", f"/project/{project_id}/column")
        return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []

    async def create_column(self, token: str, project_id: str, name: str) -> JSON:
        return await self._object(token, "POST", f"/project/{project_id}/column", {"name": name})

    async def project_data(self, token: str, project_id: str) -> ProjectData:
        body = await self._call(token, "GET", f"/project/{project_id}/data")
        if not isinstance(body, dict) or "project" not in body:
            return ProjectData(False, False, [], [])
        project = body.get("project") or {}
        tasks = [t for t in body.get("tasks") or [] if isinstance(t, dict)]
        return ProjectData(True, bool(project.get("closed")), tasks,
                           [c for c in body.get("columns") or [] if isinstance(c, dict)])

    # ---- tasks ----

    async def create_task(self, token: str, task: Mapping[str, Any]) -> JSON:
        return await self._object(token, "POST", "/task", task)

    async def update_task(self, token: str, task: Mapping[str, Any]) -> JSON | None:
        """The updated task, or None for the ``200`` with an empty body Dida365 may answer."""
        body = await self._call(token, "POST", f"/task/{task['id']}", task)
        return body if isinstance(body, dict) and body else None

    async def complete_task(self, token: str, project_id: str, task_id: str) -> None:
        await self._call(token, "POST", f"/project/{project_id}/task/{task_id}/complete")

    async def delete_task(self, token: str, project_id: str, task_id: str) -> None:
        await self._call(token, "DELETE", f"/project/{project_id}/task/{task_id}")

    async def completed_tasks(self, token: str, project_ids: Sequence[str], start: str, end: str) -> list[JSON]:
        found = await self._call(token, "POST", "/task/completed",
                                 {"projectIds": list(project_ids), "startDate": start, "endDate": end})
        return [t for t in found if isinstance(t, dict)] if isinstance(found, list) else []

    # ---- transport ----

    async def _pace(self, token: str) -> None:
        loop = asyncio.get_running_loop()
        recent = self._recent.setdefault(token, deque())
        while True:
            now = loop.time()
            while recent and now - recent[0] >= 60:
                recent.popleft()
            if len(recent) < self._per_minute:
                break
            await asyncio.sleep(60 - (now - recent[0]))
        recent.append(loop.time())
        if len(self._recent) > 4096:  # forget idle tokens
            for idle in [t for t, r in self._recent.items() if not r or loop.time() - r[-1] >= 60]:
                del self._recent[idle]

    async def _object(self, token: str, method: str, path: str, body: Mapping[str, Any] | None = None) -> JSON:
        found = await self._call(token, method, path, body)
        if not isinstance(found, dict) or not found.get("id"):
            raise DidaError(f"{method} {path}: the answer has no id")
        return found

    async def _call(self, token: str, method: str, path: str, body: Mapping[str, Any] | None = None) -> object:
        await self._pace(token)
        return await self._send(method, self._api + path, {"Authorization": f"Bearer {token}"}, body=body)

    async def _send(
        self, method: str, url: str, headers: Mapping[str, str] | None, *, body: Mapping[str, Any] | None = None,
        form: Mapping[str, str] | None = None,
    ) -> object:
        self.requests += 1
        try:
            async with self._open().request(method, url, headers=headers, json=body, data=form) as answer:
                text = await answer.text()
                status = answer.status
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise DidaUnavailableError(f"{method} {_path(url)}: {type(exc).__name__}") from exc
        parsed: object = None
        if text.strip():
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
        if status < 300:
            return parsed
        code = parsed.get("errorCode") if isinstance(parsed, dict) else None
        what = f"{method} {_path(url)}: HTTP {status} {code or ''}".rstrip()
        if status == 401:
            raise DidaAuthError(what, status)
        if code == RATE_LIMIT_CODE:
            raise DidaRateLimitedError(what, status)
        if status >= 500 or status == 429:
            raise DidaUnavailableError(what, status)
        raise DidaError(what, status)


def _path(url: str) -> str:
    """The URL without its host or query: what a log line may say of a call."""
    from urllib.parse import urlsplit

    return urlsplit(url).path
