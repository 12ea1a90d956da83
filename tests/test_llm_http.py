"""The HTTP client under the openai SDK (companion/llm/http.py): the same requests as the SDK's own
aiohttp client, the same answers, and every failure still one the SDK retries and maps."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2
import openai
import pytest
from aiohttp import web
from openai._utils._json import openapi_dumps

from companion.core.errors import LLMUnavailableError
from companion.llm.client import JsonArray, LLMClient, Message, _http_client
from companion.llm.http import LeanHttpClient

COMPLETION = {
    "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "你好呀"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Recorder:
    """A server on 127.0.0.1 that records each request and answers with ``handler``."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.handler: Handler = self.complete

    async def complete(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(COMPLETION)

    async def _any(self, request: web.Request) -> web.StreamResponse:
        self.seen.append({"method": request.method, "path": request.path_qs, "headers": dict(request.headers),
                          "body": await request.read()})
        return await self.handler(request)


@pytest.fixture
async def server() -> AsyncIterator[tuple[Recorder, str]]:
    recorder = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder._any)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield recorder, f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


def sdk(base_url: str, http_client: httpx2.AsyncClient, **options: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="sk-test", base_url=base_url, http_client=http_client, **options)


def lean() -> httpx2.AsyncClient:
    client = _http_client()
    assert isinstance(client, LeanHttpClient)  # the bot's dependencies include aiohttp
    return client


async def test_the_requests_are_the_ones_the_sdks_own_client_sends(server: tuple[Recorder, str]) -> None:
    recorder, url = server
    messages = [{"role": "system", "content": "你是小暖"}, {"role": "user", "content": "今天好累 😮‍💨"}]
    for http in (openai.DefaultAioHttpClient(), lean()):
        client = sdk(url, http, max_retries=0)
        made = await client.chat.completions.create(model="deepseek-chat", messages=messages,  # type: ignore[arg-type]
                                                    temperature=0.8)
        assert made.choices[0].message.content == "你好呀"
        raw = await client.post("/chat/completions", body={"model": "m", "messages": messages}, cast_to=bytes)
        assert json.loads(raw) == COMPLETION
        await client.close()
    theirs, ours = recorder.seen[:2], recorder.seen[2:]
    for a, b in zip(theirs, ours, strict=True):
        assert (a["method"], a["path"], a["body"]) == (b["method"], b["path"], b["body"])
        assert a["headers"] == b["headers"]


async def test_a_compressed_answer_is_decoded(server: tuple[Recorder, str]) -> None:
    recorder, url = server

    async def gzipped(request: web.Request) -> web.StreamResponse:
        return web.Response(body=gzip.compress(json.dumps(COMPLETION).encode()), content_type="application/json",
                            headers={"Content-Encoding": "gzip"})

    recorder.handler = gzipped
    client = sdk(url, lean(), max_retries=0)
    assert json.loads(await client.post("/chat/completions", body={}, cast_to=bytes)) == COMPLETION
    await client.close()


async def test_a_redirect_is_followed_as_the_sdk_asks(server: tuple[Recorder, str]) -> None:
    recorder, url = server

    async def moved(request: web.Request) -> web.StreamResponse:
        if request.path.endswith("/old"):
            raise web.HTTPTemporaryRedirect("/v1/chat/completions")
        return web.json_response(COMPLETION)

    recorder.handler = moved
    client = sdk(url, lean(), max_retries=0)
    assert json.loads(await client.post("/old", body={"a": 1}, cast_to=bytes)) == COMPLETION
    assert [s["path"] for s in recorder.seen] == ["/v1/old", "/v1/chat/completions"]
    assert recorder.seen[1]["body"] == recorder.seen[0]["body"]  # a 307 sends the body again
    await client.close()


async def test_a_timeout_is_the_sdks_timeout_and_is_retried(server: tuple[Recorder, str]) -> None:
    recorder, url = server

    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(2)
        return web.json_response(COMPLETION)

    recorder.handler = slow
    client = sdk(url, lean(), max_retries=1, timeout=0.2)
    with pytest.raises(openai.APITimeoutError):
        await client.post("/chat/completions", body={}, cast_to=bytes)
    assert len(recorder.seen) == 2
    await client.close()


