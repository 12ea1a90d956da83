"""Real AstrBot with the built plugin, driven over stdin/stdout (run by the AstrBot virtualenv's Python).

``python harness.py ROOT LLM_URL [--no-plugin] [--telegram BOT_API_URL]``: ROOT is AstrBot's root
(``data/plugins/`` may hold the built plugin); ``--telegram`` adds AstrBot's own Telegram adapter, polling
the fake Bot API at that address.
Each stdin line is a JSON command; each answer one JSON line on stdout (AstrBot's logs go to stderr):
``{"op": "send", "platform", "sender", "group", "text"}`` runs one message through AstrBot's pipeline as
its event bus does and answers ``{"replies": [...], "files": [...]}``; ``{"op": "install", "zip"}``
installs the plugin from its zip as the WebUI's upload does; ``{"op": "measure"}`` answers the
plugin's start-up, hook overhead and the process's memory; ``{"op": "install_url", "url", "proxy"}``
installs from a repository URL as the WebUI does; ``{"op": "weekly", "now"}`` runs the plugin's weekly job
at that ISO time, ``{"op": "followups", "now"}`` its follow-up round; ``{"op": "stop"}`` stops AstrBot and exits.
Messages are events of any platform id (AstrBot's webchat adapter speaks for one platform only), so one
AstrBot serves QQ-like, Lark-like and webchat senders, private and in groups, side by side."""
# mypy: ignore-errors

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT, LLM_URL = Path(sys.argv[1]), sys.argv[2]
BASELINE = "--no-plugin" in sys.argv[3:]  # AstrBot alone, for the benchmark's side-by-side baseline
TELEGRAM = sys.argv[sys.argv.index("--telegram") + 1] if "--telegram" in sys.argv else ""
# AstrBot logs to stdout: the protocol keeps the real stdout, everything else goes to stderr.
PROTOCOL = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr
os.environ["ASTRBOT_ROOT"] = str(ROOT)
os.environ["ASTRBOT_DISABLE_METRICS"] = "1"
os.chdir(ROOT)
sys.path.insert(0, str(ROOT))
PLUGIN = "astrbot_plugin_companion_memory"
ADMIN = "admin1"
TELEGRAM_ADMIN = "9001"


def write_config() -> None:
    for folder in ("config", "plugins", "plugin_data", "temp"):  # what `astrbot init` and its main.py make
        (ROOT / "data" / folder).mkdir(parents=True, exist_ok=True)
    path = ROOT / "data" / "cmd_config.json"
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "provider": [{
            "id": "fake", "provider": "openai", "type": "openai_chat_completion", "provider_type": "chat_completion",
            "enable": True, "key": ["sk-test"], "api_base": LLM_URL, "timeout": 30, "model": "deepseek-chat",
            "modalities": ["text", "tool_use"],
        }],
        "provider_settings": {"enable": True, "default_provider_id": "fake", "streaming_response": False},
        "admins_id": [ADMIN, TELEGRAM_ADMIN], "t2i": False, "t2i_endpoint": "http://127.0.0.1:9/",
        "platform_settings": {"unique_session": False, "rate_limit": {"time": 60, "count": 1000}},
        "dashboard": {"enable": False},
        "platform": [{
            "id": "telegram", "type": "telegram", "enable": True, "telegram_token": "123456:TEST",
            "start_message": "hi", "telegram_api_base_url": f"{TELEGRAM}/bot",
            "telegram_file_base_url": f"{TELEGRAM}/file/bot", "telegram_command_register": False,
            "telegram_command_auto_refresh": False,
        }] if TELEGRAM else [],
    }), encoding="utf-8")


write_config()
started = time.perf_counter()

from astrbot.api.event import AstrMessageEvent  # noqa: E402
from astrbot.core import LogBroker, db_helper  # noqa: E402
from astrbot.core.core_lifecycle import AstrBotCoreLifecycle  # noqa: E402
from astrbot.core.message.components import File, Plain  # noqa: E402
from astrbot.core.platform import AstrBotMessage, MessageMember, MessageType, PlatformMetadata  # noqa: E402
from astrbot.core.platform.astrbot_message import Group  # noqa: E402
from astrbot.core.provider.entities import ProviderRequest  # noqa: E402


