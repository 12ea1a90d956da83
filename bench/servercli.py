"""``python -m bench queue | workers | pgbulk``: the benchmarks that need the PostgreSQL and Redis servers.

Each runs in its own module, imported only when asked for (``workers`` drives the process proofs' fakes)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from pathlib import Path

Command = Callable[[argparse.Namespace], int]


def lazy(module: str) -> Command:
    """The ``run_command`` of ``module``, imported when the command runs."""

    def run(args: argparse.Namespace) -> int:
        command: Command = importlib.import_module(module).run_command
        return command(args)

    return run


SERVER_COMMANDS: dict[str, Command] = {name: lazy(f"bench.{name}") for name in ("queue", "workers", "pgbulk")}


def add_server_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the parsers of ``SERVER_COMMANDS`` to ``commands``."""
    queue = commands.add_parser("queue", help="the Redis update queue alone: updates added, read and acknowledged "
                                              "per second (one JSON object; every key it wrote is deleted)")
    queue.add_argument("--updates", type=int, default=20_000)
    queue.add_argument("--chats", type=int, default=2_000)
    queue.add_argument("--workers", type=int, default=2)
    queue.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    workers = commands.add_parser("workers", help="bot.py on PostgreSQL with one worker process and with two, "
                                                  "alternating (Redis at TEST_REDIS_URL)")
    workers.add_argument("--users", type=int, default=200)
    workers.add_argument("--messages", type=int, default=20)
    workers.add_argument("--pairs", type=int, default=2)
    workers.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    pgbulk = commands.add_parser("pgbulk", help="the nightly backup of a million memories on PostgreSQL beside "
                                                "the server's plain COPY of the same rows")
    pgbulk.add_argument("--database-url", default="postgresql://127.0.0.1/test")
    pgbulk.add_argument("--scopes", type=int, default=10_000)
    pgbulk.add_argument("--per-scope", type=int, default=100)
    pgbulk.add_argument("--zone", default="Asia/Shanghai", help="a zone with DST formats its times in Python")
    pgbulk.add_argument("--out", type=Path, help="also write the JSON here")
