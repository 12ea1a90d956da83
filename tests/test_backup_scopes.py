"""Every nightly backup restores: group and supergroup scopes (negative chat ids), tombstones (restored
content-free, counted apart), archived and superseded memories, times with their UTC offset (and the older
offset-less form), first-format files beside current ones; a restore of a day folder and of its snapshot
give the same memories, field by field. Also the restore edge cases: ids past SQLite's integers, over-long
cells, hand-edited tombstones, unknown columns."""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from companion.chat.texts import TELEGRAM_LIMIT
from companion.core.csvformat import HEADERS, LEGACY_HEADERS
from companion.core.errors import RestoreError
from companion.core.extraction import fingerprint
from companion.core.models import (
    Memory,
    MemoryDraft,
    MemoryType,
    Origin,
    Profile,
    Scope,
    ShortKind,
    Status,
    Tier,
    Validity,
)
from companion.engine.maintenance_port import MaintenancePort
from companion.ops.backup.nightly import SNAPSHOT_NAME, make_backup
from companion.ops.backup.restore import LiveTombstones, Tombstone, read_backup_csv, restore
from companion.storage.sqlite import SQLiteStore

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))  # as tests/test_fuzz_inputs.py: raised by make stress
SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
EVERY_STATUS = frozenset(Status)


def memory(mid: int, event: str, *, status: Status = Status.ACTIVE, source_chat: int | None = None,
           superseded_by: int | None = None, importance: float = 70.0) -> Memory:
    created = NOW - 5 * DAY
    forgotten = status is Status.FORGOTTEN
    return Memory(
        id=mid, event="" if forgotten else event, keywords=[] if forgotten else ["搬家"],
        importance=0.0 if forgotten else importance, created_at=created, validity=Validity.DAYS_30,
        last_mentioned_at=None, updated_at=created + DAY, expires_at=created + 30 * DAY, type=MemoryType.EVENT,
        origin=Origin.EXTRACTED, mention_count=1, last_decay_at=created, status=status, tier=Tier.MEDIUM,
        source_chat_id=source_chat, source_message_id=None if source_chat is None else 77,
        source_at=None if source_chat is None else created, superseded_by=superseded_by,
        status_reason={Status.ACTIVE: ""}.get(status, "user"),
        fingerprint=fingerprint(event) if forgotten else "",
    )


async def fill(path: Path, data: dict[Scope, list[Memory]]) -> None:
    store = await SQLiteStore.open(path)
    try:
        for scope, memories in data.items():
            await store.import_rows(scope, memories, NOW)
    finally:
        await store.close()


async def read_every(path: Path) -> dict[Scope, list[Memory]]:
    """Every scope's rows of every status, tombstones included."""
    store = await SQLiteStore.open(path)
    try:
        return {scope: await store.fetch_memories(scope, EVERY_STATUS) for scope in await store.scopes()}
    finally:
        await store.close()


async def backup_of(root: Path, data: dict[Scope, list[Memory]], tz: tzinfo = SHANGHAI) -> Path:
    live = root / "live.sqlite3"
    await fill(live, data)
    store = await SQLiteStore.open(live)
    try:
        return (await make_backup(MaintenancePort(store), root / "backups", NOW, tz, keep_days=30)).folder
    finally:
        await store.close()


GROUP_CHAT = -100123  # the group of the report: cn100123_u1003.csv
SUPERGROUP = -1001234567890
REPORT: dict[Scope, list[Memory]] = {
    Scope(1003): [memory(1, "对花生过敏", source_chat=1003)],
    Scope(1003, GROUP_CHAT): [
        memory(2, "在群里说要搬家", source_chat=GROUP_CHAT),
        memory(3, "在群里说要搬去杭州", status=Status.SUPERSEDED, superseded_by=4, source_chat=GROUP_CHAT),
        memory(4, "在群里说要搬去上海", source_chat=GROUP_CHAT),
        memory(5, "群里说过的秘密", status=Status.FORGOTTEN, source_chat=GROUP_CHAT),
    ],
    Scope(1004, SUPERGROUP): [
        memory(6, "周末去爬山", status=Status.ARCHIVED, source_chat=SUPERGROUP),
        memory(7, "超级群里的旧事", status=Status.FORGOTTEN, source_chat=SUPERGROUP),
        memory(8, "喜欢喝奶茶", source_chat=SUPERGROUP),
    ],
}


