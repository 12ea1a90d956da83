"""Daily decay and cleanup as set-based SQL over a batch of scopes: the rules of ``core.rules`` (``decay``,
``removal_reason``, ``decays``) written as expressions, as ``storage.sqlite.decay`` writes them for SQLite.
``tests/test_store_contract.py`` checks both against the Python rules row by row.

Times are whole seconds (``rows.second``), so whole days and the mention window come out exactly as the
Python rules compute them. ``$1``/``$2`` are the batch's user and chat ids (arrays), ``$3`` now.
"""

from __future__ import annotations

from companion.core import rules
from companion.core.changes import ChangeOp
from companion.core.models import StatusReason

DAY_S = 86_400
WINDOW_S = int(rules.MENTION_WINDOW.total_seconds())

_IN_BATCH = "(user_id, chat_id) IN (SELECT * FROM unnest($1::bigint[], $2::bigint[]))"
_EPOCH = "extract(epoch FROM {})::bigint"
_NOW = _EPOCH.format("$3::timestamptz")
_ANCHOR = _EPOCH.format("last_decay_at")
_MENTION = _EPOCH.format("last_mentioned_at")
_DAYS = f"(({_NOW} - {_ANCHOR}) / {DAY_S})"  # bigint division: whole days, as ``rules.whole_days``
_SLOW = (f"(CASE WHEN last_mentioned_at IS NULL THEN 0 ELSE greatest(0, least({_DAYS}, "
         f"floor(({_MENTION} + {WINDOW_S} - {_ANCHOR}) / {float(DAY_S)})::bigint) "
         f"- greatest(1, ceil(({_MENTION} - {_ANCHOR}) / {float(DAY_S)})::bigint) + 1) END)")

# PostgreSQL raises an error where a float product underflows to zero (Python and SQLite give 0.0): a
# value whose logarithm falls below this is 0 at once (e**-700 is far below any importance that matters).
UNDERFLOW_LN = -700
_LOG_FACTOR = (f"({_SLOW} * ln({rules.DECAY_PER_DAY_MENTIONED}::float8) "
               f"+ ({_DAYS} - {_SLOW}) * ln({rules.DECAY_PER_DAY}::float8))")

# Returns how many rows decayed; the anchor moves by whole days of seconds (never a calendar day). Each
# scope whose importances decayed gets one scope-wide journal entry.
DECAY = f"""
WITH decayed AS (
    UPDATE memories SET
        importance = greatest({rules.MIN_IMPORTANCE}::float8, least({rules.MAX_IMPORTANCE}::float8,
            CASE WHEN importance <= 0 OR ln(importance) + {_LOG_FACTOR} < {UNDERFLOW_LN} THEN 0 ELSE importance
            * power({rules.DECAY_PER_DAY_MENTIONED}::float8, {_SLOW})
            * power({rules.DECAY_PER_DAY}::float8, {_DAYS} - {_SLOW}) END)),
        last_decay_at = last_decay_at + make_interval(secs => {_DAYS} * {DAY_S})
    WHERE {_IN_BATCH} AND status = 'active' AND validity != 'permanent' AND tier != 'long' AND NOT pinned
        AND last_decay_at <= $3::timestamptz - interval '{DAY_S} seconds'
    RETURNING user_id, chat_id),
journal AS (
    INSERT INTO memory_changes (user_id, chat_id, handle, op, at)
    SELECT user_id, chat_id, NULL, '{ChangeOp.DECAYED}', $3 FROM (SELECT DISTINCT user_id, chat_id FROM decayed) AS s
    ORDER BY user_id, chat_id)
SELECT count(*) FROM decayed
"""


def _cleanable(row: str) -> str:
    """``rules.removal_reason`` is not None: faded, or expired and not mentioned in the last week."""
    return (f"({row}.importance < {rules.CLEANUP_BELOW} OR ({row}.expires_at IS NOT NULL AND {row}.expires_at <= "
            f"$3::timestamptz AND ({row}.last_mentioned_at IS NULL OR {row}.last_mentioned_at <= "
            f"$3::timestamptz - interval '{WINDOW_S} seconds')))")


def _decaying(row: str) -> str:
    return f"({row}.validity != 'permanent' AND {row}.tier != 'long' AND NOT {row}.pinned)"


# Content-free tombstones for what faded, expired or copies a better active memory of the same words
# (the higher one, or the newer of equals, stays unless it is itself cleaned now), found through the
# index on the scope and the hash of the words. One statement: it reads the rows as they were before it,
# as SQLite's does. Scopes that lost memories get a stale profile, and each memory removed a journal entry.
CLEAN = f"""
WITH cleaned AS (
    UPDATE memories AS t SET event = '', keywords = '{{}}', terms = '{{}}', happens = NULL, importance = 0,
    status = 'forgotten',
        updated_at = $3::timestamptz,
        status_reason = CASE WHEN t.importance < {rules.CLEANUP_BELOW} THEN '{StatusReason.FADED}'
                             WHEN {_cleanable("t")} THEN '{StatusReason.EXPIRED}' ELSE '{StatusReason.DUPLICATE}' END
    WHERE {_IN_BATCH.replace("(user_id, chat_id)", "(t.user_id, t.chat_id)")} AND t.status = 'active'
        AND {_decaying("t")} AND ({_cleanable("t")} OR EXISTS (
        SELECT 1 FROM memories AS o WHERE o.user_id = t.user_id AND o.chat_id = t.chat_id
        AND md5(o.event) = md5(t.event) AND o.event = t.event AND o.status = 'active' AND o.id != t.id
        AND (o.importance > t.importance OR (o.importance = t.importance AND o.id > t.id))
        AND NOT ({_decaying("o")} AND {_cleanable("o")})))
    RETURNING t.id, t.user_id, t.chat_id),
journal AS (
    INSERT INTO memory_changes (user_id, chat_id, handle, op, at)
    SELECT user_id, chat_id, id, '{ChangeOp.CLEANED}', $3 FROM cleaned ORDER BY id),
stale AS (
    UPDATE profiles AS p SET dirty = true FROM (SELECT DISTINCT user_id, chat_id FROM cleaned) AS c
    WHERE p.user_id = c.user_id AND p.chat_id = c.chat_id)
SELECT count(*) FROM cleaned
"""
