"""Inline keyboards and their callback data. Callback data carries only a memory handle and an action;
who may act on it is decided when pressed, against the presser's own scope (never trusted from data).

A group's memories are listed in the user's private chat, where the presser's own scope would be the
private one; those buttons (the ``Group*CB`` classes) name their (group, user) scope, and a press counts
only when the presser is that user. Their own prefixes keep buttons already sent parseable."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from aiogram.filters.callback_data import CallbackData
from aiogram.types import InlineKeyboardMarkup
from aiogram.utils.keyboard import InlineKeyboardBuilder

from companion.chat.views import PAGE_SIZE as PAGE_SIZE  # the handlers and tests import them from here
from companion.chat.views import QUERY_CHARS as QUERY_CHARS
from companion.core.models import Memory, Scope, Status, Tier
from companion.core.text import sendable
from companion.core.tiers import Action, Suggestion

CALLBACK_BYTES = 64  # Telegram's limit on a button's callback data, in UTF-8 bytes
ALERT_CHARS = 190  # the answer to a button press (Telegram allows 200 characters)


# The ``action`` of each kind of button. The data fields stay plain strings, so a button with an action
# this version does not know (an old message, forged data) still reaches its handler, which ignores it.
class MemoryAction(StrEnum):
    OK = "ok"
    EDIT = "edit"
    FORGET = "forget"
    PROMOTE = "promote"
    ARCHIVE = "archive"
    RESTORE = "restore"


class ForgetAction(StrEnum):
    ONE = "one"
    ALL = "all"
    CANCEL = "cancel"


REVIEW_UNDO = "undo"  # a review button's action besides the ``tiers.Action`` values


class StartAction(StrEnum):
    ON = "on"


class MemoryCB(CallbackData, prefix="m"):
    """A button on one memory: receipts, /memories pages."""

    action: str  # MemoryAction
    handle: int
    page: int = 0


class UndoCB(CallbackData, prefix="u"):
    """A receipt's undo: the memory, and the kept copy of the words the save replaced."""

    handle: int
    earlier: int  # the handle of the kept copy


BACK = "↩️ 返回"


class PageCB(CallbackData, prefix="p"):
    page: int
    query: str = ""
    archived: bool = False


def page_query(query: str) -> str:
    """The search keyword as the page buttons can carry it: without the data's separator, and cut at a
    character boundary so any page's data fits Telegram's 64 bytes (a CJK character takes 3). ``/memories``
    searches with this same keyword, so every page lists the same matches."""
    text = sendable(query).replace(PageCB.__separator__, " ")  # forged data may hold a lone surrogate
    budget = CALLBACK_BYTES - len(PageCB(page=9999, query="", archived=True).pack().encode())
    return text.encode()[:budget].decode("utf-8", "ignore").strip()


class ForgetCB(CallbackData, prefix="f"):
    """/forget: pick one match, or confirm forgetting everything."""

    action: str  # ForgetAction
    handle: int = 0
    count: int = 0


class ReviewCB(CallbackData, prefix="r"):
    """A review button. ``undo`` carries what the press changed, so it can be put back for a minute."""

    action: str  # tiers.Action, or REVIEW_UNDO
    handle: int
    at: int = 0  # when the press happened (epoch seconds), for the undo window
    tier: str = ""  # the tier before a promote
    review: int = 0  # the review time before a keep (epoch seconds)
    was: str = ""  # the action being undone


class GroupForgetCB(ForgetCB, prefix="gf"):
    """/forget of a group's memories, confirmed in the user's private chat."""

    chat: int
    user: int


class GroupReviewCB(ReviewCB, prefix="gr"):
    """A review of a group's memories, sent to the user's private chat. No undo: with the scope the undo
    data would pass Telegram's 64-byte limit."""

    chat: int
    user: int


def _forget(scope: Scope | None, action: ForgetAction, handle: int = 0, count: int = 0) -> ForgetCB:
    if scope is None or scope.chat_id is None:
        return ForgetCB(action=action, handle=handle, count=count)
    return GroupForgetCB(action=action, handle=handle, count=count, chat=scope.chat_id, user=scope.user_id)


FOLLOWUP_STOP_BUTTON = "🤐 别再提"


class FollowUpCB(CallbackData, prefix="fu"):
    """The "别再提" button under a follow-up the companion wrote first: never bring this memory up again."""

    handle: int


def followup(handle: int) -> InlineKeyboardMarkup:
    kb = InlineKeyboardBuilder()
    kb.button(text=FOLLOWUP_STOP_BUTTON, callback_data=FollowUpCB(handle=handle))
    return kb.as_markup()


class StartCB(CallbackData, prefix="s"):
    action: str  # StartAction


def receipt(memory: Memory, replaced: Memory | None = None) -> InlineKeyboardMarkup:
    """``replaced``: the kept copy of the words the save replaced; a button puts them back."""
    kb = InlineKeyboardBuilder()
    kb.button(text="👌 好的", callback_data=MemoryCB(action=MemoryAction.OK, handle=memory.id))
    if replaced is not None:
        kb.button(text="↩️ 撤销", callback_data=UndoCB(handle=memory.id, earlier=replaced.id))
    kb.button(text="✏️ 修改", callback_data=MemoryCB(action=MemoryAction.EDIT, handle=memory.id))
    kb.button(text="🗑 忘掉", callback_data=MemoryCB(action=MemoryAction.FORGET, handle=memory.id))
    return kb.as_markup()