async def test_a_backup_with_group_memories_restores_like_its_snapshot(tmp_path: Path) -> None:
    """The report: `来源聊天 -100123 is negative`, even into an empty data folder."""
    folder = await backup_of(tmp_path, REPORT)
    assert (folder / "cn100123_u1003.csv").exists() and (folder / "cn1001234567890_u1004.csv").exists()
    from_csv = await restore(folder, tmp_path / "a" / "memory.sqlite3", NOW)
    from_snapshot = await restore(folder / SNAPSHOT_NAME, tmp_path / "b" / "memory.sqlite3", NOW)
    counts = (3, 6, 2)  # scopes, memories (active, archived, superseded), tombstones
    assert (from_csv.scopes, from_csv.rows, from_csv.tombstones) == counts
    assert (from_snapshot.scopes, from_snapshot.rows, from_snapshot.tombstones) == counts
    csv_side = await read_every(tmp_path / "a" / "memory.sqlite3")
    assert csv_side == REPORT
    assert await read_every(tmp_path / "b" / "memory.sqlite3") == csv_side


async def test_tombstone_rows_are_content_free_and_restore_as_tombstones(tmp_path: Path) -> None:
    scope = Scope(1003, GROUP_CHAT)
    live = tmp_path / "live.sqlite3"
    await fill(live, {scope: [memory(1, "确诊了乙肝", importance=90.0), memory(2, "喜欢猫")]})
    store = await SQLiteStore.open(live)
    try:
        await store.apply_changes(scope, NOW, forget=[1])
        folder = (await make_backup(MaintenancePort(store), tmp_path / "backups", NOW, SHANGHAI, keep_days=30)).folder
    finally:
        await store.close()
    with (folder / f"{scope.key}.csv").open(encoding="utf-8-sig", newline="") as handle:
        rows = {row["id"]: row for row in csv.DictReader(handle)}
    stone = rows["1"]
    assert (stone["事件"], stone["关键词"], stone["重要程度"]) == ("", "", "")
    assert stone["状态"] == "forgotten（已遗忘）" and stone["指纹"] == fingerprint("确诊了乙肝")
    assert "乙肝" not in (folder / f"{scope.key}.csv").read_text(encoding="utf-8-sig")
    result = await restore(folder, tmp_path / "restored.sqlite3", NOW)
    assert (result.rows, result.tombstones) == (1, 1)
    restored = {m.id: m for m in (await read_every(tmp_path / "restored.sqlite3"))[scope]}
    assert restored[1].status is Status.FORGOTTEN and restored[1].event == "" and restored[1].keywords == []
    assert restored[1].importance == 0.0 and restored[1].fingerprint == fingerprint("确诊了乙肝")


