"""Forged callback data through the fake Telegram server: buttons naming chats, users or handles the bot
never saw change nothing and create no storage (no scope row, no memory table), however many arrive."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from companion.core.models import Scope
from tests.groupkit import GroupBot, group_bot

A = 1001
KNOWN = -1001001


def counts(db: Path) -> tuple[int, int]:
    """Registered scopes, and tables in the file that are not spares: the pool of spare memory tables
    refills in the background after a new scope takes one (companion/storage/sqlite/spares.py), at its own pace,
    and a spare is made with its ``spare_tables`` row in one transaction."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN")  # one snapshot for the three counts: the refill may commit between them
        scopes = int(conn.execute("SELECT count(*) FROM scopes").fetchone()[0])
        tables = int(conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0])
        spare = int(conn.execute("SELECT count(*) FROM spare_tables").fetchone()[0])
        conn.execute("COMMIT")
    finally:
        conn.close()
    return scopes, tables - spare


def forged(k: int) -> list[str]:
    chat = -100_900_000 - k
    return [f"gf:all:0:3:{chat}:{A}", f"gf:one:{k + 1}:0:{chat}:{A}", f"gr:forget:{k + 1}:0::0::{chat}:{A}",
            f"gr:archive:{k + 1}:0::0::{chat}:{A}", f"gr:promote:{k + 1}:0::0::{chat}:{A}",
            f"gr:keep:{k + 1}:0::0::{chat}:{A}", f"gf:cancel:0:0:{chat}:{A}"]


async def press_all(g: GroupBot, message_id: int, datas: list[str]) -> None:
    for data in datas:  # one at a time, each on the message as it is now
        g.tg.push_callback(A, message_id, data, chat_id=A)
        await g.deliver()


async def test_forged_group_buttons_create_nothing(tmp_path: Path) -> None:
    async with group_bot(tmp_path) as g:
        await g.seed(Scope(A, KNOWN), "喜欢火锅", ["火锅"])
        await g.private(A, "/start")
        message_id = int(g.tg.sent_messages(A)[-1]["message_id"])
        before = counts(g.settings.db_path)
        await press_all(g, message_id, [data for k in range(200) for data in forged(k)[:1]])
        assert counts(g.settings.db_path) == before  # 200 forged "forget all" presses: no new scope or table
        await press_all(g, message_id, [data for k in range(10) for data in forged(k)])
        assert counts(g.settings.db_path) == before
        assert [m.event for m in await g.engine.memories(Scope(A, KNOWN))] == ["喜欢火锅"]
        assert sorted(s.key for s in await g.engine.active_scopes()) == []


async def test_private_buttons_of_a_user_without_memories_create_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with group_bot(tmp_path) as g:
        await g.private(A, "/start")
        message_id = int(g.tg.sent_messages(A)[-1]["message_id"])
        before = counts(g.settings.db_path)
        await press_all(g, message_id, ["f:all:0:3", "f:one:5:0", "m:forget:5:0", "m:archive:5:0", "m:promote:5:0",
                                        "m:restore:5:0", "r:forget:5:0::0:", "r:keep:5:0::0:", "p:1:火锅:0",
                                        "p:0::1", "m:ok:5:0", "p:0:\ud800\x00坏:0"])
        assert counts(g.settings.db_path) == before
        assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