def is_receipt(markup: InlineKeyboardMarkup | None) -> bool:
    """Whether a message's buttons are a receipt's: only a receipt has the 👌 (``MemoryAction.OK``) button."""
    ok = MemoryCB.__prefix__ + MemoryCB.__separator__ + MemoryAction.OK.value + MemoryCB.__separator__
    return markup is not None and any((button.callback_data or "").startswith(ok)
                                      for row in markup.inline_keyboard for button in row)


def forget_choices(memories: Sequence[Memory], scope: Scope | None = None) -> InlineKeyboardMarkup:
    """``scope``: a group scope when the buttons go to the user's private chat."""
    kb = InlineKeyboardBuilder()
    for i, memory in enumerate(memories, start=1):
        kb.button(text=f"忘掉第{i}条", callback_data=_forget(scope, ForgetAction.ONE, memory.id))
    kb.button(text="取消", callback_data=_forget(scope, ForgetAction.CANCEL))
    kb.adjust(2)
    return kb.as_markup()


def forget_all(count: int, scope: Scope | None = None) -> InlineKeyboardMarkup:
    kb = InlineKeyboardBuilder()
    label = f"确定忘掉全部 {count} 条" if count else "确定清掉"
    kb.button(text=label, callback_data=_forget(scope, ForgetAction.ALL, count=count))
    kb.button(text="取消", callback_data=_forget(scope, ForgetAction.CANCEL))
    return kb.as_markup()


def _memory(action: MemoryAction, memory: Memory, page: int) -> MemoryCB:
    return MemoryCB(action=action, handle=memory.id, page=page)


def memory_page(memories: Sequence[Memory], page: int, pages: int, query: str, archived: bool) -> InlineKeyboardMarkup:
    kb = InlineKeyboardBuilder()
    widths: list[int] = []
    for i, memory in enumerate(memories, start=1):
        if memory.status is Status.ARCHIVED:
            kb.button(text=f"{i} 恢复", callback_data=_memory(MemoryAction.RESTORE, memory, page))
            widths.append(1)
            continue
        kb.button(text=f"{i} 忘掉", callback_data=_memory(MemoryAction.FORGET, memory, page))
        kb.button(text=f"{i} 归档", callback_data=_memory(MemoryAction.ARCHIVE, memory, page))
        count = 2
        if memory.tier is not Tier.LONG:
            kb.button(text=f"{i} 升级", callback_data=_memory(MemoryAction.PROMOTE, memory, page))
            count = 3
        widths.append(count)
    nav = 0
    if page > 0:
        kb.button(text="⬅️ 上一页", callback_data=PageCB(page=page - 1, query=query, archived=archived))
        nav += 1
    if page + 1 < pages:
        kb.button(text="下一页 ➡️", callback_data=PageCB(page=page + 1, query=query, archived=archived))
        nav += 1
    if not archived and not query:
        kb.button(text="🗂 已归档", callback_data=PageCB(page=0, archived=True))
        nav += 1
    if archived:
        kb.button(text=BACK, callback_data=PageCB(page=0))
        nav += 1
    kb.adjust(*widths, *([nav] if nav else []))
    return kb.as_markup()


def back_to_list() -> InlineKeyboardMarkup:
    """The way from an empty archive back to the main ``/memories`` view."""
    kb = InlineKeyboardBuilder()
    kb.button(text=BACK, callback_data=PageCB(page=0))
    return kb.as_markup()


def review(items: Sequence[tuple[Memory, Suggestion]], scope: Scope | None = None) -> InlineKeyboardMarkup:
    """``scope``: a group scope when the review goes to the user's private chat."""
    kb = InlineKeyboardBuilder()
    for i, (memory, _) in enumerate(items, start=1):
        for action, label in ((Action.PROMOTE, "升级"), (Action.KEEP, "保留"), (Action.ARCHIVE, "归档"),
                              (Action.FORGET, "忘掉")):
            if action is Action.PROMOTE and memory.tier is Tier.LONG:
                continue
            data = ReviewCB(action=action.value, handle=memory.id) if scope is None or scope.chat_id is None else \
                GroupReviewCB(action=action.value, handle=memory.id, chat=scope.chat_id, user=scope.user_id)
            kb.button(text=f"{i} {label}", callback_data=data)
    kb.adjust(*[3 if m.tier is Tier.LONG else 4 for m, _ in items])
    return kb.as_markup()


def undo(data: ReviewCB) -> InlineKeyboardMarkup:
    kb = InlineKeyboardBuilder()
    kb.button(text="↩️ 撤销（1分钟内）", callback_data=data)
    return kb.as_markup()


def start_companion() -> InlineKeyboardMarkup:
    kb = InlineKeyboardBuilder()
    kb.button(text="开启陪伴模式", callback_data=StartCB(action=StartAction.ON))
    return kb.as_markup()