def write_rows(path: Path, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    with path.open("w", encoding="utf-8-sig", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(headers)
        writer.writerows(rows)


def edit_cell(path: Path, row_id: str, header: str, value: str) -> None:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        headers = list(reader.fieldnames or [])
        rows = list(reader)
    for row in rows:
        if row["id"] == row_id:
            row[header] = value
    write_rows(path, headers, [[row[h] for h in headers] for row in rows])


async def test_a_hand_edited_forgotten_row_keeps_no_text(tmp_path: Path) -> None:
    folder = await backup_of(tmp_path, {Scope(5): [memory(1, "确诊了乙肝"), memory(2, "喜欢猫")]})
    edit_cell(folder / "u5.csv", "1", "状态", "forgotten")
    result = await restore(folder, tmp_path / "restored.sqlite3", NOW)
    assert (result.rows, result.tombstones) == (1, 1)
    stone = {m.id: m for m in (await read_every(tmp_path / "restored.sqlite3"))[Scope(5)]}[1]
    assert (stone.status, stone.event, stone.keywords, stone.importance) == (Status.FORGOTTEN, "", [], 0.0)
    assert stone.fingerprint == fingerprint("确诊了乙肝")  # the same words told again are still recognised


async def test_times_carry_their_offset_and_the_older_form_still_restores(tmp_path: Path) -> None:
    data = {Scope(5): [memory(1, "喜欢猫"), memory(2, "周五面试")]}
    folder = await backup_of(tmp_path, data)
    text = (folder / "u5.csv").read_text(encoding="utf-8-sig")
    assert f"{(NOW - 5 * DAY).astimezone(SHANGHAI):%Y-%m-%d %H:%M:%S}+08:00" in text
    # Older files: local times without an offset, the zone in the last column, or in no column at all
    # (then the configured zone).
    (folder / "u5.csv").write_text(text.replace("+08:00", ""), encoding="utf-8-sig")
    await restore(folder, tmp_path / "zone.sqlite3", NOW)
    assert await read_every(tmp_path / "zone.sqlite3") == data
    (folder / "u5.csv").write_text(text.replace("+08:00", "").replace(",Asia/Shanghai", ","), encoding="utf-8-sig")
    with pytest.raises(RestoreError, match="no UTC offset"):
        await restore(folder, tmp_path / "none.sqlite3", NOW)
    await restore(folder, tmp_path / "configured.sqlite3", NOW, tz=SHANGHAI)
    assert await read_every(tmp_path / "configured.sqlite3") == data


async def test_an_id_past_sqlite_integers_is_one_line(tmp_path: Path) -> None:
    folder = await backup_of(tmp_path, {Scope(5): [memory(1, "喜欢猫")]})
    edit_cell(folder / "u5.csv", "1", "id", str(2**63))
    with pytest.raises(RestoreError, match=r"^u5\.csv line 2: id 9223372036854775808 is too large$"):
        await restore(folder, tmp_path / "restored.sqlite3", NOW)
    assert not (tmp_path / "restored.sqlite3").exists()


async def test_a_first_format_file_beside_current_ones_gets_handles_above_theirs(tmp_path: Path) -> None:
    """The first format numbered ids per user; its fresh handles must not take a current file's."""
    folder = await backup_of(tmp_path, {Scope(9): [memory(1, "喜欢猫"), memory(2, "周五面试")]})
    old = ["1", "感冒了", "感冒,发烧", "72.5", "2025-12-14 04:00:00+08:00", "30d", "", "event", "extraction", "2",
           "2025-12-14 04:00:00+08:00", "", "2025-12-14 04:00:00+08:00"]
    write_rows(folder / "u1.csv", LEGACY_HEADERS, [old, ["2", "喜欢奶茶", *old[2:]]])  # sorts before u9.csv
    result = await restore(folder, tmp_path / "restored.sqlite3", NOW)
    assert (result.scopes, result.rows) == (2, 4)
    restored = await read_every(tmp_path / "restored.sqlite3")
    assert [m.id for m in restored[Scope(9)]] == [1, 2]
    assert [m.event for m in restored[Scope(1)]] == ["感冒了", "喜欢奶茶"]
    assert min(m.id for m in restored[Scope(1)]) > 2


async def test_an_over_long_cell_is_cut_like_any_input(tmp_path: Path) -> None:
    folder = await backup_of(tmp_path, {Scope(5): [memory(1, "喜欢猫")]})
    edit_cell(folder / "u5.csv", "1", "关键词", ",".join(f"词{i}" * 30 for i in range(50)))
    edit_cell(folder / "u5.csv", "1", "事件", "长" * 10_000_000)
    result = await restore(folder, tmp_path / "restored.sqlite3", NOW)
    assert result.cut == 2
    (got,) = (await read_every(tmp_path / "restored.sqlite3"))[Scope(5)]
    assert got.event == "长" * TELEGRAM_LIMIT
    assert len(got.keywords) == 8 and all(len(k) <= 20 for k in got.keywords)


async def test_unknown_columns_are_ignored_and_optional_ones_may_be_missing(tmp_path: Path) -> None:
    """A newer backup's extra columns (provenance, say) and an older one's missing optional columns."""
    data = {Scope(5): [memory(1, "喜欢猫")]}
    folder = await backup_of(tmp_path, data)
    path = folder / "u5.csv"
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle))
    dropped = HEADERS.index("置顶")
    write_rows(path, [*rows[0][:dropped], *rows[0][dropped + 1:], "来源轮次"],
               [[*row[:dropped], *row[dropped + 1:], "42"] for row in rows[1:]])
    result = await restore(folder, tmp_path / "restored.sqlite3", NOW)
    assert result.rows == 1
    assert await read_every(tmp_path / "restored.sqlite3") == data


def test_read_backup_csv_reads_a_negative_source_chat(tmp_path: Path) -> None:
    path = tmp_path / "cn100123_u1003.csv"
    write_rows(path, HEADERS, [["1", "在群里说要搬家", "搬家", "70.00", "2026-11-20 20:00:00+08:00", "30d", "",
                                "event", "extracted", "1", "2026-11-21 20:00:00+08:00", "",
                                "2026-11-20 20:00:00+08:00", "active", "medium", "", "", "0", "0", "-100123", "77",
                                "", "", "", "", "Asia/Shanghai"]])
    (got,) = read_backup_csv(path).memories
    assert got.source_chat_id == -100123


