"""Backups an operator can open in Excel, and restore: format, formula neutralising, a lossless round
trip, refusing to overwrite, rejecting corrupt input without touching the live database, retention."""

from __future__ import annotations

import csv
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from companion.core.csvformat import HEADERS as CSV_HEADERS
from companion.core.csvformat import LEGACY_HEADERS, neutralise, unneutralise
from companion.core.errors import RestoreError
from companion.core.models import Memory, MemoryType, Origin, Scope, Status, Tier, Turn, Validity
from companion.engine.maintenance_port import MaintenancePort
from companion.ops.backup.nightly import SNAPSHOT_NAME, make_backup, prune_backups
from companion.ops.backup.restore import read_backup_csv, restore
from companion.storage.sqlite import SQLiteStore

TZ = ZoneInfo("Asia/Shanghai")
# 20:00 UTC is already the next day in Shanghai: the folder must be named by the local date.
NOW = datetime(2025, 12, 23, 20, 0, tzinfo=UTC)
TODAY = "2025-12-24"
DAY = timedelta(days=1)
ALICE = Scope(101)
BOB = Scope(202)
GROUP = Scope(101, -1001234567890)
QUIET = Scope(303)  # registered (a queued turn) but without memories
FIRST_HEADERS = "id,事件,关键词,重要程度,创建时间,有效期,最后提及时间"


def mem(mid: int, event: str, importance: float = 80.0, *, keywords: list[str] | None = None,
        validity: Validity = Validity.DAYS_30, mentioned: datetime | None = None, count: int = 0,
        mtype: MemoryType = MemoryType.EVENT, origin: Origin = Origin.EXTRACTED) -> Memory:
    created = NOW - 10 * DAY + timedelta(seconds=mid)
    lifetime = validity.lifetime()
    return Memory(
        id=mid, event=event, keywords=["感冒", "发烧"] if keywords is None else keywords, importance=importance,
        created_at=created, validity=validity, last_mentioned_at=mentioned, updated_at=created + DAY,
        expires_at=None if lifetime is None else created + lifetime, type=mtype, origin=origin,
        mention_count=count, last_decay_at=created + 2 * DAY,
    )


DATA: dict[Scope, list[Memory]] = {
    ALICE: [
        mem(3, "2025-12-13 感冒发烧", 72.87784375000001, mentioned=NOW - DAY, count=4),
        mem(7, "=HYPERLINK(\"http://evil\")", 55.5, keywords=["=cmd", "链接"]),
        mem(8, "+86 手机号", 61.0, keywords=["+86"], mtype=MemoryType.FACT),
        mem(9, "-5度好冷", 40.25, keywords=["-5度", "天气"]),
        mem(10, "@提到我", 50.0, keywords=["@我"]),
        mem(11, "'单引号开头", 50.0, keywords=["'引号"]),
        mem(12, "''两个单引号", 50.0),
        mem(13, "\t制表符开头", 50.0),
        mem(14, "对花生过敏", 100.0, validity=Validity.PERMANENT, mtype=MemoryType.FACT, origin=Origin.EXPLICIT),
        mem(15, "多行\n文本，带\"引号\"和,逗号", 0.0, validity=Validity.DAYS_7),
        mem(42, "😀 家人👨‍👩‍👧 零\u200b宽", 99.99999999999999, mtype=MemoryType.PREFERENCE, origin=Origin.RESTORE),
    ],
    BOB: [mem(101, "喜欢喝奶茶", 60.0, keywords=["奶茶"], mtype=MemoryType.PREFERENCE)],
    GROUP: [mem(201, "在群里说要搬家", 85.0, keywords=["搬家"]), mem(202, "群里的生日", 70.0, keywords=["生日"])],
}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "memory.sqlite3"


@pytest.fixture
async def filled(db_path: Path) -> AsyncIterator[SQLiteStore]:
    storage = await SQLiteStore.open(db_path)
    for scope, memories in DATA.items():
        await storage.import_rows(scope, memories, NOW)
    await storage.add_turn(QUIET, Turn(user="你好", reply=None, at=NOW))
    yield storage
    await storage.close()


@pytest.fixture
async def backup_folder(filled: SQLiteStore, tmp_path: Path) -> Path:
    result = await make_backup(MaintenancePort(filled), tmp_path / "backups", NOW, TZ, keep_days=30)
    await filled.close()
    return result.folder


async def read_all(path: Path) -> dict[Scope, list[Memory]]:
    storage = await SQLiteStore.open(path)
    try:
        return {scope: await storage.fetch_memories(scope) for scope in await storage.scopes()}
    finally:
        await storage.close()


