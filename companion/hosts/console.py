"""``python bot.py console``: the same conversation pipeline in a terminal, for one local user.

In a terminal, prompt_toolkit reads the lines: arrow keys, history and editing work, and Ctrl-C or Ctrl-D
leave at once, without waiting for another line; what was said is learned before the process exits
(``learn_what_was_told``). Piped input (tests, ``bot.py console < script.txt``) is read line by line instead. The
commands are handled here, with the engine calls the Telegram handlers make, and never reach the model.
Where Telegram shows buttons (receipts, forget lists, ``/memories`` pages) the console numbers the
choices and reads the answer from the next line (``companion.chat.choices``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TextIO

from prompt_toolkit import PromptSession

from companion.chat import command_table as commands
from companion.chat import texts, views
from companion.chat.choices import TypedChoices
from companion.chat.command_table import Place
from companion.chat.followup_round import FollowUpRound
from companion.chat.pipeline import ChatService
from companion.core.errors import CompanionError
from companion.core.models import Scope

log = logging.getLogger(__name__)

PROMPT = "你> "
SPEAKER = "小伴> "
INTRO = "（控制台模式：输入文字聊天，/help 查看命令，/quit、Ctrl-D 或 Ctrl-C 退出）"
LEARNING = "（正在记下刚才聊的内容……）"


def help_text() -> str:
    return "控制台命令：\n" + commands.help_lines(Place.CONSOLE)


def known_commands() -> dict[str, str]:
    """What the user may type (lower-cased, with the slash) -> the row's name: each console row of the
    command table, under its name and its aliases."""
    known: dict[str, str] = {}
    for row in commands.rows(Place.CONSOLE):
        for name in (row.name, *row.aliases):
            known["/" + name.lower()] = row.name
    return known


HELP = help_text()

Read = Callable[[], Awaitable[str | None]]
"""The next line the user typed; None when they are done (end of input, Ctrl-D, Ctrl-C)."""


def prompt_reader(session: PromptSession[str] | None = None) -> Read:
    """Line editing in a terminal (tests pass a session on a pipe input and a dummy output)."""
    prompt = session or PromptSession[str]()

    async def read() -> str | None:
        try:
            return await prompt.prompt_async(PROMPT)
        except (EOFError, KeyboardInterrupt):
            return None

    return read


def stream_reader(stdin: TextIO, stdout: TextIO) -> Read:
    """Lines from a pipe or file. A daemon thread reads them: a thread blocked in ``readline`` would keep
    the process alive at exit until one more line came (asyncio waits for its executor's threads)."""
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def pump() -> None:
        try:
            for line in stdin:
                loop.call_soon_threadsafe(lines.put_nowait, line)
            loop.call_soon_threadsafe(lines.put_nowait, None)
        except RuntimeError:
            return  # the console has ended and its loop is closed: nobody wants the rest of the input

    threading.Thread(target=pump, name="console-stdin", daemon=True).start()

    async def read() -> str | None:
        stdout.write(PROMPT)
        stdout.flush()
        return await lines.get()

    return read


def is_terminal(stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> bool:
    return stdin.isatty() and stdout.isatty()


async def run_console(
    chat: ChatService, scope: Scope, read: Read | None = None, stdout: TextIO = sys.stdout,
    followup: FollowUpRound | None = None,
) -> None:
    """``followup``: the round that writes first; a follow-up due for this user is shown after the greeting."""
    def say(text: str) -> None:
        stdout.write(text + "\n")
        stdout.flush()

    if read is None:
        read = prompt_reader() if is_terminal(sys.stdin, stdout) else stream_reader(sys.stdin, stdout)
    known = known_commands()
    choices = TypedChoices(chat, scope)
    say(INTRO)
    say(SPEAKER + await chat.start(scope))
    if followup is not None:
        async def shown(_: Scope, __: int, text: str) -> bool:
            say(SPEAKER + text)
            return True

        await followup(chat.clock(), shown, only=scope)
    while (line := await read()) is not None:
        text = line.strip()
        if not text:
            continue
        head, _, args = text.partition(" ")
        command = known.get(head.lower())
        if command == "quit":
            break
        if command is not None or text.startswith("/"):
            choices.lapse()  # a command answers no pending choice
            say(await _command(chat, scope, choices, command, args.strip()))
        elif (answer := await choices.answer(text)) is not None:
            say(SPEAKER + answer)
        elif not chat.is_active(scope):
            say(SPEAKER + texts.NOT_STARTED)
        else:
            say(SPEAKER + choices.after_reply(await chat.reply(scope, text)))
    await learn_what_was_told(chat, scope, say)


async def learn_what_was_told(chat: ChatService, scope: Scope, say: Callable[[str], None]) -> None:
    """The input has ended: the turns still queued are extracted now, before the process exits.

    Extraction runs every few turns (or at once on news), so what was said since the last one waits in the
    queue. The Telegram bot leaves it there at a stop, for its nightly decay to extract; a console has no
    nightly job and may never run again, so it extracts them itself, as ``/stop_aiGF`` does. Extractions in
    flight finish first, so no turn is read twice. A failure leaves the turns queued for the next run."""
    await chat.drain()
    engine = chat.engine
    try:
        if not engine.can_extract or not await engine.pending_count(scope):
            return
        say(LEARNING)
        while (await engine.consolidate(scope, chat.clock())).turns >= engine.extract_batch:
            pass  # a full batch: more turns may be waiting
        await engine.refresh_profile(scope, chat.clock())
    except CompanionError as exc:  # the model or the database is down: the exit stays clean
        log.warning("could not learn the console's last turns; they stay queued: %s", exc)


async def _command(chat: ChatService, scope: Scope, choices: TypedChoices, command: str | None, args: str) -> str:
    if command == "start_aiGF":
        return SPEAKER + await chat.start(scope)
    if command == "stop_aiGF":
        return SPEAKER + await chat.stop(scope)
    if command == "memories":
        return await choices.memories(args)
    if command == "forget":
        return await choices.forget_command(args)
    if command == "why":
        text, _ = await views.why_text(chat.engine, scope, args[:views.QUERY_CHARS], chat.config.tz, chat.clock())
        return text
    if command == "stats":
        return await views.stats_text(chat.engine, scope, chat.clock())
    if command == "reset":
        return SPEAKER + await chat.reset(scope)
    return help_text()  # /help, and any other command: never sent to the model
