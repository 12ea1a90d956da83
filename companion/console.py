"""``python bot.py console``: the same conversation pipeline in a terminal, for one local user."""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from companion.chat.pipeline import ChatService
from companion.core.models import Scope

PROMPT = "你> "
EXIT_WORDS = frozenset({"/quit", "/exit", "/q"})


async def run_console(chat: ChatService, scope: Scope, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> None:
    def say(text: str) -> None:
        stdout.write(text + "\n")
        stdout.flush()

    say("（控制台模式：输入文字聊天，/stop_aiGF 关闭陪伴，/quit 退出）")
    say("小伴> " + await chat.start(scope))
    while True:
        stdout.write(PROMPT)
        stdout.flush()
        line = await asyncio.to_thread(stdin.readline)
        if not line:
            break
        text = line.strip()
        if not text:
            continue
        if text in EXIT_WORDS:
            break
        if text.lower() == "/stop_aigf":
            say("小伴> " + await chat.stop(scope))
            break
        reply = await chat.reply(scope, text)
        say("小伴> " + reply.text)
    await chat.drain()