# ---- the round trip, over generated scopes and memories --------------------------------------------

USER_IDS = st.integers(1, 2**40)
CHATS = st.one_of(st.none(), st.integers(-(2**40), -1), st.integers(-1_009_999_999_999, -1_000_000_000_000),
                  st.integers(1, 2**40))
MOMENTS = st.datetimes(datetime(2001, 1, 1), datetime(2099, 1, 1)).map(
    lambda d: d.replace(microsecond=0, tzinfo=UTC))
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)
KEYWORD = st.text(st.characters(codec="utf-8", exclude_characters=",\x00"), min_size=1, max_size=20)
SCOPES = st.lists(st.builds(Scope, USER_IDS, CHATS), min_size=1, max_size=4, unique_by=lambda s: s.key)


@st.composite
def memories(draw: st.DrawFn, start: int) -> list[Memory]:
    out = []
    for offset in range(draw(st.integers(0, 4))):
        status = draw(st.sampled_from(Status))
        forgotten = status is Status.FORGOTTEN
        event = draw(TEXT)
        out.append(Memory(
            id=start + offset, event="" if forgotten else event,
            keywords=[] if forgotten else draw(st.lists(KEYWORD, max_size=8)),
            importance=0.0 if forgotten else draw(st.floats(0, 100)),
            created_at=draw(MOMENTS), validity=draw(st.sampled_from(Validity)),
            last_mentioned_at=draw(st.none() | MOMENTS), updated_at=draw(MOMENTS),
            expires_at=draw(st.none() | MOMENTS), type=draw(st.sampled_from(MemoryType)),
            origin=draw(st.sampled_from(Origin)), mention_count=draw(st.integers(0, 2**31)),
            last_decay_at=draw(MOMENTS), status=status, tier=draw(st.sampled_from(Tier)),
            review_at=draw(st.none() | MOMENTS), last_accessed_at=draw(st.none() | MOMENTS),
            access_count=draw(st.integers(0, 2**31)), pinned=draw(st.booleans()),
            source_chat_id=draw(st.none() | CHATS.filter(lambda c: c is not None)),
            source_message_id=draw(st.none() | st.integers(1, 2**31)), source_at=draw(st.none() | MOMENTS),
            superseded_by=draw(st.integers(1, 2**40)) if status is Status.SUPERSEDED else None,
            status_reason="" if status is Status.ACTIVE else draw(TEXT.map(lambda t: t[:20])),
            fingerprint=fingerprint(event) if forgotten else "",
        ))
    return out


@st.composite
def databases(draw: st.DrawFn) -> dict[Scope, list[Memory]]:
    data: dict[Scope, list[Memory]] = {}
    handle = 1
    for scope in draw(SCOPES):
        data[scope] = draw(memories(handle))
        handle += 10
    return data


