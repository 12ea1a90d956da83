"""``python -m bench recall --embeddings URL`` against the fake embeddings server: the command runs end to
end through the real openai SDK, scores three systems, and the dense path finds what keywords miss."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench import cli
from bench.dataset import DatasetLine, MemoryLine, QueryLine, write_dataset
from bench.dense import DENSE_POLICIES, choose_policy, replay_dense
from companion.engine.retrievers import DensePolicy
from tests.fakes.embeddings import FakeEmbeddings

WHEN = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
LATER = WHEN + timedelta(days=1)
SYNONYMS = {"狗狗": "小狗", "汪星人": "小狗", "喵星人": "小猫"}


def memories(user: str) -> list[MemoryLine]:
    texts = ["我家小狗叫豆豆，是一只柯基", "今天晚饭吃了牛肉面", "下个月要去北京出差一周", "我家小猫叫布丁，三岁了"]
    return [MemoryLine(user, f"{user}m{n}", WHEN + timedelta(minutes=n), text) for n, text in enumerate(texts)]


def dataset(path: Path) -> Path:
    write_dataset(path, [
        *memories("u1"), *memories("u2"),
        QueryLine("u1", "q1", LATER, "狗狗最近怎么样", ("u1m0",)),  # no shared word: meaning only
        QueryLine("u1", "q2", LATER, "北京出差的事情定了吗", ("u1m2",)),
        QueryLine("u2", "q3", LATER, "喵星人好乖呀", ("u2m3",)),
    ])
    return path


@pytest.fixture
def server_in_thread() -> Iterator[FakeEmbeddings]:
    """The fake on its own event loop: the command under test runs ``asyncio.run`` itself."""
    loop = asyncio.new_event_loop()
    fake = FakeEmbeddings(synonyms=SYNONYMS)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(fake.start(), loop).result(5)
    try:
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(fake.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_the_dense_bench_command(server_in_thread: FakeEmbeddings, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBEDDING_MIN_SIMILARITY", "0.15")  # the fake's scale, read like an operator's setting
    monkeypatch.setenv("EMBEDDING_MIN_STANDOUT", "0")
    out = tmp_path / "dense.json"
    args = ["recall", str(dataset(tmp_path / "tiny.jsonl")), "--k", "1,2,5", "--json", str(out),
            "--embeddings", server_in_thread.base_url, "--embedding-model", "fake-ngrams"]
    assert cli.main(args) == 0
    assert "engine+dense" in capsys.readouterr().out
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["queries"] == 3 and report["model"] == "fake-ngrams"
    assert report["dense"]["hit@1"] == 1.0 and report["engine+dense"]["hit@1"] == 1.0
    assert report["engine"]["hit@1"] < 1.0  # keywords alone miss the paraphrases
    # Every system is gated and measured on other-user turns, and the offline fusion is the engine's own.
    assert {"gated hit", "false injection, other user"} <= set(report["engine"]) & set(report["engine+dense"])
    assert report["offline fusion equals the engine's"] == 1.0
    assert "z >= 5" in report["dense gate sweep"] and "0.5" in report["fusion weight sweep"]
    # Memories are embedded in one batch per user, not one request per memory.
    assert len([r for r in server_in_thread.requests if len(r["input"]) > 1]) == 2


async def test_every_row_reads_the_same_window_and_other_users_are_negatives(tmp_path: Path) -> None:
    lines: list[DatasetLine] = [*memories("u1"), *memories("u2"),
                                QueryLine("u1", "q1", LATER, "它最近怎么样", ("u1m0",), ("我家狗狗",), "豆豆真可爱")]
    async with FakeEmbeddings(synonyms=SYNONYMS) as fake:
        replay = await replay_dense(lines, (1, 5), fake.base_url, "fake-ngrams")
        window = [set(r["input"]) for r in fake.requests if "它最近怎么样" in r["input"]]
    assert replay.notes["vectors written"] == 8
    assert window and {"我家狗狗", "豆豆真可爱"} <= window[0]  # the dense query reads the window too
    assert [t.relevant for t in replay.turns] == [("u1m0",), ()]  # the question, then asked of u2


async def test_other_user_turns_the_data_set_certifies_are_counted_apart(tmp_path: Path) -> None:
    # As ``bench loo`` holds the keyword gate: u1's question about its 表妹 asked of u2, who has a 表妹 too, is
    # not a certified negative (u2's 表妹 memory may well be what u2 would mean); u2's 手机 question asked of u1,
    # who holds nothing about a phone, is.
    lines: list[DatasetLine] = [
        MemoryLine("u1", "a0", WHEN, "我表妹在广州工作", subjects=("表妹",)),
        MemoryLine("u1", "a1", WHEN, "我喜欢游泳", subjects=()),
        MemoryLine("u2", "b0", WHEN, "我表妹是上海人", subjects=("表妹",)),
        MemoryLine("u2", "b1", WHEN, "我的手机是华为的", subjects=("手机",)),
        QueryLine("u1", "q1", LATER, "我表妹在哪里工作", ("a0",), subjects=("表妹",)),
        QueryLine("u2", "q2", LATER, "我的手机是什么牌子", ("b1",), subjects=("手机",)),
    ]
    async with FakeEmbeddings(synonyms=SYNONYMS) as fake:
        replay = await replay_dense(lines, (1, 5), fake.base_url, "fake-ngrams")
    asked_of_other = [t for t in replay.turns if not t.relevant]
    assert [t.certified for t in asked_of_other] == [False, True]
    report = replay.systems(DensePolicy(min_similarity=0.0, min_standout=0.0))  # every dense candidate admitted
    fused = report["engine+dense"]
    assert fused["false injection, other user"] == 1.0 and fused["false injection, certified"] == 1.0
    # The keyword gate injects u2's 表妹 memory on the uncertified turn only: it counts in the rate over every
    # other-user turn, not in the certified one.
    assert replay.kept().turns[2].lexical and not replay.kept().turns[3].lexical
    assert report["engine"]["false injection, other user"] == 0.5
    assert report["engine"]["false injection, certified"] == 0.0


def sweep(names: list[str], hit: float, injection: float) -> dict[str, object]:
    row = {"gated hit": hit, "false injection, other user": injection}
    return {"dense gate sweep": {name: {"engine+dense": row} for name in names}}


def test_leave_one_out_holds_the_dense_gate_to_the_certified_turns_when_counted() -> None:
    # The goal applies where ``bench loo`` applies it to the keyword gate: the certified other-user turns.
    names = list(DENSE_POLICIES)
    loose, strict = "z >= 1", "z >= 5"
    train = {"dense gate sweep": {name: {"engine+dense": {
        "gated hit": 0.9 if name == loose else 0.5, "false injection, other user": 0.2 if name == loose else 0.05,
        "false injection, certified": 0.05}} for name in names}}
    assert choose_policy([train], 0.1) == loose
    older = {"dense gate sweep": {n: {"engine+dense": {k: v for k, v in row["engine+dense"].items()
                                                       if k != "false injection, certified"}}
                                  for n, row in train["dense gate sweep"].items()}}
    assert choose_policy([older], 0.1) != loose  # runs without the count: every other-user turn, as before
    assert strict in names


def test_leave_one_out_chooses_among_the_gates_every_run_measured() -> None:
    newest = list(DENSE_POLICIES)
    older = [name for name in newest if name != "cosine >= 0.9"]  # recorded before that floor was swept
    assert len(older) < len(newest)
    train = [sweep(newest, 0.5, 0.05), sweep(older, 0.5, 0.05)]
    assert choose_policy(train, 0.1) in older
    assert choose_policy([sweep(newest, 0.5, 0.05)], 0.1, also=[sweep(older, 0.5, 0.05)]) in older
