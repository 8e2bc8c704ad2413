"""A scripted, OpenAI- and Anthropic-compatible LLM server on 127.0.0.1, stdlib only.

Tests point litellm (or either SDK) at it to exercise the real HTTP path offline; on a GPU machine it
stands in for a model in a demo of the whole loop:

    python -m kb_agent.agent.fakeserver --replies replies/        # prints http://127.0.0.1:PORT
    kb-agent solve toy/relu --model openai/scripted --api-base http://127.0.0.1:PORT/v1

From Python:

    with FakeLLMServer(["```python\\n...\\n```", rate_limited(0.05), server_error()]) as srv:
        litellm.completion(model="openai/x", api_base=srv.openai_base, api_key="x", messages=...)
        srv.requests[0].body["messages"]

Each request takes the next item of the script, faults included; an exhausted script answers 400 (a
request error, so clients stop instead of retrying). With `by_turn=True` a request whose conversation
holds N assistant messages gets item N+1 instead, so concurrent conversations (`solve --jobs`) each walk
the script from its first item. `routes` gives conversations scripts of their own: a mapping from a text
(a problem's reference source, say) to a script; a conversation whose first user message contains a key
walks that key's script by turn (the longest key found wins; one found nowhere takes `script`). `latency_s` delays every answer by that many seconds (a model that
thinks), `failing(status)` answers every request, on any path, with that HTTP status (a provider in an
outage; 501 or 404: a server that is not OpenAI-compatible). Paths: `POST .../chat/completions` (OpenAI
format, with `usage`), `POST .../messages` (Anthropic format; give clients the root URL
`srv.anthropic_base`), `GET .../models`. A POST whose JSON body has no `messages` list is refused with 400
at once, as a real server validates a request, without using a script item (`invalid` records it,
`requests` does not): what a client's pre-start probe sends (`agent.llm.check_chat_route`).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class ScriptedReply:
    """One scripted answer. Build them with `reply`, `rate_limited`, `server_error`, `slow`, `malformed`,
    `empty_message`, `no_choices`, or pass a plain string for a text reply.

    Attributes:
        text: the assistant's message; None sends `content: null` (an empty message).
        status: HTTP status; anything but 200 sends an error body in the path's format.
        headers: extra response headers (e.g. `retry-after`).
        delay_s: seconds to wait before answering (a slow reply; cut short when the server stops).
        body: a raw response body sent as is (e.g. malformed JSON), overriding everything but status.
        finish_reason: OpenAI `finish_reason` ("stop", "length"); mapped to Anthropic's stop_reason.
        choices: False sends a 200 body whose `choices` list is empty.
        tokens_in, tokens_out: reported usage; None estimates 4 characters per token.
    """

    text: str | None = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    body: str | None = None
    finish_reason: str = "stop"
    choices: bool = True
    tokens_in: int | None = None
    tokens_out: int | None = None


def reply(text: str, **kw: Any) -> ScriptedReply:
    """A normal text reply (`finish_reason="length"` marks it as cut off at the token limit)."""
    return ScriptedReply(text=text, **kw)


def rate_limited(retry_after_s: float = 1.0) -> ScriptedReply:
    """HTTP 429 with `retry-after` (whole seconds, rounded up) and `retry-after-ms` headers."""
    headers = {
        "retry-after": str(max(1, math.ceil(retry_after_s))),
        "retry-after-ms": str(int(retry_after_s * 1000)),
    }
    return ScriptedReply(text=None, status=429, headers=headers)


def server_error(status: int = 500) -> ScriptedReply:
    """An HTTP 5xx (or any other error status) with an error body."""
    return ScriptedReply(text=None, status=status)


def slow(text: str, delay_s: float) -> ScriptedReply:
    """A text reply sent after `delay_s` seconds (to exercise client timeouts)."""
    return ScriptedReply(text=text, delay_s=delay_s)


def malformed(body: str = '{"choices": [ {"message": ') -> ScriptedReply:
    """HTTP 200 with a body that is not valid JSON."""
    return ScriptedReply(text=None, body=body)


def empty_message() -> ScriptedReply:
    """HTTP 200 whose assistant message has `content: null`."""
    return ScriptedReply(text=None)


def no_choices() -> ScriptedReply:
    """HTTP 200 whose `choices` list is empty."""
    return ScriptedReply(text=None, choices=False)


@dataclass
class RecordedRequest:
    """What a client sent: `headers` with lower-case names, `body` the parsed JSON (None when it was not
    JSON), `raw` the text."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    raw: str


