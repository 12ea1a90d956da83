"""Choices answered by typing, where Telegram shows buttons: a receipt's 好的 / 修改 / 忘掉 / 撤销, the
matches of "忘掉……", the confirmation of "全部忘掉", and the ``/memories`` pages with their per-item
actions. The console uses it; each answer makes the same engine and ``ChatService`` calls the button
handlers make.

One choice is pending at a time. A message that does not answer it is ordinary talk (or a command), and
the choice lapses, so a stale "1" later never forgets anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from companion.chat import texts, views
from companion.chat.pipeline import ChatService
from companion.chat.types import Reply
from companion.core.errors import MemoryNotFoundError, NothingToUndoError, NotYourMemoryError
from companion.core.models import Memory, Scope, Tier
from companion.core.tiers import Action
from memory import MemoryEngine

_DIGITS = {"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}
_NUMBER = r"(?:第\s*)?(?P<n>\d{1,3}|[一二两三四五六七八九十])\s*(?:条|个|项|号)?"
_ONLY_NUMBER = re.compile(rf"^{_NUMBER}[。.!！]?$")
_ITEM_VERB = r"(?P<verb>忘掉|删掉|删除|归档|升级|恢复)"
_ITEM_ACTIONS = (re.compile(rf"^{_ITEM_VERB}\s*{_NUMBER}$"), re.compile(rf"^{_NUMBER}\s*{_ITEM_VERB}$"))
_END = "[。.!！~～]*$"
_YES = re.compile(rf"^(?:确定|确认|是的|全部忘掉|yes)(?:吧|的)?{_END}", re.IGNORECASE)  # not a casual "好"
_CANCEL = re.compile(rf"^(?:取消|算了|不要?了?|不用了?|别|no|n)(?:吧)?{_END}", re.IGNORECASE)
_NEXT = re.compile(rf"^(?:下一页|下页|n|next){_END}", re.IGNORECASE)
_PREV = re.compile(rf"^(?:上一页|上页|p|prev){_END}", re.IGNORECASE)
_ARCHIVED = re.compile(rf"^(?:已归档|归档|看归档|a){_END}", re.IGNORECASE)
_BACK = re.compile(rf"^(?:返回|回去|b|back){_END}", re.IGNORECASE)
_RECEIPT_WORDS = {"好的": 1, "好": 1, "👌": 1, "ok": 1, "修改": 2, "改": 2, "忘掉": 3, "忘了吧": 3, "撤销": 4}
_VERBS = {"忘掉": Action.FORGET, "删掉": Action.FORGET, "删除": Action.FORGET, "归档": Action.ARCHIVE,
          "升级": Action.PROMOTE, "恢复": None}


def number(text: str) -> int | None:
    """"1", "第1条", "第一个" -> 1; anything else -> None."""
    match = _ONLY_NUMBER.match(text.strip())
    return _value(match.group("n")) if match else None


def _value(raw: str) -> int:
    return int(raw) if raw.isdigit() else _DIGITS[raw]


@dataclass(frozen=True, slots=True)
class _Receipt:
    memory: Memory
    replaced: Memory | None


@dataclass(frozen=True, slots=True)
class _ForgetOne:
    memories: tuple[Memory, ...]


@dataclass(frozen=True, slots=True)
class _ForgetAll:
    count: int


@dataclass(frozen=True, slots=True)
class _Page:
    shown: tuple[Memory, ...]
    page: int
    pages: int
    query: str
    archived: bool


_Pending = _Receipt | _ForgetOne | _ForgetAll | _Page


def receipt_menu(memory: Memory, replaced: Memory | None) -> str:
    undo = "，4 撤销（改回原来的说法）" if replaced is not None else ""
    return f"（回复 1 好的，2 修改，3 忘掉{undo}）"


FORGET_MENU = "（回复编号忘掉那一条，例如 1 或 第1条；回复“取消”不忘）"
FORGET_ALL_MENU = "（回复“确定”全部忘掉，回复“取消”不忘）"


def page_menu(page: views.Page, query: str, archived: bool) -> str:
    parts = ["“恢复 1”恢复一条"] if archived else ["“忘掉 1”“归档 1”“升级 1”处理一条"]
    if page.page + 1 < page.pages:
        parts.append("n 下一页")
    if page.page > 0:
        parts.append("p 上一页")
    if archived or query:
        parts.append("b 返回全部记忆")
    else:
        parts.append("a 看已归档")
    return f"（回复 {'，'.join(parts)}）"


class TypedChoices:
    """The choice pending in one conversation (one scope) and the answers to it."""

    def __init__(self, chat: ChatService, scope: Scope) -> None:
        self.chat = chat
        self.scope = scope
        self._pending: _Pending | None = None

    @property
    def engine(self) -> MemoryEngine:
        return self.chat.engine

    def now(self) -> datetime:
        return self.chat.clock()

    # ---- what opens a choice ---------------------------------------------------------------------

    def after_reply(self, reply: Reply) -> str:
        """A chat reply, with the menu of the choice it opens (a receipt, matches, a confirmation)."""
        if reply.saved is not None:
            self._pending = _Receipt(reply.saved, reply.replaced)
            return f"{reply.text}\n{receipt_menu(reply.saved, reply.replaced)}"
        if reply.to_forget:
            self._pending = _ForgetOne(reply.to_forget)
            return f"{reply.text}\n{FORGET_MENU}"
        if reply.forget_all is not None:
            self._pending = _ForgetAll(reply.forget_all)
            return f"{reply.text}\n{FORGET_ALL_MENU}"
        self._pending = None
        return reply.text

    async def forget_command(self, args: str) -> str:
        """``/forget 关键词`` and ``/forget all``, as the Telegram command asks them."""
        asked = await views.forget_prompt(self.engine, self.scope, args, self.now())
        if asked.forget_all is not None:
            self._pending = _ForgetAll(asked.forget_all)
            return f"{asked.text}\n{FORGET_ALL_MENU}"
        self._pending = _ForgetOne(asked.matches) if asked.matches else None
        return f"{asked.text}\n{FORGET_MENU}" if asked.matches else asked.text

    async def memories(self, query: str = "", page: int = 0, archived: bool = False, note: str = "") -> str:
        """A ``/memories`` page; its items and paging wait for a typed answer."""
        query = query.strip()[:views.QUERY_CHARS]
        shown = await views.memory_page(self.engine, self.scope, page, query, archived, self.now())
        head = f"{note}\n\n" if note else ""
        if not shown.shown:
            self._pending = _Page((), 0, 0, "", archived) if archived else None
            return head + shown.text + ("\n（回复 b 返回全部记忆）" if archived else "")
        self._pending = _Page(shown.shown, shown.page, shown.pages, query, archived)
        return f"{head}{shown.text}\n{page_menu(shown, query, archived)}"

    def lapse(self) -> None:
        self._pending = None

    # ---- answers ---------------------------------------------------------------------------------

    async def answer(self, text: str) -> str | None:
        """The answer to the pending choice, or None when ``text`` does not answer it (the choice lapses
        and the caller treats ``text`` as usual)."""
        pending, self._pending = self._pending, None
        text = text.strip()
        if isinstance(pending, _Receipt):
            return await self._receipt(pending, text)
        if isinstance(pending, _ForgetOne):
            return await self._forget_one(pending, text)
        if isinstance(pending, _ForgetAll):
            if _YES.match(text):
                count = await self.chat.forget(self.scope, None)
                return texts.forgot_all(count)
            return texts.CANCELLED if _CANCEL.match(text) else None
        if isinstance(pending, _Page):
            return await self._page(pending, text)
        return None

    async def _receipt(self, pending: _Receipt, text: str) -> str | None:
        choice = number(text) or _RECEIPT_WORDS.get(text.lower().rstrip("。.!！"))
        memory = pending.memory
        if choice == 1:
            return "好的。"
        if choice == 2:
            await self.chat.begin_edit(self.scope, memory.id)
            return texts.EDIT_PROMPT
        try:
            if choice == 3:
                await self.engine.get(self.scope, memory.id)  # owner check before anything changes
                return texts.forgotten(await self.chat.forget(self.scope, [memory.id]))
            if choice == 4 and pending.replaced is not None:
                undone = await self.engine.undo_rewording(self.scope, memory.id, self.now(), pending.replaced.id)
                self._pending = _Receipt(undone, None)
                return f"{texts.undone(undone)}\n{receipt_menu(undone, None)}"
        except (MemoryNotFoundError, NotYourMemoryError):
            return texts.MEMORY_GONE
        except NothingToUndoError:
            return texts.NOTHING_TO_UNDO
        self._pending = pending  # not an answer: leave it to the caller, who lapses it
        return None

    async def _forget_one(self, pending: _ForgetOne, text: str) -> str | None:
        if _CANCEL.match(text):
            return texts.CANCELLED
        chosen = number(text)
        if chosen is None:
            return None
        if not 1 <= chosen <= len(pending.memories):
            self._pending = pending  # a slip of the finger: ask again rather than chat about it
            return f"没有第 {chosen} 条，请回复 1 到 {len(pending.memories)} 之间的编号，或者“取消”。"
        memory = pending.memories[chosen - 1]
        try:
            await self.engine.get(self.scope, memory.id)
        except (MemoryNotFoundError, NotYourMemoryError):
            return texts.MEMORY_GONE
        return texts.forgotten(await self.chat.forget(self.scope, [memory.id]))

    async def _page(self, pending: _Page, text: str) -> str | None:
        if _NEXT.match(text) and pending.page + 1 < pending.pages:
            return await self.memories(pending.query, pending.page + 1, pending.archived)
        if _PREV.match(text) and pending.page > 0:
            return await self.memories(pending.query, pending.page - 1, pending.archived)
        if _ARCHIVED.match(text) and not pending.archived:
            return await self.memories(archived=True)
        if _BACK.match(text) and (pending.archived or pending.query):
            return await self.memories()
        match = next((m for m in (p.match(text) for p in _ITEM_ACTIONS) if m), None)
        if match is None:
            return None
        verb = _VERBS[match.group("verb")]
        chosen = _value(match.group("n"))
        if not 1 <= chosen <= len(pending.shown):
            self._pending = pending
            return f"这一页没有第 {chosen} 条。"
        memory = pending.shown[chosen - 1]
        if (verb is None) != pending.archived:  # 恢复 only in the archived view, the rest only outside it
            self._pending = pending
            can = "“恢复 1”" if pending.archived else "“忘掉 1”“归档 1”“升级 1”"
            return f"这一页上不能这样处理，可以{can}。"
        note = await self._act(memory, verb)
        return await self.memories(pending.query, pending.page, pending.archived, note=note)

    async def _act(self, memory: Memory, verb: Action | None) -> str:
        now = self.now()
        try:
            if verb is None:
                restored = await self.engine.restore(self.scope, memory.id, now)
                return f"已恢复：{restored.shown}"
            if verb is Action.FORGET:
                await self.engine.get(self.scope, memory.id)
                return texts.forgotten(await self.chat.forget(self.scope, [memory.id]))
            if verb is Action.ARCHIVE:
                return texts.review_done(await self.engine.archive(self.scope, memory.id, now), Action.ARCHIVE)
            if memory.tier is Tier.LONG:
                return f"“{memory.shown}”已经是{texts.tier_name(Tier.LONG.value)}了。"
            return texts.review_done(await self.engine.promote(self.scope, memory.id, now), Action.PROMOTE)
        except (MemoryNotFoundError, NotYourMemoryError):
            return texts.MEMORY_GONE
