"""The AstrBot plugin: a ``Star`` that gives every speaker long-term memory through the companion engine.

The only module importing ``astrbot`` (``bridge`` meets its objects through Protocols); everything it does
is ``service.MemoryService``.
The model's memory tools are the engine's own (``tools``), registered with ``Context.add_llm_tools`` as
``FunctionTool``s once the engine is open; AstrBot hands each call the event, whose speaker the tool runs for.
The engine imports and opens once AstrBot is up (``on_astrbot_loaded``; or at the first request, whichever
comes first), so loading the plugin stays cheap; the model used for learning and profiles is AstrBot's own
current provider, looked up at each call. A failure in here is logged in one line and never costs AstrBot
its reply."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from astrbot.api import AstrBotConfig, FunctionTool, ToolSet
from astrbot.api.event import AstrMessageEvent, MessageChain, MessageEventResult, filter
from astrbot.api.provider import LLMResponse, ProviderRequest
from astrbot.api.star import Context, Star, StarTools

from companion.core.errors import CompanionError
from companion.core.models import Origin
from companion.core.timeutil import utcnow
from companion.engine.weekly import next_weekly
from companion.hosts.astrbot import replies as texts
from companion.hosts.astrbot.arguments import BadArgument
from companion.hosts.astrbot.bridge import (
    ProviderModel,
    can_write_first,
    failed,
    private_address,
    send_to,
    speaker_of,
    words_of,
)
from companion.hosts.astrbot.fences import scrub
from companion.hosts.astrbot.options import Options
from companion.hosts.astrbot.rounds import FOLLOWUP_EVERY, every, followup_round, weekly_round
from companion.hosts.astrbot.scopes import Speaker

if TYPE_CHECKING:  # the engine loads in the background once AstrBot is up, not while plugins load
    from companion.hosts.astrbot.memory_service import MemoryService

NAME = "astrbot_plugin_companion_memory"
TOOLS = tuple(f"companion_memory_{verb}" for verb in  # tools.NAMES, known before the engine loads
              ("add", "search", "list", "update", "forget", "move", "archive", "due"))
SHORT_LIST = 6  # lines of "what you remember" a group sees when the list cannot go privately


def final(event: AstrMessageEvent, text: str) -> MessageEventResult:
    """A command's answer, which ends the event: the command is not also sent to the model."""
    return event.plain_result(text).stop_event()


def engine_class() -> type[MemoryService]:
    from companion.hosts.astrbot.memory_service import MemoryService

    return MemoryService


class MemoryTool(FunctionTool):
    """An engine memory tool in AstrBot. A class of this module, so ``add_llm_tools`` files it under this
    plugin (disabled and unloaded with it); its ``handler`` is a ``partial``, which AstrBot calls with the
    event and never binds to the Star as it does the decorated tools of this module."""