_STOP_REASON = {"stop": "end_turn", "length": "max_tokens"}


class FakeLLMServer:
    """A `ThreadingHTTPServer` on `host:port` (port 0 picks a free one) in a daemon thread.

    Use as a context manager, or call `start()` / `stop()`. `requests` lists every request received,
    in order, but the invalid ones (`invalid`); `served` counts script items used. With `cycle=True` the script starts over when it
    runs out instead of answering 400. `by_turn` and `latency_s`: see the module docstring.
    """

    def __init__(
        self,
        script: Iterable[ScriptedReply | str] = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model: str = "scripted",
        cycle: bool = False,
        by_turn: bool = False,
        latency_s: float = 0.0,
        routes: Mapping[str, Iterable[ScriptedReply | str]] | None = None,
    ):
        if latency_s < 0:
            raise ValueError(f"latency_s must be 0 or more, got {latency_s}")
        self.script: list[ScriptedReply] = [reply(s) if isinstance(s, str) else s for s in script]
        self.host, self.port, self.model, self.cycle = host, port, model, cycle
        self.by_turn, self.latency_s = by_turn, latency_s
        self.routes = {
            k: [reply(s) if isinstance(s, str) else s for s in v] for k, v in (routes or {}).items()
        }
        self.failing_status: int | None = None
        self.requests: list[RecordedRequest] = []
        self.invalid: list[RecordedRequest] = []
        self.served = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT`, the root (what Anthropic clients want)."""
        if self._httpd is None:
            raise RuntimeError("FakeLLMServer is not running; use it as a context manager or call start()")
        return f"http://{self.host}:{self._httpd.server_address[1]}"

    @property
    def openai_base(self) -> str:
        """`http://127.0.0.1:PORT/v1`, the api_base for `openai/...` and `hosted_vllm/...` models."""
        return self.base_url + "/v1"

    @property
    def anthropic_base(self) -> str:
        """The api_base for `anthropic/...` models (the root: litellm appends `/v1/messages`)."""
        return self.base_url

    def start(self) -> FakeLLMServer:
        """Bind and serve in a daemon thread. Returns self."""
        self._stopping.clear()
        handler = type("_Handler", (_Handler,), {"server_ref": self})
        self._httpd = _Listener((self.host, self.port), handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-llm", daemon=True
        )
        self._thread.start()
        log.debug("fake LLM server on %s", self.base_url)
        return self

    def stop(self) -> None:
        """Stop serving (slow replies in flight are cut short) and close the socket."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self if self._httpd is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- script ----------------------------------------------------------------------------------------
    def add(self, *items: ScriptedReply | str) -> None:
        """Append items to the script (thread-safe)."""
        with self._lock:
            self.script.extend(reply(s) if isinstance(s, str) else s for s in items)

    def failing(self, status: int | None = 500) -> None:
        """From now on answer every request with HTTP `status` (recorded, no script item used); None
        goes back to the script."""
        with self._lock:
            self.failing_status = status

    def _next(self, request: RecordedRequest) -> ScriptedReply | None:
        with self._lock:
            self.requests.append(request)
            if self.failing_status is not None:
                return server_error(self.failing_status)
            if self.by_turn or self.routes:
                messages = (request.body or {}).get("messages") or []
                script = self._route(messages)
                i = sum(isinstance(m, dict) and m.get("role") == "assistant" for m in messages)
                if self.cycle and script:
                    i %= len(script)
                self.served += 1
                return script[i] if i < len(script) else None
            if self.served >= len(self.script):
                if not (self.cycle and self.script):
                    return None
                self.served = 0
            item = self.script[self.served]
            self.served += 1
            return item

    def _route(self, messages: list) -> list[ScriptedReply]:
        first = next(
            (m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"), ""
        )
        if not isinstance(first, str):  # content parts: [{"type": "text", "text": ...}, ...]
            first = "".join(p.get("text", "") for p in first or () if isinstance(p, dict))
        keys = [k for k in self.routes if k in first]
        return self.routes[max(keys, key=len)] if keys else self.script

    @property
    def last_body(self) -> dict[str, Any] | None:
        """The JSON body of the most recent request."""
        return self.requests[-1].body if self.requests else None


class _Listener(ThreadingHTTPServer):
    """A thread per connection, as `ThreadingHTTPServer`, with a listen backlog a sweep's burst fits in:
    the stdlib's 5 made some of 20 simultaneous first requests of `solve --jobs 20` fail to connect (a
    real server's backlog is hundreds: uvicorn's 2048)."""

    daemon_threads = True
    request_queue_size = 1024


class _Handler(BaseHTTPRequestHandler):
    server_ref: FakeLLMServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("fake LLM server: " + format, *args)

    def _send(self, status: int, payload: dict | str, headers: dict[str, str] | None = None) -> None:
        data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            log.debug("fake LLM server: client went away")

    def _stopped(self) -> bool:
        """After `stop()`, a request on a connection kept alive from before gets no answer and the
        connection closes, as a dead server's would (not a wait for the client's timeout)."""
        if self.server_ref._stopping.is_set():
            self.close_connection = True
            return True
        return False

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        if self._stopped():
            return
        if (failing := self.server_ref.failing_status) is not None:
            self._send(failing, _error_body(False, failing, "scripted fault"))
        elif self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": self.server_ref.model, "object": "model"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        if self._stopped():
            return
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode("utf-8", "replace")
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        path = self.path.split("?", 1)[0].rstrip("/")
        anthropic = path.endswith("/messages")
        if not (anthropic or path.endswith("/chat/completions")):
            if (failing := self.server_ref.failing_status) is not None:
                self._send(failing, _error_body(anthropic, failing, "scripted fault"))
                return
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        srv = self.server_ref
        request = RecordedRequest(
            "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body, raw
        )
        if not (isinstance(body, dict) and isinstance(body.get("messages"), list)):
            with srv._lock:
                srv.invalid.append(request)
                status = srv.failing_status or 400
            self._send(status, _error_body(anthropic, status, "invalid request: no messages"))
            return
        item = srv._next(request)
        if item is None:
            msg = f"fake LLM server: script exhausted after {srv.served} replies"
            self._send(400, _error_body(anthropic, 400, msg))
            return
        if (item.delay_s or srv.latency_s) and srv._stopping.wait(item.delay_s + srv.latency_s):
            self.close_connection = True  # stopped meanwhile: no answer, the connection closes
            return
        if item.body is not None:
            self._send(item.status, item.body, item.headers)
        elif item.status != 200:
            self._send(item.status, _error_body(anthropic, item.status, "scripted fault"), item.headers)
        else:
            model = (body or {}).get("model") or srv.model
            make = _anthropic_body if anthropic else _openai_body
            self._send(200, make(item, model, _prompt_chars(body)), item.headers)


def _prompt_chars(body: dict | None) -> int:
    if not body:
        return 0
    n = len(json.dumps(body.get("system", "")))
    return n + sum(len(json.dumps(m.get("content", ""))) for m in body.get("messages", []))


def _usage(item: ScriptedReply, prompt_chars: int) -> tuple[int, int]:
    tin = item.tokens_in if item.tokens_in is not None else max(1, prompt_chars // 4)
    tout = item.tokens_out if item.tokens_out is not None else len(item.text or "") // 4
    return tin, tout


def _openai_body(item: ScriptedReply, model: str, prompt_chars: int) -> dict:
    tin, tout = _usage(item, prompt_chars)
    choices = [
        {
            "index": 0,
            "message": {"role": "assistant", "content": item.text},
            "finish_reason": item.finish_reason,
        }
    ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices if item.choices else [],
        "usage": {"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout},
    }


def _anthropic_body(item: ScriptedReply, model: str, prompt_chars: int) -> dict:
    tin, tout = _usage(item, prompt_chars)
    content = [{"type": "text", "text": item.text}] if item.text else []
    return {
        "id": f"msg_{uuid.uuid4().hex[:12]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content if item.choices else [],
        "stop_reason": _STOP_REASON.get(item.finish_reason, item.finish_reason),
        "stop_sequence": None,
        "usage": {"input_tokens": tin, "output_tokens": tout},
    }


def _error_body(anthropic: bool, status: int, message: str) -> dict:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error")
    if anthropic:
        return {"type": "error", "error": {"type": kind, "message": f"{message} ({status})"}}
    return {"error": {"message": f"{message} ({status})", "type": kind, "code": status}}


# -- loading replies from files (the CLI) -------------------------------------------------------------
def load_replies(path: str | Path) -> list[ScriptedReply]:
    """Replies from a directory of `*.md` / `*.txt` files (sorted by name, one reply each) or a JSON
    file holding a list whose items are strings or objects with `ScriptedReply` fields (plus
    `retry_after_s` for a 429). Raises ValueError when nothing usable is there."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in (".md", ".txt") and f.is_file())
        if not files:
            raise ValueError(f"{p}: no *.md or *.txt reply files")
        return [reply(f.read_text()) for f in files]
    if p.suffix == ".json":
        items = json.loads(p.read_text())
        if not isinstance(items, list) or not items:
            raise ValueError(f"{p}: expected a non-empty JSON list of replies")
        return [_reply_from_json(x) for x in items]
    return [reply(p.read_text())]