def db_rows(path: Path) -> list[tuple[object, ...]]:
    """Every row of every table, to prove a failed restore changed nothing."""
    conn = sqlite3.connect(path)
    try:
        tables = [str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return [(t, *row) for t in tables for row in conn.execute(f'SELECT * FROM "{t}"')]
    finally:
        conn.close()


# ---- cell neutralising -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cell", "shown"),
    [
        ("=1+1", "'=1+1"),
        ("+86", "'+86"),
        ("-5", "'-5"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("'quoted", "''quoted"),
        ("普通文本", "普通文本"),
        ("a=1", "a=1"),
        ("", ""),
    ],
)
def test_neutralise_round_trips(cell: str, shown: str) -> None:
    assert neutralise(cell) == shown
    assert unneutralise(neutralise(cell)) == cell


# ---- make_backup -----------------------------------------------------------------------------------


async def test_backup_writes_snapshot_and_one_csv_per_scope(filled: SQLiteStore, tmp_path: Path) -> None:
    result = await make_backup(MaintenancePort(filled), tmp_path / "backups", NOW, TZ, keep_days=30)
    assert result.folder == tmp_path / "backups" / TODAY
    assert (result.files, result.rows, result.removed_folders) == (4, 14, 0)
    names = sorted(p.name for p in result.folder.iterdir())
    assert names == sorted([SNAPSHOT_NAME, *(f"{s.key}.csv" for s in (ALICE, BOB, GROUP, QUIET))])

    conn = sqlite3.connect(result.folder / SNAPSHOT_NAME)
    try:
        assert conn.execute(f'SELECT count(*) FROM "{ALICE.table}"').fetchone() == (11,)
        assert conn.execute("SELECT count(*) FROM pending_turns").fetchone() == (1,)
    finally:
        conn.close()


async def test_csv_is_utf8_with_bom_and_fixed_headers(backup_folder: Path) -> None:
    raw = (backup_folder / f"{ALICE.key}.csv").read_bytes()
    assert raw[:3] == b"\xef\xbb\xbf"
    text = raw[3:].decode("utf-8")
    assert text.startswith(FIRST_HEADERS + ",")
    rows = list(csv.reader(text.splitlines(keepends=True)))
    assert tuple(rows[0]) == CSV_HEADERS
    # Local wall-clock times with their UTC offset, the zone in the last column, codes with their names.
    assert rows[1][:7] == ["3", "2025-12-13 感冒发烧", "感冒,发烧", "72.87784375000001",
                           "2025-12-14 04:00:03+08:00", "30d（30天）", "2025-12-23 04:00:00+08:00"]
    assert rows[1][7:9] == ["event（事件）", "extracted（对话提取）"]
    assert rows[1][-1] == "Asia/Shanghai"
    empty = (backup_folder / f"{QUIET.key}.csv").read_bytes()
    assert empty.decode("utf-8-sig").splitlines() == [",".join(CSV_HEADERS)]


async def test_csv_neutralises_formula_cells(backup_folder: Path) -> None:
    with (backup_folder / f"{ALICE.key}.csv").open(encoding="utf-8-sig", newline="") as handle:
        rows = {row[0]: row for row in csv.reader(handle)}
    assert rows["7"][1:3] == ["'=HYPERLINK(\"http://evil\")", "'=cmd,链接"]
    assert rows["8"][1:3] == ["'+86 手机号", "'+86"]
    assert rows["9"][1] == "'-5度好冷"
    assert rows["10"][1] == "'@提到我"
    assert rows["11"][1] == "''单引号开头"
    assert rows["13"][1] == "'\t制表符开头"
    assert rows["14"][1] == "对花生过敏"
    for row in rows.values():
        assert not row[1].startswith(("=", "+", "-", "@", "\t"))


async def test_backup_restore_round_trip_loses_nothing(backup_folder: Path, tmp_path: Path) -> None:
    target = tmp_path / "restored" / "memory.sqlite3"
    result = await restore(backup_folder, target, NOW)
    assert (result.scopes, result.rows, result.kept_old) == (4, 14, None)
    restored = await read_all(target)
    # Everything comes back exactly, importance to the last digit.
    shown = DATA
    assert restored == {**shown, QUIET: []}
    # Field by field, so a failure names the field; == above already covers every one.
    for scope, memories in shown.items():
        for want, got in zip(memories, restored[scope], strict=True):
            for field in Memory.__slots__:
                assert getattr(got, field) == getattr(want, field), (scope.key, want.id, field)


ODD_TEXTS = [
    "Robert'); DROP TABLE scopes;--",
    "控制\x00字\x01符\x07\x1b[31m\r\n\t\x7f",
    "\r回车开头",
    "\n换行开头",
    "结尾回车\r",
    "  前后空格  ",
    " ",
    "",
    '"',
    "a\r\nb",
    "#注释",
    "NaN",
    "null",
    "0001",
    "1e5",
    "😀👍🏽 家人👨‍👩‍👧 🇨🇳",
    "零\u200b宽\u200d字\ufeff符",
    "好" * 4096,
]


async def test_odd_text_survives_backup_and_restore(tmp_path: Path) -> None:
    storage = await SQLiteStore.open(tmp_path / "live.sqlite3")
    memories = [mem(i, text, keywords=["'引号", "=1"]) for i, text in enumerate(ODD_TEXTS, start=1)]
    await storage.import_rows(BOB, memories, NOW)
    result = await make_backup(MaintenancePort(storage), tmp_path / "backups", NOW, TZ, keep_days=1)
    await storage.close()
    await restore(result.folder, tmp_path / "restored.sqlite3", NOW)
    restored = (await read_all(tmp_path / "restored.sqlite3"))[BOB]
    assert [m.event.encode("utf-8") for m in restored] == [t.encode("utf-8") for t in ODD_TEXTS]
    assert restored == memories


async def test_restore_from_snapshot_loses_nothing(backup_folder: Path, tmp_path: Path) -> None:
    target = tmp_path / "restored" / "memory.sqlite3"
    result = await restore(backup_folder / SNAPSHOT_NAME, target, NOW)
    assert (result.scopes, result.rows) == (4, 14)
    assert await read_all(target) == {**DATA, QUIET: []}


async def test_restore_refuses_a_database_with_data(backup_folder: Path, db_path: Path) -> None:
    before = db_path.read_bytes()
    with pytest.raises(RestoreError, match="--force"):
        await restore(backup_folder, db_path, NOW)
    assert db_path.read_bytes() == before


async def test_restore_with_force_keeps_the_old_file_aside(backup_folder: Path, db_path: Path) -> None:
    storage = await SQLiteStore.open(db_path)
    await storage.apply_changes(BOB, NOW, forget=[101])  # the live data now differs from the backup
    await storage.close()
    live = await read_all(db_path)

    result = await restore(backup_folder, db_path, NOW + DAY, force=True)
    assert result.kept_old is not None
    assert result.kept_old.name == "memory.sqlite3.before-restore-20251224T200000"
    # Checkpointed before the move: the kept file alone holds every commit, nothing is left beside it.
    assert not Path(f"{result.kept_old}-wal").exists() or Path(f"{result.kept_old}-wal").stat().st_size == 0
    assert await read_all(result.kept_old) == live
    shown = DATA
    # Bob's #101 was forgotten after the backup: the restore forgets it again instead of bringing it back.
    assert await read_all(db_path) == {**shown, BOB: [], QUIET: []}
    assert (result.rows, result.tombstones, result.reforgotten) == (13, 1, 1)


async def test_restore_into_an_empty_database_needs_no_force(backup_folder: Path, tmp_path: Path) -> None:
    target = tmp_path / "fresh" / "memory.sqlite3"
    empty = await SQLiteStore.open(target)
    await empty.close()
    result = await restore(backup_folder, target, NOW)
    assert result.rows == 14


# ---- corrupt input ---------------------------------------------------------------------------------


def rewrite(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8-sig")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8-sig")


CORRUPTIONS = [
    ("bad header", lambda p: rewrite(p, "id,事件", "编号,事件"), "header"),
    ("missing header column", lambda p: rewrite(p, ",有效期,", ","), "header"),
    ("non-numeric importance", lambda p: rewrite(p, ",60.0,", ",很高,"), "line 2"),
    ("importance 500", lambda p: rewrite(p, ",60.0,", ",500,"), "line 2"),
    ("negative importance", lambda p: rewrite(p, ",60.0,", ",-1,"), "line 2"),
    ("time without a zone", lambda p: p.write_text(p.read_text(encoding="utf-8-sig").replace("+08:00", "")
                                                   .replace(",Asia/Shanghai", ","), encoding="utf-8-sig"), "line 2"),
    ("unknown zone", lambda p: rewrite(p, ",Asia/Shanghai", ",Mars/Base"), "line 2"),
    ("not a time", lambda p: rewrite(p, "2025-12-14 04:01:41", "昨天"), "line 2"),
    ("bad validity", lambda p: rewrite(p, ",30d（30天）,", ",forever,"), "line 2"),
    ("bad status", lambda p: rewrite(p, ",active（有效）,", ",gone,"), "line 2"),
    ("bad id", lambda p: rewrite(p, "\n101,", "\n0,"), "line 2"),
    ("duplicate id", lambda p: p.write_text(
        p.read_text(encoding="utf-8-sig") + p.read_text(encoding="utf-8-sig").splitlines()[1] + "\n",
        encoding="utf-8-sig"), "duplicate"),
    ("short row", lambda p: p.write_text(p.read_text(encoding="utf-8-sig") + "2,残缺\n", encoding="utf-8-sig"),
     "line 3"),
    ("truncated quoted field", lambda p: p.write_text(
        p.read_text(encoding="utf-8-sig") + '2,"没写完的事件,奶茶\n', encoding="utf-8-sig"), "unreadable"),
    ("wrong encoding", lambda p: p.write_bytes(p.read_text(encoding="utf-8-sig").encode("gbk")), "CSV UTF-8"),
    ("binary garbage", lambda p: p.write_bytes(b"\xff\xfe\x00\x81" * 50), ""),
]


@pytest.mark.parametrize(("corrupt", "message"), [c[1:] for c in CORRUPTIONS], ids=[c[0] for c in CORRUPTIONS])
async def test_corrupt_csv_is_refused_and_the_live_database_unchanged(
    backup_folder: Path, db_path: Path, corrupt: object, message: str
) -> None:
    assert callable(corrupt)
    victim = backup_folder / f"{BOB.key}.csv"
    corrupt(victim)
    before, before_rows = db_path.read_bytes(), db_rows(db_path)
    with pytest.raises(RestoreError) as caught:
        await restore(backup_folder, db_path, NOW, force=True)
    assert victim.name in str(caught.value)
    assert message in str(caught.value)
    assert db_path.read_bytes() == before
    assert db_rows(db_path) == before_rows
    assert sorted(p.name for p in db_path.parent.iterdir()) == ["memory.sqlite3"]  # no staging or kept files


@pytest.mark.parametrize("name", ["notes.csv", "u0.csv", "mem_u1.csv", "u1; DROP TABLE scopes.csv"])
async def test_csv_named_like_no_scope_is_refused(backup_folder: Path, db_path: Path, name: str) -> None:
    (backup_folder / f"{BOB.key}.csv").rename(backup_folder / name)
    before = db_rows(db_path)
    with pytest.raises(RestoreError, match="not a scope"):
        await restore(backup_folder, db_path, NOW, force=True)
    assert db_rows(db_path) == before


def test_read_backup_csv_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "u5.csv"
    good = ["1", "事件", "奶茶", "50", "2025-12-14 04:00:00+08:00", "30d", "", "event", "extraction", "0",
            "2025-12-14 04:00:00+08:00", "", "2025-12-14 04:00:00+08:00"]
    with path.open("w", encoding="utf-8-sig", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerows([LEGACY_HEADERS, good, ["2", *good[1:3], "abc", *good[4:]]])
    with pytest.raises(RestoreError, match=r"^u5\.csv line 3: "):
        read_backup_csv(path)


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(b"not a database at all" * 100),
        lambda p: p.write_bytes(p.read_bytes()[:4096]),  # truncated
        lambda p: p.write_bytes(b""),
    ],
    ids=["garbage", "truncated", "empty"],
)
async def test_corrupt_snapshot_is_refused(backup_folder: Path, db_path: Path, damage: object) -> None:
    assert callable(damage)
    snapshot = backup_folder / SNAPSHOT_NAME
    damage(snapshot)
    before = db_path.read_bytes()
    with pytest.raises(RestoreError, match=SNAPSHOT_NAME):
        await restore(snapshot, db_path, NOW, force=True)
    assert db_path.read_bytes() == before


