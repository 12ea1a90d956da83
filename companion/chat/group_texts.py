"""What users read about group chats, in Chinese (the private-chat texts live in ``texts``)."""

from __future__ import annotations

from companion.chat.command_table import Place, help_lines

GROUP_NOT_STARTED = "你在这个群里还没开启陪伴模式哦。发送 /start_aiGF@{bot} 开启（只对你自己生效）。"


def group_help() -> str:
    """/help in a group, from the command table; ``{bot}`` is filled with the bot's username."""
    return (
        "我是小伴。在群里，@我、回复我的消息，或者发带 @{bot} 的命令，我才会回答。\n\n"
        f"{help_lines(Place.GROUP, '@{bot}')}\n\n"
        "群管理员：\n"
        f"{help_lines(Place.GROUP_ADMIN, '@{bot}')}\n\n"
        "你在这个群里说的事只用在这个群里，不会带到别的群或私聊。"
    )


GROUP_HELP = group_help()
SHARE_ON = "好的，在群里和你聊天时，我也会用上你私聊时告诉我的事（只对你自己）。"
SHARE_OFF = "好的，群里不会再用你私聊时的记忆。"
SHARE_STATE = "群里使用私聊记忆：{state}。用 /share_private on 或 /share_private off 切换。"
ADMINS_ONLY = "只有群管理员可以改这个设置。"
GROUP_MEMORY_ON = "本群的记忆已打开：开启陪伴模式的人说的事，我会记在这个群里。"
GROUP_MEMORY_OFF = "本群的记忆已关闭：我在这个群里不再记住新东西，也不会用上已有的记忆。"
GROUP_MEMORY_STATE = "本群的记忆：{state}。管理员可用 /group_memory on 或 /group_memory off 切换。"
CONFIRM_FORGET_GROUP = "确定要清除本群所有人的记忆吗？这不能撤销。"
FORGET_GROUP_YES = "确定清除"
FORGET_GROUP_NO = "取消"
GROUP_FORGOTTEN = "已清除本群的记忆（{count} 条）。"
SENT_PRIVATELY = "我私信你了。"
START_PRIVATE_FIRST = "这些内容不方便发在群里。先私聊我发一次 /start，我就能私信给你了。"
ONLY_PRESSER = "这个按钮不是给你的。"


def on_off(value: bool) -> str:
    return "开" if value else "关"
SOME_GROUP = "一个群聊"
ANONYMOUS_ADMIN = (
    "你现在是以匿名管理员（群的身份）发言，我没法记住“群”这个身份的事。请切换回你自己的账号再试。"
    "管理员命令 /group_memory 和 /forget_group 匿名也能用。"
)
AS_CHANNEL = "以频道身份发的消息我不会回答，也不会记住。请用你自己的账号和我说话。"