def _reply_from_json(x: Any) -> ScriptedReply:
    if isinstance(x, str):
        return reply(x)
    if not isinstance(x, dict):
        raise ValueError(f"a reply must be a string or an object, got {type(x).__name__}")
    if "retry_after_s" in x:
        return rate_limited(float(x["retry_after_s"]))
    return ScriptedReply(**x)


def main(argv: list[str] | None = None) -> int:
    """`python -m kb_agent.agent.fakeserver --replies FILE_OR_DIR [--port N]`: serve until interrupted."""
    ap = argparse.ArgumentParser(
        prog="python -m kb_agent.agent.fakeserver", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--replies", required=True, help="a directory of *.md/*.txt replies, a JSON list, or one file"
    )
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    ap.add_argument("--cycle", action="store_true", help="start the script over when it runs out")
    ap.add_argument(
        "--by-turn",
        action="store_true",
        help="answer a conversation holding N assistant messages with reply N+1 (for concurrent runs)",
    )
    ap.add_argument(
        "--latency-s", type=float, default=0.0, help="seconds to wait before every answer (default 0)"
    )
    args = ap.parse_args(argv)
    if args.latency_s < 0:
        sys.stderr.write("error: --latency-s must be 0 or more\n")
        return 2
    try:
        script = load_replies(args.replies)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    srv = FakeLLMServer(
        script, port=args.port, cycle=args.cycle, by_turn=args.by_turn, latency_s=args.latency_s
    )
    try:
        srv.start()
    except OSError as e:
        sys.stderr.write(
            f"error: cannot serve on 127.0.0.1:{args.port} ({e.strerror or e}); pick another --port\n"
        )
        return 2
    with srv:
        sys.stdout.write(f"{srv.base_url}\n")
        sys.stdout.write(
            f"# {len(script)} replies; openai api_base: {srv.openai_base}  anthropic: {srv.anthropic_base}\n"
        )
        sys.stdout.flush()
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