class CompanionMemory(Star):
    def __init__(self, context: Context, config: AstrBotConfig | None = None) -> None:
        super().__init__(context)
        self.options = Options.read(config)
        self._service: MemoryService | None = None
        self._opening = asyncio.Lock()
        self._jobs: list[asyncio.Task[None]] = []
        self._confirming: set[str] = set()
        self._tools: list[MemoryTool] = []

    @filter.on_astrbot_loaded()
    async def warm(self) -> None:
        """Open the engine once AstrBot is up, so neither the plugin's load nor the first request waits."""
        try:
            await self.service()
        except Exception as exc:  # the next request tries again
            failed("opening the memory engine", exc)

    async def service(self) -> MemoryService:
        async with self._opening:
            if self._service is None:
                # The engine's modules (jieba, numpy: ~0.6 s) import in a thread, off AstrBot's loop.
                service_class = await asyncio.to_thread(engine_class)
                data = Path(StarTools.get_data_dir(NAME))
                wants_model = self.options.learning or self.options.profile
                llm = ProviderModel(self.context) if wants_model else None
                service = self._service = await service_class.open(data, self.options, llm)
                if self.options.tools:
                    from companion.hosts.astrbot.tool_calls import specs

                    self._tools = [MemoryTool(name=spec.name, description=spec.description,
                                              parameters=spec.parameters, handler=partial(self._run_tool, spec.name))
                                   for spec in specs(service.tools)]
                    self.context.add_llm_tools(*self._tools)
                self._jobs = [
                    asyncio.create_task(every(service.next_nightly, lambda _: service.nightly(), utcnow,
                                              "nightly memory upkeep")),
                    asyncio.create_task(every(lambda now: next_weekly(now, self.options.tz),
                                              self.weekly, utcnow, "the weekly summaries")),
                    asyncio.create_task(every(lambda now: now + FOLLOWUP_EVERY, self.followups, utcnow,
                                              "the follow-ups")),
                ]
            return self._service

    async def weekly(self, now: datetime) -> int:
        """Send the weekly summaries due at ``now`` (the scheduler's run, or a test's chosen Monday)."""
        async def send(address: str, text: str) -> bool:
            return await send_to(self.context, address, MessageChain().message(text))
        return await weekly_round(await self.service(), now, send)

    async def followups(self, now: datetime) -> int:
        """Write first what is due at ``now`` (the scheduler's run, or a test's chosen morning), where the
        platform lets the bot start a private message; AstrBot's own model writes it."""
        async def send(address: str, text: str) -> bool:
            return await send_to(self.context, address, MessageChain().message(text))

        return await followup_round(await self.service(), now, send, partial(can_write_first, self.context),
                                    ProviderModel(self.context).text)

    async def terminate(self) -> None:
        self._tools = []  # AstrBot drops the tools filed under this plugin when it unloads it
        for job in self._jobs:
            job.cancel()
        self._jobs = []
        if self._service is not None:
            await self._service.close()
            self._service = None

    # ---- the request and the reply ------------------------------------------------------------------

    @filter.on_llm_request()
    async def remind(self, event: AstrMessageEvent, req: ProviderRequest) -> None:
        try:
            req.contexts = scrub(req.contexts)  # first: even without the engine, no earlier block stays
            registered = bool(self._tools)
            service = await self.service()
            if self.options.tools:
                req.system_prompt = f"{req.system_prompt}\n{texts.GUIDANCE}".strip()
                if not registered:
                    # A request made while the engine was still opening was given AstrBot's tools without ours.
                    req.func_tool = req.func_tool or ToolSet()
                    for tool in self._tools:
                        req.func_tool.add_tool(tool)
            elif req.func_tool is not None:  # switched off in the WebUI: the model is not offered them
                for name in TOOLS:
                    req.func_tool.remove_tool(name)
            block = await service.reference(speaker_of(event), req.prompt or "")
            # What the speaker said is noted now (the reply may never come): no follow-up today, a new
            # conversation told from an old one, and their private chat's address for follow-ups.
            await service.heard(speaker_of(event), event.unified_msg_origin)
            if block:
                req.prompt = f"{req.prompt or ''}\n\n{block}"
        except Exception as exc:  # an edge: AstrBot answers without memory rather than not at all
            failed("memory injection", exc)

    @filter.on_llm_response()
    async def learn(self, event: AstrMessageEvent, resp: LLMResponse) -> None:
        if self._service is None:  # not open: this request's injection tried, failed and said why
            return
        try:
            service = await self.service()
            await service.note_exchange(speaker_of(event), event.message_str, resp.completion_text or "")
        except Exception as exc:  # an edge: the reply is already made
            failed("learning from the exchange", exc)

    # ---- the model's tools (bound to the speaker in code) --------------------------------------------

    async def _run_tool(self, name: str, event: AstrMessageEvent, **arguments: Any) -> str:
        """One call of the engine's tool ``name``, for the speaker of ``event`` (never a scope the arguments name)."""
        from companion.hosts.astrbot.tool_calls import call

        if not self.options.tools:
            return "记忆工具已关闭。"
        try:
            return await call((await self.service()).tools, speaker_of(event).scope, name, arguments)
        except CompanionError as exc:  # the engine could not open: the model is told, AstrBot goes on
            return texts.TOOL_BAD.format(why=type(exc).__name__)

    # ---- the users' commands ---------------------------------------------------------------------------

    @filter.command("我的记忆", alias={"mymemory"})
    async def mine(self, event: AstrMessageEvent) -> AsyncIterator[MessageEventResult]:
        service = await self.service()
        speaker = speaker_of(event)
        found = await service.listing(speaker)
        if not found:
            yield final(event, texts.NOTHING)
            return
        lines = [texts.YOU_SAID.format(count=len(found)), *(f"{m.id}. {m.shown}" for m in found)]
        if speaker.in_group and len(lines) > SHORT_LIST:
            if await self._privately(event, "\n".join(lines)):
                yield final(event, texts.SENT_PRIVATELY)
                return
            lines = [*lines[:SHORT_LIST], texts.MORE.format(more=len(lines) - SHORT_LIST)]
        yield final(event, "\n".join(lines))

    async def _privately(self, event: AstrMessageEvent, text: str) -> bool:
        """Send to the speaker's private chat where the platform can start one; False where it cannot."""
        return await send_to(self.context, private_address(event), MessageChain().message(text))

    async def _private_switch(self, event: AstrMessageEvent, private_only: str, usage: str, on_off: tuple[str, str],
                              apply: Callable[[MemoryService, Speaker, bool], Awaitable[None]]) -> str:
        """An on/off command that only a private chat may give: what to answer, once ``apply`` did it."""
        speaker = speaker_of(event)
        choice = (words_of(event)[:1] or [""])[0].lower()
        if speaker.in_group:
            return private_only
        if choice not in ("on", "off", "开", "关"):
            return usage
        on = choice in ("on", "开")
        await apply(await self.service(), speaker, on)
        return on_off[0] if on else on_off[1]

    @filter.command("每周总结", alias={"weekly"})
    async def weekly_switch(self, event: AstrMessageEvent) -> AsyncIterator[MessageEventResult]:
        """Opt in or out of the Monday summary, sent to this private chat (never to a group)."""
        yield final(event, await self._private_switch(
            event, texts.WEEKLY_PRIVATE_ONLY, texts.WEEKLY_USAGE, (texts.WEEKLY_ON, texts.WEEKLY_OFF),
            lambda service, speaker, on: service.set_weekly(speaker, on, event.unified_msg_origin)))

    @filter.command("主动问候", alias={"followup"})
    async def followup_switch(self, event: AstrMessageEvent) -> AsyncIterator[MessageEventResult]:
        """On or off: the messages written first about what this user told, once it is over (private only)."""
        yield final(event, await self._private_switch(
            event, texts.FOLLOWUP_PRIVATE_ONLY, texts.FOLLOWUP_USAGE, (texts.FOLLOWUP_ON, texts.FOLLOWUP_OFF),
            lambda service, speaker, on: service.engine.followups.switch(speaker.scope, on)))

    @filter.command("忘记", alias={"forget"})
    async def forget_one(self, event: AstrMessageEvent) -> AsyncIterator[MessageEventResult]:
        service = await self.service()
        args = words_of(event)
        if not args or not args[0].lstrip("#").isdigit():
            yield final(event, texts.USAGE_FORGET)
            return
        gone = await service.drop(speaker_of(event), args[0])
        handle = args[0].lstrip("#")
        yield final(event, (texts.FORGOT_ONE if gone else texts.NOT_YOURS).format(id=handle))

    @filter.command("忘记全部", alias={"forget_all"})
    async def forget_all(self, event: AstrMessageEvent) -> AsyncIterator[MessageEventResult]:
        service = await self.service()
        speaker = speaker_of(event)
        key = speaker.scope.key
        if words_of(event)[:1] in (["确认"], ["confirm"]) and key in self._confirming:
            self._confirming.discard(key)
            count = await service.engine.forget(speaker.scope, None)
            yield final(event, texts.FORGOT_ALL.format(count=count))
            return
        self._confirming.add(key)
        count = len(await service.memories(speaker))
        yield final(event, texts.CONFIRM_ALL.format(count=count) if count else texts.NOTHING)

    # ---- the admins' commands (the per-user design's names, English aliases) -------------------------

    async def _admin(self, event: AstrMessageEvent, least: int, usage: str, work: Any) -> str:
        """An admin command naming a user (``args[0]``) in the place it is sent from: that member here."""
        args = words_of(event)
        if len(args) < least:
            return usage
        try:
            return str(await work(await self.service(), speaker_of(event).member(args[0]), args))
        except BadArgument as exc:
            return texts.TOOL_BAD.format(why=exc)
        except CompanionError:
            return texts.ADMIN_NOT_FOUND.format(user=args[0], id=args[1])

    @filter.permission_type(filter.PermissionType.ADMIN)
    @filter.command("增加记忆", alias={"add_memory"})
    async def admin_add(self, event: AstrMessageEvent) -> AsyncIterator[MessageEventResult]:
        async def work(service: MemoryService, target: Speaker, args: list[str]) -> str:
            memory = await service.add(target, args[1], *args[2:4], origin=Origin.EXPLICIT)
            return texts.ADMIN_ADDED.format(user=args[0], id=memory.id)
        yield final(event, await self._admin(event, 2, texts.ADMIN_USAGE_ADD, work))

    @filter.permission_type(filter.PermissionType.ADMIN)
    @filter.command("删除记忆", alias={"del_memory"})
    async def admin_delete(self, event: AstrMessageEvent) -> AsyncIterator[MessageEventResult]:
        async def work(service: MemoryService, target: Speaker, args: list[str]) -> str:
            gone = await service.drop(target, args[1])
            return (texts.ADMIN_DELETED if gone else texts.ADMIN_NOT_FOUND).format(user=args[0], id=args[1])
        yield final(event, await self._admin(event, 2, texts.ADMIN_USAGE_DELETE, work))

    @filter.permission_type(filter.PermissionType.ADMIN)
    @filter.command("修改记忆", alias={"edit_memory"})
    async def admin_edit(self, event: AstrMessageEvent) -> AsyncIterator[MessageEventResult]:
        async def work(service: MemoryService, target: Speaker, args: list[str]) -> str:
            memory = await service.update(target, args[1], args[2], args[3] if len(args) > 3 else None)
            return texts.ADMIN_EDITED.format(user=args[0], id=memory.id)
        yield final(event, await self._admin(event, 3, texts.ADMIN_USAGE_EDIT, work))

    @filter.permission_type(filter.PermissionType.ADMIN)
    @filter.command("导出记忆", alias={"export_memory"})
    async def admin_export(self, event: AstrMessageEvent) -> AsyncIterator[MessageEventResult]:
        import astrbot.api.message_components as comp

        args = words_of(event)
        path, count = await (await self.service()).export_csv(args[0] if args else "")
        yield event.chain_result([comp.Plain(texts.ADMIN_EXPORTED.format(count=count, path=path.name)),
                                  comp.File(name=path.name, file=str(path))]).stop_event()

    @filter.permission_type(filter.PermissionType.ADMIN)
    @filter.command("导入记忆", alias={"import_memory"})
    async def admin_import(self, event: AstrMessageEvent) -> AsyncIterator[MessageEventResult]:
        """Imports every JSON file in the plugin's data folder ``import/`` for this platform."""
        service = await self.service()
        folder = service.data_dir / "import"
        folder.mkdir(exist_ok=True)
        from companion.hosts.astrbot.importing import import_folder

        report = await import_folder(service, folder, str(event.get_platform_id()))
        yield final(event, texts.ADMIN_IMPORTED.format(added=report.added, skipped=report.skipped,
                                                             bad=report.bad))
