"""What users and the model read from the plugin (Chinese), and the markers that fence injected memory."""

from __future__ import annotations

from companion.core.week import WeekSummary
from companion.engine.weekly import weekly_text

# Fences around everything the plugin puts into a request: the next request scrubs them from the history
# AstrBot saved, so one member's memories never stay in a group's shared conversation.
BEGIN = "<companion-memory>"
END = "</companion-memory>"

GUIDANCE = (
    "你有长期记忆工具（companion_memory_*），它们只作用于当前正在说话的这个人。"
    "当对方明确让你记住什么、说出持久的偏好、事实或对你的要求时，用 companion_memory_add 保存"
    "（type：preference 偏好 / fact 事实 / instruction 要求 / event 事件；importance 0-100；"
    "tier：long 长期 / medium 几周 / short 几天；只在某个时刻前有效的事用 valid_seconds 给出有效秒数）。"
    "对方纠正旧信息时用 companion_memory_update；对方让你忘掉时用 companion_memory_forget；"
    "需要回忆更多细节时用 companion_memory_search 或 companion_memory_list。"
    "不要保存寒暄、一次性的小事或别人的隐私；不要向其他人透露这些记忆。"
)

PROFILE = "关于正在和你说话的这个人（长期了解）：{core}"
TRAITS = "这个人最近的情况（和这句话有关）："
HEADER = "关于正在和你说话的这个人，你记得（仅供参考，不必逐条提起）："
RECALLED = "和这句话相关的回忆："

NOTHING = "我还没有记住关于你的事。"
YOU_SAID = "我记得关于你的这些（{count} 条）："
MORE = "……还有 {more} 条没有列出（群里只列前几条，可以让我搜索某件事）。"
SENT_PRIVATELY = "已私聊发给你了。"
FORGOT_ONE = "好的，已经忘掉第 {id} 条。"
NOT_YOURS = "没有找到这条记忆（编号 {id}）。"
CONFIRM_ALL = "确定要忘掉我记得的关于你的全部 {count} 条吗？确定请发送 /忘记全部 确认"
FORGOT_ALL = "好的，已经全部忘掉了（{count} 条）。"
USAGE_FORGET = "用法：/忘记 <编号>，编号见 /我的记忆"
WEEKLY_ON = "好的，每周一我会私聊告诉你这周记住了什么。发送 /每周总结 off 关闭。"
WEEKLY_OFF = "好的，不再发送每周记忆小结。"
WEEKLY_USAGE = "用法：/每周总结 on 或 /每周总结 off（每周一私聊发送这周记住的事）"
WEEKLY_PRIVATE_ONLY = "每周总结只在私聊里发送：请私聊我发送 /每周总结 on。"
FOLLOWUP_HOW_TO_STOP = "\n\n（这是我主动发来的问候。不想收到的话，私聊我发送 /主动问候 off。）"
FOLLOWUP_ON = "好的，你说过的事（出差、考试、生日……）过后我会主动私聊问问你。发送 /主动问候 off 关闭。"
FOLLOWUP_OFF = "好的，我不再主动发消息问候了；聊天时我还是会记得问一句。发送 /主动问候 on 重新打开。"
FOLLOWUP_USAGE = "用法：/主动问候 on 或 /主动问候 off（你说过的事过后，是否主动私聊问候你）"
FOLLOWUP_PRIVATE_ONLY = "主动问候只在私聊里设置：请私聊我发送 /主动问候 on 或 off。"

ADMIN_ADDED = "已为 {user} 增加记忆 #{id}。"
ADMIN_DELETED = "已删除 {user} 的记忆 #{id}。"
ADMIN_EDITED = "已修改 {user} 的记忆 #{id}。"
ADMIN_USAGE_ADD = "用法：/增加记忆 <用户ID> <内容> [重要性1-10] [有效秒数]"
ADMIN_USAGE_DELETE = "用法：/删除记忆 <用户ID> <编号>"
ADMIN_USAGE_EDIT = "用法：/修改记忆 <用户ID> <编号> <内容> [重要性1-10]"
ADMIN_EXPORTED = "已导出 {count} 条记忆：{path}"
ADMIN_IMPORTED = "导入完成：新增 {added} 条，已存在跳过 {skipped} 条，无法识别 {bad} 个。"
ADMIN_NOT_FOUND = "{user} 没有编号为 {id} 的记忆。"

TOOL_BAD = "参数不对：{why}"


def weekly(week: WeekSummary) -> str:
    """The weekly summary as the Telegram bot words it, pointing at the plugin's own list command."""
    return weekly_text(week, "/我的记忆")
