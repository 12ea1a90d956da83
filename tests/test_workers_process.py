"""``python bot.py`` with ``REDIS_URL``, behind the webhook of the fake Telegram, against the fake LLM: every
message is answered once and in order per chat, also across a ``kill -9`` mid-load and a restart; with
PostgreSQL, two worker processes (``WORKERS=2``) share the load, one of them killed mid-load, and the
scheduled decay runs once for the day. The model's reply names the tags of the texts it answers, so each
answer says which messages it covers (the buffer merges a burst into one turn)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from companion.chat import texts
from companion.storage.factory import open_store
from tests.fakes import FakeLLM, FakeTelegram
from tests.fakes.llm import request_text
from tests.pgtest import ending_backends, named, pg_schema
from tests.redistest import SERVER as REDIS_SERVER
from tests.scripted import EXTRACT_MARK, PROFILE_MARK
from tests.servers import free_port
from tests.stress.harness import BotProcess, record, scale

TAG = re.compile(r"#(\d+)-(\d+)#")
FIRST_USER = 710_001


def tagged(uid: int, n: int) -> str:
    return f"今天第{n}件事，去散步了 #{uid}-{n}#"


def answer_tags(body: dict[str, Any]) -> str:
    """The tags of the turn's own text (the user's lines of the last user message), in the order the user
    sent them. The reference block before them may recall an earlier memory quoting its tag ("散步 #u-n#"):
    that is not a text this turn answers."""
    users = [m.get("content") for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
    last = str(users[-1]) if users else ""
    said = [line for line in last.splitlines() if line.startswith("今天第")]
    return "收到 " + " ".join(f"#{u}-{n}#" for line in said for u, n in TAG.findall(line))


def install_tagged_model(llm: FakeLLM) -> None:
    """Replies after 20-200 ms naming the tags they answer; extraction turns each tagged line into a memory
    quoting its tag (so a memory in the wrong scope shows)."""
    async def reply(body: dict[str, Any]) -> str:
        await asyncio.sleep(random.uniform(0.02, 0.2))
        return answer_tags(body)

    async def extract(body: dict[str, Any]) -> str:
        text = request_text(body)
        if PROFILE_MARK in text:
            return json.dumps({"core": "喜欢散步", "dynamic": []}, ensure_ascii=False)
        if EXTRACT_MARK not in text:
            return '{"memories": []}'
        lines = [line for line in text.split("对话：", 1)[-1].splitlines() if "用户：" in line]
        memories = [{"event": f"散步 #{u}-{n}#", "keywords": ["散步", f"{u}-{n}"], "importance": 60,
                     "validity": "30d", "type": "event"} for line in lines for u, n in TAG.findall(line)]
        return json.dumps({"memories": memories}, ensure_ascii=False)

    llm.set_chat_reply(reply)
    llm.set_json_reply(extract)


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeTelegram, FakeLLM]]:
    async with FakeTelegram() as tg, FakeLLM() as llm:
        install_tagged_model(llm)
        yield tg, llm


def env_for(tg: FakeTelegram, llm: FakeLLM, root: Path, prefix: str, **extra: str) -> dict[str, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "LLM_", "STRESS"))}
    env.update(
        TELEGRAM_BOT_TOKEN=tg.token, TELEGRAM_API_BASE=tg.base_url, LLM_API_KEY="sk-workers",
        LLM_BASE_URL=llm.base_url, LLM_MAX_RETRIES="0", LLM_TIMEOUT_SECONDS="10", LLM_TOOLS_ENABLED="false",
        DATA_DIR=str(root / "data"), BACKUP_DIR=str(root / "backups"), QUIET_SECONDS="0.3",
        EXTRACT_EVERY_MIN="50", EXTRACT_EVERY_MAX="50", LOG_LEVEL="INFO", PYTHONUNBUFFERED="1",
        WEBHOOK_URL=f"http://127.0.0.1:{port}/hook", WEBHOOK_PORT=str(port),
        REDIS_URL=REDIS_SERVER, REDIS_PREFIX=prefix,
    )
    env.update(extra)
    return env


def sent_by_chat(tg: FakeTelegram) -> dict[int, list[dict[str, Any]]]:
    """Every message the bot sent, by chat, in one pass (a pass per user is quadratic at full size)."""
    sent: dict[int, list[dict[str, Any]]] = {}
    for message in tg.sent_messages():
        sent.setdefault(int(message["chat_id"]), []).append(message)
    return sent


def tags_of(messages: list[dict[str, Any]]) -> list[str]:
    """The tags these answers named, in the order they were sent."""
    return [f"{u}-{n}" for message in messages for u, n in TAG.findall(str(message.get("text", "")))]


async def until_answered(tg: FakeTelegram, users: range, per_user: int, timeout: float = scale(240, 1800)) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        sent = sent_by_chat(tg)
        if all(len(set(tags_of(sent.get(uid, [])))) >= per_user for uid in users):
            break
        assert loop.time() < deadline, "not every message was answered"
        await asyncio.sleep(0.2 if len(users) < 500 else 1.0)
    await asyncio.sleep(1.0)  # an answer that should not exist gets its chance to show up


async def until_some_answered(tg: FakeTelegram, users: range, count: int, timeout: float = scale(120, 900)) -> None:
    """Until ``count`` texts of these users are answered: the load is under way."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while sum(len(tags_of(messages)) for uid, messages in sent_by_chat(tg).items() if uid in users) < count:
        assert loop.time() < deadline, "the load never got under way"
        await asyncio.sleep(0.05)