async def test_a_server_that_hangs_up_is_a_connection_error_and_is_retried(server: tuple[Recorder, str]) -> None:
    recorder, url = server

    async def hang_up(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.close()
        await asyncio.sleep(0.1)
        return web.json_response(COMPLETION)

    recorder.handler = hang_up
    client = sdk(url, lean(), max_retries=2)
    with pytest.raises(openai.APIConnectionError) as raised:
        await client.post("/chat/completions", body={}, cast_to=bytes)
    assert not isinstance(raised.value, openai.APITimeoutError)
    assert len(recorder.seen) == 3
    await client.close()


async def test_a_cut_off_answer_is_a_connection_error(server: tuple[Recorder, str]) -> None:
    recorder, url = server
    body = json.dumps(COMPLETION).encode()

    async def cut(request: web.Request) -> web.StreamResponse:
        answer = web.StreamResponse(headers={"Content-Type": "application/json", "Content-Length": str(len(body))})
        await answer.prepare(request)
        await answer.write(body[: len(body) // 2])
        assert request.transport is not None
        request.transport.close()
        return answer

    recorder.handler = cut
    client = sdk(url, lean(), max_retries=0)
    with pytest.raises(openai.APIConnectionError):
        await client.post("/chat/completions", body={}, cast_to=bytes)
    await client.close()


async def test_nobody_listening_is_unavailable_through_the_llm_client() -> None:
    llm = LLMClient(api_key="sk-test", base_url="http://127.0.0.1:9/v1", model="m", max_retries=0, timeout=2)
    with pytest.raises(LLMUnavailableError, match="APIConnectionError"):
        await llm.chat([{"role": "user", "content": "hi"}])
    await llm.close()


async def test_status_errors_are_the_sdks(server: tuple[Recorder, str]) -> None:
    recorder, url = server

    async def refuse(request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": {"message": "bad key"}}, status=401)

    recorder.handler = refuse
    client = sdk(url, lean(), max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="bad key"):
        await client.post("/chat/completions", body={}, cast_to=bytes)
    await client.close()


@pytest.mark.parametrize("url", ["/chat/completions", "chat/completions"])
def test_a_relative_url_is_merged_with_the_base_every_time(url: str) -> None:
    client = LeanHttpClient(base_url="http://127.0.0.1:1/v1/")
    assert str(client.build_request("POST", url).url) == "http://127.0.0.1:1/v1/chat/completions"
    assert str(client.build_request("POST", url).url) == "http://127.0.0.1:1/v1/chat/completions"


def test_absolute_urls_are_parsed_once_and_the_memory_of_them_is_bounded() -> None:
    client = LeanHttpClient()
    first = client.build_request("POST", "http://127.0.0.1:1/v1/chat/completions", content=b"{}")
    again = client.build_request("POST", "http://127.0.0.1:1/v1/chat/completions", content=b"{}")
    assert first.url == again.url and again.read() == b"{}"
    for n in range(500):
        request = client.build_request("GET", f"http://127.0.0.1:1/v1/models?page={n}")
        assert request.url.params["page"] == str(n)
    assert len(client._urls) <= 64


async def test_the_llm_clients_body_is_the_sdks_encoding_with_the_tools_spliced_in(
        server: tuple[Recorder, str]) -> None:
    """LLMClient hands the SDK the body as bytes (``request_body``) so the tool definitions are encoded once:
    the wire carries exactly what the SDK's encoder makes of the same request."""
    recorder, url = server
    tools = JsonArray([{"type": "function", "function": {"name": "recall", "description": "找回记忆",
                                                          "parameters": {"type": "object", "properties": {}}}}])
    messages: list[Message] = [{"role": "user", "content": "还记得年糕吗 😺"}]
    llm = LLMClient(api_key="sk-test", base_url=url, model="deepseek-chat", max_retries=0)
    await llm.complete(messages, tools=tools, tool_choice="auto", temperature=0.5, max_tokens=9)
    await llm.complete(messages, temperature=0.5, max_tokens=9)
    await llm.close()
    with_tools, plain = recorder.seen
    fields = {"model": "deepseek-chat", "messages": messages, "temperature": 0.5, "max_tokens": 9}
    assert with_tools["body"] == openapi_dumps({**fields, "tool_choice": "auto", "tools": list(tools)})
    assert plain["body"] == openapi_dumps(fields)
    assert with_tools["headers"]["Content-Type"] == "application/json"
    assert json.loads(with_tools["body"])["tools"][0]["function"]["description"] == "找回记忆"