async def test_snapshot_without_a_memory_table_is_refused(backup_folder: Path, tmp_path: Path) -> None:
    snapshot = backup_folder / SNAPSHOT_NAME
    conn = sqlite3.connect(snapshot)
    conn.execute(f'DROP TABLE "{BOB.table}"')
    conn.commit()
    conn.close()
    target = tmp_path / "restored" / "memory.sqlite3"
    with pytest.raises(RestoreError, match=SNAPSHOT_NAME):
        await restore(snapshot, target, NOW)
    assert not target.exists()


@pytest.mark.parametrize("source", ["missing-folder", "empty-folder"])
async def test_restore_from_nothing_is_refused(tmp_path: Path, source: str) -> None:
    folder = tmp_path / source
    if source == "empty-folder":
        folder.mkdir()
    with pytest.raises(RestoreError):
        await restore(folder, tmp_path / "data" / "memory.sqlite3", NOW)
    assert not (tmp_path / "data" / "memory.sqlite3").exists()


# ---- retention -------------------------------------------------------------------------------------


def make_dirs(root: Path, names: list[str]) -> None:
    for name in names:
        (root / name).mkdir(parents=True)
        (root / name / "u1.csv").write_text("x", encoding="utf-8")


async def test_backup_keeps_the_last_n_day_folders(filled: SQLiteStore, tmp_path: Path) -> None:
    root = tmp_path / "backups"
    old_days = [f"2025-12-{d:02d}" for d in range(15, 24)]
    others = ["manual", "2025-12", "keep-2025-12-01", "2025-13-45", "20251201"]
    make_dirs(root, old_days + others)
    (root / "2025-11-01").write_text("a file, not a folder", encoding="utf-8")

    result = await make_backup(MaintenancePort(filled), root, NOW, TZ, keep_days=3)
    assert result.removed_folders == 7
    remaining = sorted(p.name for p in root.iterdir())
    assert remaining == sorted(["2025-12-22", "2025-12-23", TODAY, "2025-11-01", *others])