async def greet(tg: FakeTelegram, users: range) -> None:
    for uid in users:
        tg.push_text(uid, "/start_aiGF")
    for uid in users:
        assert (await tg.wait_for_messages(uid, 1, timeout=120))[0]["text"] == texts.GREETING_NEW


async def talk(tg: FakeTelegram, users: range, per_user: int, seed: int) -> None:
    """Every user sends ``per_user`` texts in bursts (some merge into one turn, some do not)."""
    rng = random.Random(seed)
    for n in range(per_user):
        for uid in users:
            tg.push_text(uid, tagged(uid, n))
        await asyncio.sleep(rng.choice((0.0, 0.05, 0.5)))


def check(tg: FakeTelegram, users: range, per_user: int, *, killed: bool = False) -> int:
    """Every message answered, in the order sent; returns how many were answered twice. Only after a
    ``kill -9`` may one answer per user be repeated: the turn whose answer was delivered right before the
    kill, before its acknowledgement reached Redis."""
    duplicates = 0
    sent = sent_by_chat(tg)
    for uid in users:
        messages = sent.get(uid, [])
        got = tags_of(messages)
        expected = [f"{uid}-{n}" for n in range(per_user)]
        firsts = list(dict.fromkeys(got))
        assert firsts == expected, f"user {uid}: answered {got}"
        duplicates += len(got) - len(firsts)
        repeated = {tag for tag in got if got.count(tag) > 1}
        turns = [set(tags_of([m])) for m in messages]
        one_turn = not repeated or (killed and any(repeated <= tags for tags in turns))
        assert one_turn, f"user {uid}: more than one answer repeated: {[m.get('text') for m in messages]}"
    return duplicates


