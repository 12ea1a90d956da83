"""What the kanban keeps per linked user (``Link``) and per synced memory (``CardState``), encoded as the JSON
text the store's ``KanbanState`` rows hold, and the access token's encryption at rest (Fernet, the key from
``DIDA_TOKEN_KEY``): a row, a backup or an export of the database never holds a usable token."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

from companion.core.errors import DidaAuthError, DidaLinkError
from companion.core.models import Tier
from companion.core.timeutil import from_db, to_db


class LinkState(StrEnum):
    OK = "ok"
    BROKEN = "broken"  # the token was refused: nothing syncs until the user links again
    PAUSED = "paused"  # the project or a tier's column is gone: nothing syncs until the user rebuilds


@dataclass(slots=True)
class Link:
    user_id: int
    token: str  # encrypted (``TokenBox``)
    linked_at: datetime
    expires_at: datetime
    project_id: str = ""
    columns: dict[str, str] = field(default_factory=dict)  # tier value -> column id
    cursor: int = 0  # the last journal seq whose change reached the kanban
    state: LinkState = LinkState.OK
    last_sync: datetime | None = None
    last_error: str = ""
    rate_until: datetime | None = None  # the user's queue waits until then (exceed_query_limit)
    failures: int = 0  # consecutive failed rounds: the backoff grows with them
    retry_at: datetime | None = None
    warned_expiry: bool = False
    told: str = ""  # the last state the user was told of (each is said once)
    columns_ignored: bool = False  # the app put cards outside the asked column: tier tags carry the tier
    completed_since: datetime | None = None  # start of the window of completed cards read on each poll
    missing_since: dict[str, str] = field(default_factory=dict)  # task id -> the first poll it was absent in (UTC)
    # Cards gone at once in numbers no user deletes by hand: their memories wait for the user's word.
    held: list[str] = field(default_factory=list)
    confirmed: bool = False  # the user said the held cards were deleted on purpose (``/dida_sync 删除``)
    compared: datetime | None = None  # when every memory was last compared with its card
    ignored: list[str] = field(default_factory=list)  # the user's cards that retold a memory already on the board

    def column(self, tier: Tier) -> str:
        return self.columns.get(tier.value, "")

    def tier_of_column(self, column_id: str | None) -> Tier | None:
        for tier, cid in self.columns.items():
            if cid and cid == column_id:
                return Tier(tier)
        return None

    def encode(self) -> str:
        data = asdict(self)
        for name in ("linked_at", "expires_at", "last_sync", "rate_until", "retry_at", "completed_since", "compared"):
            data[name] = None if data[name] is None else to_db(data[name])
        data["state"] = self.state.value
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def decode(cls, text: str) -> Link:
        data: dict[str, Any] = json.loads(text)
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        for name in ("linked_at", "expires_at", "last_sync", "rate_until", "retry_at", "completed_since", "compared"):
            if data.get(name) is not None:
                data[name] = from_db(data[name])
        data["state"] = LinkState(data.get("state", "ok"))
        return cls(**data)


@dataclass(slots=True)
class CardState:
    """One memory's card: its task id (empty while a create is unconfirmed), its last seen ``etag``, and the
    fields as last synced (title, content, tier, priority), what both sides' changes are measured against."""

    task_id: str = ""
    etag: str = ""
    synced: dict[str, Any] = field(default_factory=dict)
    creating: bool = False  # a create was sent and its answer not seen: adopt by marker before sending again

    def encode(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def decode(cls, text: str) -> CardState:
        data = json.loads(text)
        return cls(**{k: v for k, v in data.items() if k in {f.name for f in fields(cls)}})


class TokenBox:
    """Encrypts and decrypts access tokens with the operator's Fernet key."""

    def __init__(self, key: str | None) -> None:
        self._fernet: Fernet | None = None
        if key:
            try:
                self._fernet = Fernet(key.encode("ascii"))
            except (ValueError, UnicodeEncodeError) as exc:
                raise DidaLinkError("DIDA_TOKEN_KEY is not a Fernet key (32 url-safe base64 bytes)") from exc

    @property
    def ready(self) -> bool:
        return self._fernet is not None

    def seal(self, token: str) -> str:
        if self._fernet is None:
            raise DidaLinkError("DIDA_TOKEN_KEY is not set: tokens cannot be kept encrypted")
        return self._fernet.encrypt(token.encode("utf-8")).decode("ascii")

    def open(self, sealed: str) -> str:
        if self._fernet is None:
            raise DidaLinkError("DIDA_TOKEN_KEY is not set: tokens cannot be read")
        try:
            return self._fernet.decrypt(sealed.encode("ascii")).decode("utf-8")
        except InvalidToken as exc:
            raise DidaAuthError("the stored token does not open with DIDA_TOKEN_KEY") from exc