@settings(max_examples=max(EXAMPLES // 4, 5), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=databases(), tz=st.sampled_from([SHANGHAI, ZoneInfo("America/New_York"), UTC]))
async def test_backup_restore_round_trip_keeps_every_field(data: dict[Scope, list[Memory]], tz: tzinfo) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = await backup_of(root, data, tz)
        from_csv = await restore(folder, root / "csv" / "memory.sqlite3", NOW)
        from_snapshot = await restore(folder / SNAPSHOT_NAME, root / "snap" / "memory.sqlite3", NOW)
        expected = {scope: sorted(ms, key=lambda m: m.id) for scope, ms in data.items()}
        assert await read_every(root / "csv" / "memory.sqlite3") == expected
        assert await read_every(root / "snap" / "memory.sqlite3") == expected
        stones = sum(m.status is Status.FORGOTTEN for ms in data.values() for m in ms)
        for result in (from_csv, from_snapshot):
            assert (result.scopes, result.tombstones) == (len(data), stones)
            assert result.rows == sum(map(len, data.values())) - stones



# ---- forgetting sticks across a restore ---------------------------------------------------------------

def stone(scope: Scope, handle: int, words: str, at: datetime) -> Tombstone:
    return Tombstone(scope, handle, fingerprint(words), "user", at)


CREATED = NOW - 5 * DAY  # memory()'s creation time
PRIVATE, GROUP = Scope(5), Scope(5, GROUP_CHAT)


@pytest.mark.parametrize(
    ("tombstone", "scope", "fresh", "forgets"),
    [
        (stone(PRIVATE, 1, "别的话", NOW), PRIVATE, False, True),  # its own handle
        (stone(GROUP, 1, "别的话", NOW), PRIVATE, False, True),  # its own handle, moved to another chat
        (stone(Scope(6), 1, "别的话", NOW), PRIVATE, False, False),  # handle of another user's database
        (stone(PRIVATE, 1, "别的话", NOW), PRIVATE, True, False),  # a fresh handle names nothing old
        (stone(PRIVATE, 99, "确诊了乙肝", NOW), PRIVATE, True, True),  # the same words, forgotten since
        (stone(PRIVATE, 99, "确诊了乙肝", CREATED - DAY), PRIVATE, False, False),  # told again after the forget
        (stone(GROUP, 99, "确诊了乙肝", NOW), PRIVATE, False, False),  # the same words in another scope
    ],
)
def test_which_tombstone_forgets_a_restored_memory(tombstone: Tombstone, scope: Scope, fresh: bool,
                                                   forgets: bool) -> None:
    live = LiveTombstones()
    live.add(tombstone)
    assert (live.match(scope, memory(1, "确诊了乙肝"), fresh) is not None) is forgets


async def test_a_restore_never_brings_back_what_was_forgotten_since_the_backup(tmp_path: Path) -> None:
    folder = await backup_of(tmp_path, {PRIVATE: [memory(1, "确诊了乙肝"), memory(2, "喜欢猫")],
                                        GROUP: [memory(3, "在群里说要搬家")]})
    live = tmp_path / "data" / "memory.sqlite3"
    await fill(live, {PRIVATE: [memory(1, "确诊了乙肝"), memory(2, "喜欢猫")], GROUP: [memory(3, "在群里说要搬家")]})
    store = await SQLiteStore.open(live)
    try:
        await store.apply_changes(PRIVATE, NOW, forget=[1])
        await store.apply_changes(GROUP, NOW, forget=[3])
    finally:
        await store.close()
    for source in (folder, folder / SNAPSHOT_NAME):
        result = await restore(source, live, NOW + DAY, force=True)
        assert (result.rows, result.tombstones, result.reforgotten) == (1, 2, 2)
        restored = await read_every(live)
        assert [(m.id, m.status, m.event) for m in restored[PRIVATE]] == [
            (1, Status.FORGOTTEN, ""), (2, Status.ACTIVE, "喜欢猫")]
        assert [(m.status, m.event) for m in restored[GROUP]] == [(Status.FORGOTTEN, "")]
        # The restored database carries the tombstones on: the next restore forgets them again too.


async def test_a_restore_reforgets_the_profile_and_the_turns_that_told_it(tmp_path: Path) -> None:
    """Found by the adversarial run: a snapshot restore forgot again by writing the tombstone only, so the
    profile and the short-term turn that told the memory came back with the snapshot."""
    fact, told = "确诊了乙肝小三阳", "医生说我是小三阳"
    live = tmp_path / "data" / "memory.sqlite3"
    live.parent.mkdir()
    store = await SQLiteStore.open(live)
    try:
        draft = MemoryDraft(event=fact, keywords=["乙肝"], importance=90.0, type=MemoryType.FACT, tier=Tier.LONG,
                            validity=Validity.PERMANENT)
        [handle] = await store.apply_changes(PRIVATE, NOW, inserts=[draft], sources=["k1"])
        await store.add_short(PRIVATE, ShortKind.TURN, told, "别担心", NOW, keep=200, keys=("k1",))
        await store.save_profile(PRIVATE, Profile(core=fact), NOW)
        folder = (await make_backup(MaintenancePort(store), tmp_path / "backups", NOW, SHANGHAI, keep_days=30)).folder
        await store.forget_everywhere(PRIVATE, [handle], NOW)
    finally:
        await store.close()
    result = await restore(folder / SNAPSHOT_NAME, live, NOW + DAY, force=True)
    assert result.reforgotten == 1
    store = await SQLiteStore.open(live)
    try:
        profile = await store.load_profile(PRIVATE)
        assert profile is None or fact not in profile[0].core
        assert told not in [item.user for item in await store.short_items(PRIVATE, ShortKind.TURN, 10)]
        [restored] = await store.fetch_by_ids(PRIVATE, [handle])
        assert restored.status is Status.FORGOTTEN and restored.event == ""
    finally:
        await store.close()