async def test_one_process_with_the_queue_answers_once_in_order_and_survives_kill_minus_nine(
    servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path, redis_prefix: str
) -> None:
    tg, llm = servers
    env = env_for(tg, llm, tmp_path, redis_prefix)
    users, per_user = range(FIRST_USER, FIRST_USER + scale(12, 200)), scale(6, 20)
    bot = await BotProcess(env, tmp_path, tg=tg).start()
    try:
        await tg.wait_for_call("setWebhook", timeout=120)
        await greet(tg, users)
        begin = time.perf_counter()
        await talk(tg, users, per_user, seed=1)
        await until_answered(tg, users, per_user)
        seconds = time.perf_counter() - begin - 1.0  # until_answered's last second looks for extra answers
    finally:
        code, _ = await bot.stop()
    assert code == 0, bot.output[-3000:]
    check(tg, users, per_user)
    assert not [c for c in tg.calls if c[0].lower() == "getupdates"], "webhook mode must not poll"

    # kill -9 while the next texts are being answered; the restarted process answers the rest, once.
    second = range(users.stop, users.stop + len(users))
    bot = await BotProcess(env, tmp_path, tg=tg).start()
    try:
        await tg.wait_for_call("setWebhook", timeout=120, count=2)
        await greet(tg, second)
        load = asyncio.create_task(talk(tg, second, per_user, seed=2))
        await until_some_answered(tg, second, len(second) * per_user // 3)
        await asyncio.sleep(random.uniform(0, 0.5))  # not always right after an answer went out
        await bot.kill()
        await load
        bot = await BotProcess(env, tmp_path, tg=tg).start()
        await tg.wait_for_call("setWebhook", timeout=120, count=3)  # up, so the stop below is a clean one
        await until_answered(tg, second, per_user)
    finally:
        code, _ = await bot.stop()
    assert code == 0, bot.output[-3000:]
    # The window between a delivered answer and its acknowledgement is one Redis call: a kill there
    # repeats that one answer (each user's burst at most once).
    duplicates = check(tg, second, per_user, killed=True)
    rate = round(len(users) * per_user / seconds, 1)
    record("queue_one_process", {"users": len(users), "messages_per_user": per_user, "database": "sqlite",
                                 "seconds": round(seconds, 1), "messages_per_s": rate,
                                 "answered_twice_after_kill": duplicates})


async def test_workers_need_a_shared_database_and_the_queue(tmp_path: Path) -> None:
    from tests.process import clean_env, run_cli

    env = clean_env() | {"TELEGRAM_BOT_TOKEN": "1:AAA", "LLM_API_KEY": "sk-x", "DATA_DIR": str(tmp_path / "d")}
    code, _, err = await run_cli(env | {"WORKERS": "2", "REDIS_URL": REDIS_SERVER}, tmp_path)
    assert code == 2 and err.strip().count("\n") == 0 and "WORKERS=2 needs a shared database" in err, err
    code, _, err = await run_cli(env | {"REDIS_URL": REDIS_SERVER}, tmp_path, "worker")
    assert code == 2 and "bot.py worker needs a shared database" in err, err
    code, _, err = await run_cli(env | {"DATABASE_URL": "postgresql://x@127.0.0.1/test"}, tmp_path, "worker")
    assert code == 2 and "bot.py worker needs REDIS_URL" in err, err


@pytest.mark.postgresql
async def test_two_workers_on_postgresql_share_the_load_survive_a_kill_and_decay_once(
    servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path, redis_prefix: str
) -> None:
    tg, llm = servers
    users, per_user = range(FIRST_USER, FIRST_USER + scale(20, 1000)), scale(5, 20)
    async with pg_schema() as url:
        env = env_for(tg, llm, tmp_path, redis_prefix, DATABASE_URL=url, WORKERS="2",
                      IMPORTANT_KEYWORDS="散步")  # every turn is extracted at once
        bot = await BotProcess(env, tmp_path, tg=tg).start()
        try:
            await tg.wait_for_call("setWebhook", timeout=120)
            await greet(tg, users)
            begin = time.perf_counter()
            load = asyncio.create_task(talk(tg, users, per_user, seed=3))
            await until_some_answered(tg, users, len(users) * per_user // 3)
            await asyncio.sleep(random.uniform(0, 0.5))
            child = worker_pid(bot)
            os.kill(child, signal.SIGKILL)  # the other worker takes its shards over once the leases expire
            await load
            await until_answered(tg, users, per_user)
            seconds = time.perf_counter() - begin - 1.0  # until_answered's last second looks for extra answers
        finally:
            code, _ = await bot.stop()
        output = bot.output
        stray, stored = await memories_by_scope(url)
    assert code == 0, output[-3000:]
    duplicates = check(tg, users, per_user, killed=True)
    record("workers", {"users": len(users), "messages_per_user": per_user, "workers": 2, "killed_workers": 1,
                       "seconds_with_the_kill": round(seconds, 1),
                       "messages_per_s": round(len(users) * per_user / seconds, 1), "answered_twice": duplicates,
                       "memories_stored": stored, "memories_in_wrong_scope": len(stray)})
    assert not stray, stray[:5]
    assert stored > 0, "extraction never stored anything"
    assert "worker process" in output and "took shard" in output
    # Both processes started with the decay overdue (a new database); only the leader ran it.
    assert output.count("job decay catch-up done") == 1, output[-3000:]


@pytest.mark.postgresql
async def test_two_bot_processes_on_postgresql_survive_ended_connections_and_decay_once(
    servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path, redis_prefix: str
) -> None:
    """Two separate ``python bot.py`` processes (as on two machines) share PostgreSQL and Redis while their
    database connections are ended every 0.5-2 s (``pg_terminate_backend``, what a server restart does):
    every message is answered once and in order, every memory stays in its scope, and of the two
    schedulers only one runs the day's decay."""
    tg, llm = servers
    first_user = FIRST_USER + 100_000
    users, per_user = range(first_user, first_user + scale(20, 1000)), scale(5, 20)
    application = f"proof_{uuid.uuid4().hex[:10]}"
    async with pg_schema() as base:
        url = named(base, application)
        extra = {"DATABASE_URL": url, "IMPORTANT_KEYWORDS": "散步"}  # every turn is extracted at once
        bots = [BotProcess(env_for(tg, llm, tmp_path, redis_prefix, **extra), tmp_path, tg=tg)]
        try:
            await bots[0].start()
            await tg.wait_for_call("setWebhook", timeout=120)
            bots.append(await BotProcess(env_for(tg, llm, tmp_path, redis_prefix, **extra), tmp_path, tg=tg).start())
            await tg.wait_for_call("setWebhook", timeout=120, count=2)  # the webhook now reaches the second
            await greet(tg, users)
            begin = time.perf_counter()
            async with ending_backends(application, every=(0.5, 2.0)) as ended:
                await talk(tg, users, per_user, seed=4)
                await until_answered(tg, users, per_user)
            seconds = time.perf_counter() - begin - 1.0  # until_answered's last second looks for extra answers
        finally:
            codes = [(await bot.stop())[0] for bot in bots if bot.proc is not None]
        outputs = [bot.output for bot in bots]
        stray, stored = await memories_by_scope(base)
        database = await server_figures(base)
    assert codes == [0, 0], [output[-3000:] for output in outputs]
    duplicates = check(tg, users, per_user)
    lost = sum(output.count("PostgreSQL connection lost") for output in outputs)
    turns = sum(1 for message in tg.sent_messages() if TAG.search(str(message.get("text", ""))))
    record("workers_ended_connections", {
        "users": len(users), "messages_per_user": per_user, "processes": 2, "database": "postgresql",
        "seconds": round(seconds, 1), "messages_per_s": round(len(users) * per_user / seconds, 1),
        "backends_ended": ended[0], "store_calls_run_again": lost, "answered_twice": duplicates,
        "memories_stored": stored, "memories_in_wrong_scope": len(stray), "turns": turns,
        "llm_calls_per_100_turns": {"reply": round(100 * len(llm.chat_requests()) / turns, 1),
                                    "other": round(100 * len(llm.json_requests()) / turns, 1)},
        "rows_written_per_turn": round(database["rows_written"] / turns, 2), **database})
    assert ended[0] > 0, "no connection was ended: the test proved nothing"
    assert not stray, stray[:5]
    assert stored > 0, "extraction never stored anything"
    assert not any("turn for" in output and "failed" in output for output in outputs), outputs[0][-3000:]
    # Both started with the decay overdue (a new database); only the one leading ran it.
    assert sum(output.count("job decay catch-up done") for output in outputs) == 1, [o[-2000:] for o in outputs]


async def memories_by_scope(url: str) -> tuple[list[tuple[str, str]], int]:
    """Memories whose tag names another user than their scope's, and how many memories there are."""
    store = await open_store(url)
    try:
        stray, stored = [], 0
        for scope in await store.scopes():
            for memory in await store.fetch_memories(scope):
                stored += 1
                stray += [(scope.key, memory.event) for u, _ in TAG.findall(memory.event) if int(u) != scope.user_id]
        return stray, stored
    finally:
        await store.close()


async def server_figures(url: str) -> dict[str, Any]:
    """The schema's size, what one memory row costs on the server (table, indexes and TOAST), and the rows
    written to it by every statement so far (the server's table statistics, flushed when the bots stopped)."""
    import asyncpg

    from bench.server import server_size_mb

    conn = await asyncpg.connect(url)
    try:
        rows = int(await conn.fetchval("SELECT count(*) FROM memories"))
        size = int(await conn.fetchval("SELECT pg_total_relation_size('memories')"))
        written = await conn.fetchval("SELECT sum(n_tup_ins + n_tup_upd + n_tup_del) FROM pg_stat_user_tables "
                                      "WHERE schemaname = current_schema()")
    finally:
        await conn.close()
    return {"database_mb": await server_size_mb(url), "memory_rows": rows,
            "memories_bytes_per_row": round(size / rows) if rows else None, "rows_written": int(written or 0)}


def worker_pid(bot: BotProcess) -> int:
    found = re.search(r"started 1 worker processes \(pids (\d+)\)", bot.output)
    assert found, bot.output[-3000:]
    return int(found.group(1))