class HarnessEvent(AstrMessageEvent):
    def __init__(self, text: str, platform: str, sender: str, group: str) -> None:
        message = AstrBotMessage()
        message.type = MessageType.GROUP_MESSAGE if group else MessageType.FRIEND_MESSAGE
        message.self_id = "bot"
        message.session_id = group or sender
        message.message_id = uuid.uuid4().hex
        message.sender = MessageMember(sender, sender)
        if group:
            message.group = Group(group_id=group)
        message.message = [Plain(text)]
        message.message_str = text
        message.raw_message = None
        meta = PlatformMetadata(name=platform, description=platform, id=platform)
        super().__init__(text, message, meta, message.session_id)
        self.replies: list[str] = []
        self.files: list[str] = []

    async def send(self, message) -> None:
        if message is None:
            return
        for part in message.chain:
            if isinstance(part, Plain):
                self.replies.append(part.text)
            elif isinstance(part, File):
                self.files.append(part.file_ or "")


async def main() -> None:
    lifecycle = AstrBotCoreLifecycle(LogBroker(), db_helper)
    await lifecycle.initialize()
    runner = asyncio.create_task(lifecycle.start())
    await asyncio.sleep(0.2)
    boot = time.perf_counter() - started
    def loaded():
        star = lifecycle.star_context.get_registered_star(PLUGIN)
        return None if star is None else star.star_cls

    plugin = loaded()
    if plugin is None and not BASELINE and (ROOT / "data" / "plugins" / PLUGIN).exists():
        raise SystemExit(f"plugin {PLUGIN} did not load")
    loop = asyncio.get_running_loop()
    out = PROTOCOL
    print(json.dumps({"ready": True, "boot_seconds": round(boot, 3)}), file=out, flush=True)
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        command = json.loads(line)
        if command["op"] == "send":
            event = HarnessEvent(command["text"], command["platform"], command["sender"], command.get("group", ""))
            info = lifecycle.astrbot_config_mgr.get_conf_info(event.unified_msg_origin)
            await lifecycle.pipeline_scheduler_mapping[info["id"]].execute(event)
            # Learning runs in the background: let it finish before the answer (when the engine is open).
            if plugin is not None and plugin._service is not None:
                await plugin._service.wait_idle()
            print(json.dumps({"replies": event.replies, "files": event.files}, ensure_ascii=False), file=out,
                  flush=True)
        elif command["op"] == "install":  # the WebUI's upload: AstrBot unpacks the zip and loads it
            await lifecycle.plugin_manager.install_plugin_from_file(command["zip"])
            plugin = loaded()
            print(json.dumps({"installed": plugin is not None}), file=out, flush=True)
        elif command["op"] == "install_url":  # the WebUI's "install from a repository URL", its proxy set
            await lifecycle.plugin_manager.install_plugin(command["url"], command.get("proxy", ""))
            plugin = loaded()
            print(json.dumps({"installed": plugin is not None}), file=out, flush=True)
        elif command["op"] in ("weekly", "followups"):
            from datetime import datetime

            job = plugin.weekly if command["op"] == "weekly" else plugin.followups
            sent = await job(datetime.fromisoformat(command["now"]))
            print(json.dumps({"sent": sent}), file=out, flush=True)
        elif command["op"] == "measure":
            print(json.dumps(await measure(plugin)), file=out, flush=True)
        elif command["op"] == "stop":
            break
    if plugin is not None:
        await plugin.terminate()
    await lifecycle.stop()
    runner.cancel()
    print(json.dumps({"stopped": True}), file=out, flush=True)


async def measure(plugin) -> dict[str, float]:
    """The plugin's own costs: opening its engine, the request hook per call (20 memories, recall on), and
    the process's peak memory (AstrBot's alone with ``--no-plugin``)."""
    import importlib
    import resource

    found: dict[str, float] = {}
    if plugin is not None:
        await plugin.terminate()
        began = time.perf_counter()
        service = await plugin.service()
        found["open_seconds"] = round(time.perf_counter() - began, 4)
        scopes = importlib.import_module(f"data.plugins.{PLUGIN}.companion.hosts.astrbot.scopes")
        speaker = scopes.Speaker("qq", "bench")
        for i in range(20):
            await service.add(speaker, f"第{i}件事：喜欢游泳和爬山{i}")
        event = HarnessEvent("我最近在学游泳，周末去哪里玩好", "qq", "bench", "")
        timings = []
        for _ in range(50):
            req = ProviderRequest(prompt=event.message_str, contexts=[], system_prompt="你是助手。")
            began = time.perf_counter()
            await plugin.remind(event, req)
            timings.append(time.perf_counter() - began)
        found["hook_ms_median"] = round(statistics.median(timings) * 1000, 3)
    found["max_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return found


if __name__ == "__main__":
    asyncio.run(main())
