"""A local Dida365 (TickTick) Open API v1 and OAuth server, faithful to what is known of the real one and to
its traps: 401 for a bad or revoked token; HTTP **500** ``exceed_query_limit`` (not 429) past
``per_minute`` requests of one token in a window; ``200 {}`` for the data of a deleted or unknown project;
``200`` with an empty body for a task update (``empty_updates``); a deleted task still answering ``GET``; a
completed repeating task staying open with a later date beside a completed copy under a new id; user edits
that change the ``etag`` but not ``modifiedTime``; and a switch (``ignore_column_id``) for a server that
does not honour ``columnId``. Tests act as the user in the app with the ``user_*`` methods."""

from __future__ import annotations

import base64
import itertools
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web

from .base import FakeServer

JSONDict = dict[str, Any]
CLIENT_ID, CLIENT_SECRET = "fake-client", "fake-secret"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000+0000")


@dataclass
class Account:
    name: str
    projects: dict[str, JSONDict] = field(default_factory=dict)
    columns: dict[str, list[JSONDict]] = field(default_factory=dict)  # project id -> columns
    tasks: dict[str, JSONDict] = field(default_factory=dict)  # every task ever, deleted ones flagged


class FakeDida(FakeServer):
    def __init__(self, *, per_minute: int = 100) -> None:
        super().__init__()
        self.per_minute = per_minute
        self.empty_updates = True
        self.ignore_column_id = False
        self.down = False  # every API call answers 503 (an outage)
        self.accounts: dict[str, Account] = {}
        self._codes: dict[str, str] = {}  # code -> account
        self._tokens: dict[str, str] = {}  # token -> account
        self._window: dict[str, int] = {}  # token -> requests in the current window
        self._ids = itertools.count(1)
        self.api_calls: list[tuple[str, str, str]] = []  # (account, method, path) of every API call

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/oauth/token", self._token)
        app.router.add_route("*", "/open/v1/{path:.*}", self._api)

    async def wait_for(self, ready: Callable[[], bool], within: float = 30, what: str = "") -> None:
        """Return once ``ready()`` holds after some request or user action; fail after ``within`` seconds."""
        await self._wait_until(ready, within, lambda: f"fake Dida365: not seen within {within}s: {what}")

    # ---- the test as the user ----

    def grant_code(self, account: str) -> str:
        """The code the authorize page hands the user of ``account`` (who said yes)."""
        self.accounts.setdefault(account, Account(account))
        code = secrets.token_urlsafe(8)
        self._codes[code] = account
        return code

    def revoke(self, account: str) -> None:
        for token in [t for t, a in self._tokens.items() if a == account]:
            del self._tokens[token]

    def new_window(self) -> None:
        """A minute passed: the rate limit counts afresh."""
        self._window.clear()

    def project(self, account: str, name: str = "小滴の记忆") -> JSONDict | None:
        found = [p for p in self.accounts[account].projects.values() if p["name"] == name and not p.get("deleted")]
        return found[0] if found else None

    def column_id(self, account: str, name: str) -> str:
        project = self.project(account)
        assert project is not None
        return str(next(c["id"] for c in self.accounts[account].columns[project["id"]] if c["name"] == name))

    def cards(self, account: str) -> list[JSONDict]:
        """Undone, undeleted tasks of the kanban project."""
        project = self.project(account)
        if project is None:
            return []
        return [t for t in self.accounts[account].tasks.values()
                if t["projectId"] == project["id"] and not t.get("deleted") and t["status"] == 0]

    def card(self, account: str, text: str) -> JSONDict:
        found = [t for t in self.cards(account) if text in t["title"] or text in t.get("content", "")]
        assert len(found) == 1, f"{len(found)} cards with {text!r}: {[t['title'] for t in self.cards(account)]}"
        return found[0]

    def column_name(self, account: str, task: JSONDict) -> str | None:
        for columns in self.accounts[account].columns.values():
            for column in columns:
                if column["id"] == task.get("columnId"):
                    return str(column["name"])
        return None

    def user_move(self, account: str, task_id: str, column: str) -> None:
        self._user_edit(account, task_id, columnId=self.column_id(account, column))

    def user_edit(self, account: str, task_id: str, **fields: Any) -> None:
        self._user_edit(account, task_id, **fields)

    def user_complete(self, account: str, task_id: str) -> None:
        self._complete(self.accounts[account], self.accounts[account].tasks[task_id])

    def user_delete(self, account: str, task_id: str) -> None:
        self._user_edit(account, task_id, deleted=True)

    def user_create(self, account: str, column: str, title: str, **fields: Any) -> str:
        project = self.project(account)
        assert project is not None
        task = self._new_task(self.accounts[account], {"projectId": project["id"], "title": title,
                                                       "columnId": self.column_id(account, column), **fields})
        return str(task["id"])

    def delete_project(self, account: str) -> None:
        project = self.project(account)
        assert project is not None
        project["deleted"] = True
        self._notify()

    def _user_edit(self, account: str, task_id: str, **fields: Any) -> None:
        task = self.accounts[account].tasks[task_id]
        task.update(fields)
        task["etag"] = secrets.token_hex(4)  # modifiedTime stays: edits are found by etag
        self._notify()

    # ---- OAuth ----

    async def _token(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        if auth != expected:
            return web.json_response({"error": "invalid_client"}, status=401)
        form = parse_qs(await request.text())
        code = (form.get("code") or [""])[0]
        account = self._codes.pop(code, None)
        if account is None or (form.get("grant_type") or [""])[0] != "authorization_code":
            return web.json_response({"error": "invalid_grant"}, status=400)
        token = secrets.token_urlsafe(16)
        self._tokens[token] = account
        return web.json_response({"access_token": token, "token_type": "bearer", "expires_in": 15551999,
                                  "scope": "tasks:read tasks:write"})

    # ---- the API ----

    def _error(self, status: int, code: str, message: str) -> web.Response:
        return web.json_response({"errorId": secrets.token_hex(4), "errorCode": code, "errorMessage": message},
                                 status=status)

    async def _api(self, request: web.Request) -> web.StreamResponse:
        if self.down:
            return web.Response(status=503, text="Service Unavailable")
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        name = self._tokens.get(token)
        if name is None:
            return self._error(401, "unauthorized", "invalid token")
        self._window[token] = self._window.get(token, 0) + 1
        if self._window[token] > self.per_minute:
            return self._error(500, "exceed_query_limit", "exceed query limit")
        account = self.accounts[name]
        path = request.match_info["path"].strip("/")
        self.api_calls.append((name, request.method, path))
        body: JSONDict = await request.json() if request.can_read_body else {}
        parts = path.split("/")
        answer = self._route(account, request.method, parts, body)
        self._notify()
        if isinstance(answer, web.StreamResponse):
            return answer
        if answer is None:
            return web.Response(status=200)
        return web.json_response(answer)

    def _route(self, account: Account, method: str, parts: list[str], body: JSONDict) -> Any:
        match method, parts:
            case "GET", ["project"]:
                return [p for p in account.projects.values() if not p.get("deleted")]
            case "POST", ["project"]:
                pid = f"p{next(self._ids)}"
                account.projects[pid] = {"id": pid, "name": body["name"], "viewMode": body.get("viewMode", "list"),
                                         "kind": body.get("kind", "TASK"), "closed": False}
                account.columns[pid] = []
                return account.projects[pid]
            case "GET", ["project", pid, "data"]:
                project = account.projects.get(pid)
                if project is None or project.get("deleted"):
                    return {}  # the trap: not 404
                tasks = [t for t in account.tasks.values()
                         if t["projectId"] == pid and t["status"] == 0 and not t.get("deleted")]
                return {"project": project, "tasks": tasks, "columns": account.columns.get(pid, [])}
            case "GET", ["project", pid, "column"]:
                return account.columns.get(pid, [])
            case "POST", ["project", pid, "column"]:
                column = {"id": f"c{next(self._ids)}", "projectId": pid, "name": body["name"],
                          "sortOrder": len(account.columns.get(pid, []))}
                account.columns.setdefault(pid, []).append(column)
                return column
            case "GET", ["project", pid, "task", tid]:
                task = account.tasks.get(tid)
                return task if task is not None else self._error(404, "task_not_found", "not found")
            case "POST", ["project", pid, "task", tid, "complete"]:
                task = account.tasks.get(tid)
                if task is not None:
                    self._complete(account, task)
                return None
            case "DELETE", ["project", pid, "task", tid]:
                task = account.tasks.get(tid)
                if task is not None:
                    task["deleted"] = True
                return None
            case "POST", ["task"]:
                if body.get("projectId") not in account.projects:
                    return self._error(400, "project_not_found", "no such project")
                return self._new_task(account, body)
            case "POST", ["task", "completed"]:
                ids = set(body.get("projectIds") or [])
                return [t for t in account.tasks.values() if t["projectId"] in ids and t["status"] == 2]
            case "POST", ["task", tid]:
                task = account.tasks.get(tid)
                if task is None or body.get("id") != tid or not body.get("projectId"):
                    return self._error(400, "bad_request", "id and projectId are required")
                task.update(self._fields(account, body))
                task["etag"] = secrets.token_hex(4)
                task["modifiedTime"] = _now()
                return None if self.empty_updates else task
        return self._error(404, "not_found", f"{method} /{'/'.join(parts)}")

    def _fields(self, account: Account, body: JSONDict) -> JSONDict:
        kept = {k: v for k, v in body.items() if k not in ("id", "etag", "status")}
        if self.ignore_column_id:
            kept.pop("columnId", None)
        return kept

    def _new_task(self, account: Account, body: JSONDict) -> JSONDict:
        pid = body["projectId"]
        task = {"status": 0, "priority": 0, "content": "", "tags": [], **self._fields(account, body),
                "id": f"t{next(self._ids)}", "etag": secrets.token_hex(4), "modifiedTime": _now()}
        if "columnId" not in task or self.ignore_column_id:
            columns = account.columns.get(pid) or [{"id": None}]
            task["columnId"] = columns[0]["id"]
        account.tasks[task["id"]] = task
        self._notify()
        return task

    def _complete(self, account: Account, task: JSONDict) -> None:
        if task.get("repeatFlag"):
            copy = {**task, "id": f"t{next(self._ids)}", "status": 2, "completedTime": _now()}
            account.tasks[copy["id"]] = copy
            due = datetime.strptime(task["dueDate"], "%Y-%m-%dT%H:%M:%S%z") + timedelta(days=1)
            task["dueDate"] = due.strftime("%Y-%m-%dT%H:%M:%S%z")
        else:
            task["status"], task["completedTime"] = 2, _now()
        task["etag"] = secrets.token_hex(4)
        self._notify()