@pytest.mark.parametrize(
    ("existing", "keep", "expected"),
    [
        # After a long outage the last good backups survive: folders are counted, not calendar days.
        (["2025-10-01", "2025-10-02", "2025-10-03", TODAY], 3, ["2025-10-02", "2025-10-03", TODAY]),
        ([TODAY], 1, [TODAY]),
        (["2025-12-23", TODAY], 1, [TODAY]),
        (["2025-12-20", "2025-12-21"], 5, ["2025-12-20", "2025-12-21"]),
        # A folder dated in the future (clock trouble) never pushes today's backup out.
        (["2026-01-05", TODAY, "2025-12-01"], 1, ["2026-01-05", TODAY]),
    ],
)
def test_prune_backups(tmp_path: Path, existing: list[str], keep: int, expected: list[str]) -> None:
    make_dirs(tmp_path, [*existing, "notes"])
    removed = prune_backups(tmp_path, NOW, TZ, keep)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*expected, "notes"])
    assert removed == len(existing) - len(expected)


async def test_a_backup_from_the_first_release_restores_with_fresh_handles(tmp_path: Path) -> None:
    """The first format: 13 columns, times with their offset, bare codes, ids numbered per user."""
    folder = tmp_path / "2025-12-01"
    folder.mkdir()
    row = ["1", "感冒了", "感冒,发烧", "72.87784375000001", "2025-12-14 04:00:00+08:00", "30d",
           "2025-12-15 09:30:00+08:00", "event", "extraction", "2", "2025-12-14 04:00:00+08:00",
           "2026-01-13 04:00:00+08:00", "2025-12-14 04:00:00+08:00"]
    for key, events in {"u1": ["感冒了", "'=1+1"], "u2": ["喜欢奶茶"]}.items():
        with (folder / f"{key}.csv").open("w", encoding="utf-8-sig", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(LEGACY_HEADERS)
            writer.writerows([[str(i), event, *row[2:]] for i, event in enumerate(events, start=1)])
    target = tmp_path / "memory.sqlite3"
    result = await restore(folder, target, NOW)
    assert (result.scopes, result.rows) == (2, 3)
    restored = await read_all(target)
    one, two = restored[Scope(1)], restored[Scope(2)]
    assert [m.event for m in one] == ["感冒了", "=1+1"] and [m.event for m in two] == ["喜欢奶茶"]
    assert len({m.id for m in [*one, *two]}) == 3  # per-user ids became database-wide handles
    first = one[0]
    assert first.importance == 72.87784375000001  # the old format kept every digit
    assert first.origin is Origin.EXTRACTED and first.tier is Tier.MEDIUM and first.status is Status.ACTIVE
    assert first.created_at == datetime(2025, 12, 13, 20, 0, tzinfo=UTC)
    assert first.last_mentioned_at == datetime(2025, 12, 15, 1, 30, tzinfo=UTC)


async def test_an_interrupted_backup_is_never_restored(backup_folder: Path, db_path: Path) -> None:
    """A run cut short leaves its in-progress marker; a finished one does not."""
    from companion.ops.backup.nightly import IN_PROGRESS

    assert not (backup_folder / IN_PROGRESS).exists()
    (backup_folder / IN_PROGRESS).write_text("started", encoding="utf-8")
    before = db_rows(db_path)
    for source in (backup_folder, backup_folder / SNAPSHOT_NAME):
        with pytest.raises(RestoreError, match="unfinished backup"):
            await restore(source, db_path, NOW, force=True)
    assert db_rows(db_path) == before
