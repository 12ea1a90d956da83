"""PostgreSQL's side of one turn (``storage.turns``): what the reply needs read in one statement (one
snapshot, one round trip; a second in the same snapshot when the scope's memories are wanted too), and what
the turn did (the conversation's state with it) written in one transaction. Also the statements the store
shares with them: queueing a turn, an access, a mention."""

from __future__ import annotations

from companion.core.models import Scope, ShortKind, Turn
from companion.core.turnview import TurnView
from companion.storage.postgres.journal import NEWEST
from companion.storage.postgres.row_codec import (
    SELECT_MEMORY,
    SHORT_COLUMNS,
    key,
    row_to_memory,
    row_to_profile,
    row_to_short,
    second,
    turn_to_row,
)
from companion.storage.postgres.schema import Conn
from companion.storage.postgres.writes import add_short
from companion.storage.turns import TurnRecord, setting_fields, setting_keys

_SCOPED = "user_id = $1 AND chat_id = $2"
QUEUE_TURN = ("INSERT INTO pending_turns (user_id, chat_id, user_text, reply_text, created_at, message_chat_id, "
              "message_id, turn_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id")
TOUCH = (f"UPDATE memories SET last_accessed_at = $3, access_count = access_count + 1 "
         f"WHERE {_SCOPED} AND id = ANY($4::bigint[])")
MENTION = (f"UPDATE memories SET last_mentioned_at = $3, mention_count = mention_count + 1 "
           f"WHERE {_SCOPED} AND id = ANY($4::bigint[])")
_ITEMS = (f"SELECT {SHORT_COLUMNS} FROM short_term WHERE {_SCOPED} AND kind = '{{kind}}' "
          "ORDER BY id DESC LIMIT {limit}")
# Everything but the memories, as one row: one statement reads one snapshot.
READ = f"""
SELECT
    coalesce(({NEWEST}), 0), s.active,
    p.core, p.dynamic, p.built_at, p.dirty, t.editing, t.conversation, t.hinted_at, coalesce(t.forgets, 0),
    (SELECT value FROM settings WHERE name = $5 AND owner = $6),
    (SELECT value FROM settings WHERE name = $7 AND owner = $8),
    (SELECT value FROM settings WHERE name = $9 AND owner = $10),
    ARRAY(SELECT ROW(i.*) FROM ({_ITEMS.format(kind=ShortKind.EVENT.value, limit="$3")}) AS i),
    ARRAY(SELECT ROW(i.*) FROM ({_ITEMS.format(kind=ShortKind.TURN.value, limit="$4")}) AS i)
FROM (SELECT 1) AS one
LEFT JOIN scopes AS s ON s.user_id = $1 AND s.chat_id = $2
LEFT JOIN profiles AS p ON p.user_id = $1 AND p.chat_id = $2
LEFT JOIN turn_state AS t ON t.user_id = $1 AND t.chat_id = $2
"""
CONVERSATION = ("INSERT INTO turn_state (user_id, chat_id, conversation, said_at) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT (user_id, chat_id) DO UPDATE SET conversation = excluded.conversation, "
                "said_at = coalesce(excluded.said_at, turn_state.said_at)")
HINTED = ("INSERT INTO turn_state (user_id, chat_id, hinted_at) VALUES ($1, $2, $3) "
          "ON CONFLICT (user_id, chat_id) DO UPDATE SET hinted_at = excluded.hinted_at")
MEMORIES = f"SELECT {SELECT_MEMORY} FROM memories WHERE {_SCOPED} AND status = 'active' ORDER BY id"


def queue_params(turn: Turn) -> tuple[object, ...]:
    return turn_to_row(turn)


async def read_turn(conn: Conn, scope: Scope, events: int, turns: int, memories: bool) -> TurnView:
    """``TurnBatch.turn_context``; with ``memories``, in a repeatable-read transaction (two statements, one
    snapshot)."""
    named = [part for pair in setting_keys(scope) for part in pair]
    if memories:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            row = await conn.fetchrow(READ, *key(scope), max(events, 0), max(turns, 0), *named)
            rows = await conn.fetch(MEMORIES, *key(scope))
    else:
        row = await conn.fetchrow(READ, *key(scope), max(events, 0), max(turns, 0), *named)
        rows = None
    assert row is not None  # one row, whatever the joins find
    (change, active, core, dynamic, built_at, dirty, editing, conversation, hinted_at, forgot, review, group, share,
     told, said) = row
    return TurnView(
        change=int(change), active=bool(active),
        profile=None if core is None else row_to_profile((core, dynamic, built_at, dirty)),
        events=[row_to_short(r) for r in reversed(told)], turns=[row_to_short(r) for r in reversed(said)],
        memories=None if rows is None else [row_to_memory(r) for r in rows],
        editing=None if editing is None else int(editing),
        conversation=str(conversation) if conversation else None, hinted_at=hinted_at, forgot=int(forgot),
        **setting_fields([None if v is None else str(v) for v in (review, group, share)]),
    )


async def write_turn(conn: Conn, scope: Scope, done: TurnRecord) -> None:
    """``TurnBatch.record_turn``, inside the caller's transaction."""
    if done.short is not None:
        turn = done.short
        await add_short(conn, scope, ShortKind.TURN, turn.user, turn.reply, turn.at, done.recalled, done.keep,
                        () if turn.key is None else (turn.key,))
    if done.queued:
        await conn.executemany(QUEUE_TURN, [(*key(scope), *queue_params(t)) for t in done.queued])
    if done.touched:
        await conn.execute(TOUCH, *key(scope), second(done.at), list(done.touched))
    if done.mentioned:
        await conn.execute(MENTION, *key(scope), second(done.at), list(done.mentioned))
    if done.conversation is not None:
        said = done.said_at
        await conn.execute(CONVERSATION, *key(scope), done.conversation or None,
                           None if said is None else second(said))
