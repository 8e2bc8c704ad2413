"""The LLM client: the `LLM` protocol the agent loop calls, one thin layer over `litellm.completion`,
and a scripted fake.

`LiteLLMModel(LLMConfig(model="anthropic/claude-sonnet-4-5")).complete(messages)` returns an `LLMReply`
with the text, tokens, cost and latency of the call. Any litellm model string works (`openai/...`,
`anthropic/...`, `ollama/...`, `hosted_vllm/...`); `api_base` points it at a local OpenAI-compatible
server (then no key is needed). `model_for(config)` builds the `LLM` a config names: a built-in
scripted model for `scripted/NAME` (`scripted/demo`: no key, no server), else a `LiteLLMModel`.

Importing this module does not import litellm or touch the network: litellm loads on the first
`LiteLLMModel`, `context_window` or `fit_messages` call, with its offline model-price map.

Retries: tenacity is the only retry layer (litellm is called with `num_retries=0`, which also turns
off the provider SDK's own retries: the layers multiply otherwise). Exponential backoff with jitter on
rate limits, timeouts, connection errors, 5xx and malformed responses, honouring `retry-after`;
bounded in attempts and in total seconds. Authentication, bad requests, unknown models and context
overflows are never retried. An `LLMError` says whether it was `transient` (the retries ran out on a
failure that retrying could cure: the agent loop leaves such a trajectory resumable).

Before a run: a model string litellm knows no provider for fails when the `LiteLLMModel` is made
(`UnknownModelError`), and `preflight()` fails in seconds, naming the URL, when nothing listens at
`api_base` (`ModelUnreachable`) or, for an OpenAI-compatible provider, when the server there answers
its chat completions route with 404, 405 or 501 (`WrongEndpoint`: not an OpenAI-compatible server, or
a URL missing its `/v1`), instead of spending the retry budget on it.

During a run, one circuit breaker per `LiteLLMModel`, shared by the threads calling it: when a call's
retries run out on a failure of the endpoint rather than of the request (a lost connection or a 5xx),
or the endpoint answers 404/405/501 (with `api_base`; not retried), the call raises `EndpointDown`
and every other call, those waiting between retries included, raises it at once without asking the
server again; `down` holds it. Rate limits and timeouts do not open it (they belong to one request or
one quota, and the next call may pass). Client-side limits:
`rpm` (requests per minute, retries included) and `tpm` (tokens per minute) over a sliding 60 s window,
shared by every thread calling one model (`RateLimiter`).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from importlib.resources import files
from typing import Any, Protocol, runtime_checkable

from kb_agent.problems.errors import KBAgentError
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
)

log = logging.getLogger(__name__)

# the api key sent to a local server (api_base given) when the provider's env var is not set
DUMMY_API_KEY = "sk-no-key-needed"
REASONING_EFFORTS = ("minimal", "low", "medium", "high")
SCRIPTED_PREFIX = "scripted/"  # `scripted/demo`: a built-in scripted model (`model_for`)


class LLMError(KBAgentError):
    """A model call failed for good (after retries, or at once when retrying cannot help).

    The message is one line. `attempts` counts requests made; `retries` lists what each failed
    attempt raised (`{"attempt", "error", "wait_s"}`), for the store. `transient`: the last failure was
    one that retrying can cure (rate limit, timeout, connection, 5xx), so a later attempt may succeed,
    or the endpoint is down (`EndpointDown`): the trajectory is left to resume.
    """

    def __init__(
        self, message: str, *, attempts: int = 0, retries: list[dict] | None = None, transient: bool = False
    ):
        super().__init__(_one_line(message))
        self.attempts = attempts
        self.retries = retries or []
        self.transient = transient


class MissingKeyError(LLMError):
    """The provider's API key is not set; raised before any request is made."""


class UnknownModelError(LLMError):
    """litellm knows no provider for the model string; raised before any request is made."""


class ModelUnreachable(LLMError):
    """Nothing answers at the configured `api_base` (connection refused, no such host, timeout); raised
    by `LiteLLMModel.preflight` before a run starts."""


class WrongEndpoint(ModelUnreachable):
    """The server at `api_base` answers, but not to OpenAI chat completions (404, 405 or 501 on its
    route); raised by `LiteLLMModel.preflight` before a run starts."""


class EndpointDown(LLMError):
    """The model's endpoint failed, not the request: a call's retries ran out on a lost connection or
    a 5xx, or the endpoint answered 404/405/501. Every later call of the same `LiteLLMModel` raises it
    too, at once (the circuit breaker). Always `transient`: the trajectory is left to resume once the
    server is back (or `--api-base` is fixed)."""

    def __init__(self, message: str, *, attempts: int = 0, retries: list[dict] | None = None):
        super().__init__(message, attempts=attempts, retries=retries, transient=True)


class MalformedResponseError(Exception):
    """The server answered 200 with a body we cannot use (no choices). Retried like a 5xx."""


@dataclass
class LLMConfig:
    """How to call one model. Only `model` is required."""

    model: str
    """Any litellm model string: `openai/gpt-4o`, `anthropic/claude-sonnet-4-5`, `ollama/qwen2.5-coder`,
    `hosted_vllm/NAME`, or `openai/NAME` with `api_base` for any OpenAI-compatible server."""
    api_base: str | None = None
    """Server URL (`http://127.0.0.1:8000/v1` for OpenAI-compatible servers; the root URL for the
    Anthropic format). None: the provider's default (or its `*_API_BASE` env var)."""
    api_key: str | None = None
    """None: the provider's env var (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, ...); with `api_base` set
    and no env var, a dummy key is sent."""
    temperature: float | None = None
    """Sampling temperature; None leaves the provider's default (some reasoning models accept no other)."""
    max_tokens: int = 8192
    """Most tokens the model may generate per reply (reasoning tokens included for reasoning models)."""
    reasoning_effort: str | None = None
    """"low" | "medium" | "high" for reasoning models; passed through only when set."""
    timeout_s: float = 600.0
    """Seconds one request may take before it counts as a timeout (and is retried)."""
    max_attempts: int = 6
    """Most requests per call, the first one included."""
    max_retry_s: float = 300.0
    """Most seconds one call may spend, waits included: no retry is started that would end past this."""
    backoff_initial_s: float = 1.0
    """First backoff wait in seconds; doubles per retry, plus up to this much random jitter."""
    backoff_max_s: float = 60.0
    """Cap on one computed backoff wait, in seconds (a server's retry-after may ask for longer)."""
    fit_context: bool = True
    """Drop the oldest turns when the conversation would overflow the model's context window
    (`context_window`, else litellm's figure, else DEFAULT_CONTEXT_WINDOW)."""
    context_window: int | None = None
    """The model's input window in tokens, for a local or unknown model (`--context-window`); None:
    litellm's figure for the models it knows, DEFAULT_CONTEXT_WINDOW for the others."""
    drop_params: bool = True
    """Let litellm drop parameters the provider does not accept (e.g. temperature on o-series)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """More keyword arguments for `litellm.completion`, passed as they are (e.g. `{"top_p": 0.95}`)."""
    rpm: int | None = None
    """Most requests (retries included) started in any 60 s, over all threads calling this model; None:
    no limit. For a provider's requests-per-minute quota."""
    tpm: int | None = None
    """Most tokens (prompt + completion, as the server counted them) answered in any 60 s: a request
    waits while the calls answered in the last 60 s used this many. None: no limit."""

    def __post_init__(self) -> None:
        """Raises ValueError (one line) for a sampling setting no provider accepts."""
        if not self.model:
            raise ValueError("the model string is empty; give one such as openai/gpt-4o or scripted/demo")
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            raise ValueError(f"temperature {self.temperature} is outside 0..2")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be 1 or more, got {self.max_tokens}")
        if self.context_window is not None and self.context_window <= self.max_tokens:
            raise ValueError(
                f"context window {self.context_window} leaves no room for a prompt beside max_tokens "
                f"{self.max_tokens}; give a larger --context-window or a smaller --max-tokens"
            )
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be 1 or more, got {value}")
        if self.reasoning_effort is not None and self.reasoning_effort not in REASONING_EFFORTS:
            raise ValueError(
                f"reasoning effort {self.reasoning_effort!r}: choose {', '.join(REASONING_EFFORTS[:-1])} "
                f"or {REASONING_EFFORTS[-1]}"
            )


@dataclass
class LLMReply:
    """One model answer and what it cost."""

    text: str
    """The assistant message ("" when the server sent an empty message)."""
    tokens_in: int | None = None
    """Prompt tokens as the server counted them."""
    tokens_out: int | None = None
    """Completion tokens (reasoning included, for reasoning models)."""
    cost_usd: float | None = None
    """From litellm's offline price map; None when it does not know the model."""
    latency_s: float | None = None
    """Wall seconds from the first request to the reply, retries and waits included (the request that
    succeeded alone took `extra["request_s"]`)."""
    model: str | None = None
    """The model as the server named it in its answer."""
    finish_reason: str | None = None
    """"stop", "length" (cut off at max_tokens), ..."""
    raw: dict[str, Any] = field(default_factory=dict)
    """The response as JSON-able data."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Call details for the store: `attempts`, `retries` (one entry per failed attempt: attempt, error,
    wait_s), `request_s`, `dropped_messages`, `response_id`, and `reasoning_tokens` /
    `reasoning_content` when the provider returns them."""


@runtime_checkable
class LLM(Protocol):
    """What the agent loop needs from a language model (`LiteLLMModel`, `ScriptedModel`)."""

    name: str

    def complete(self, messages: list[dict]) -> LLMReply:
        """Answer a conversation (OpenAI-style `{"role", "content"}` dicts). Raises LLMError."""
        ...


# -- litellm ------------------------------------------------------------------------------------------
_litellm: Any = None


def _import_litellm() -> Any:
    """Import litellm offline (local model-price map, no debug banner). Cached."""
    global _litellm
    if _litellm is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        litellm.suppress_debug_info = True
        _litellm = litellm
    return _litellm


def required_env_vars(model: str, api_base: str | None = None) -> list[str]:
    """Env vars the provider of `model` needs that are not set (litellm's `validate_environment`).

    `*_API_BASE` entries are left out (litellm has defaults for those, e.g. Ollama's localhost).
    """
    litellm = _import_litellm()
    try:
        env = litellm.validate_environment(model=model, api_base=api_base)
    except Exception:  # an unknown provider: let the request itself say what is wrong
        return []
    return [k for k in env.get("missing_keys", []) if not k.endswith("_API_BASE")]


def resolve_api_key(config: LLMConfig) -> str | None:
    """The api_key to pass to litellm: the configured one, None (litellm reads the env var), or a dummy
    for a local server. Raises MissingKeyError when a hosted provider's key is not set."""
    if config.api_key:
        return config.api_key
    missing = required_env_vars(config.model, config.api_base)
    if not missing:
        return None
    if config.api_base:
        return DUMMY_API_KEY
    if len(missing) == 1:
        raise MissingKeyError(
            f"{missing[0]} is not set; export it, or use --api-base for a local server (model {config.model})"
        )
    raise MissingKeyError(
        f"none of {', '.join(missing)} is set; export one, or use --api-base for a local server (model {config.model})"
    )


NOT_SERVED = (404, 405, 501)
"""HTTP statuses saying that the endpoint does not serve the request's route (or, for 404, the model):
retrying cannot help, but another `--api-base` can (`EndpointDown` during a run, `WrongEndpoint` before)."""


def _status(exc: BaseException | None) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _is_retryable(exc: BaseException) -> bool:
    litellm = _import_litellm()
    if _status(exc) in NOT_SERVED:  # litellm raises APIError(status_code=405 or 501), NotFoundError for 404
        return False
    never = (
        litellm.AuthenticationError,
        litellm.PermissionDeniedError,
        litellm.BadRequestError,  # ContextWindowExceededError and ContentPolicyViolationError are these
        litellm.NotFoundError,
        litellm.UnprocessableEntityError,
    )
    if isinstance(exc, never):
        return False
    retry = (
        litellm.RateLimitError,
        litellm.Timeout,  # not a litellm.APIConnectionError (it subclasses openai's)
        litellm.APIConnectionError,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
        MalformedResponseError,
    )
    if isinstance(exc, retry):
        return True
    status = _status(exc)
    return isinstance(exc, litellm.APIError) and status is not None and status >= 500


def _is_endpoint_failure(exc: BaseException) -> bool:
    """A failure of the endpoint that every call would meet too: a lost connection or a 5xx (not a rate
    limit, a timeout or a malformed body: those belong to one request)."""
    litellm = _import_litellm()
    if isinstance(exc, (litellm.Timeout, litellm.RateLimitError, MalformedResponseError)):
        return False
    status = _status(exc)
    return isinstance(exc, litellm.APIConnectionError) or (status is not None and status >= 500)


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds a server asked us to wait (`retry-after-ms` or `retry-after` header), if it did."""
    headers = getattr(exc, "litellm_response_headers", None)
    if not headers:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    try:
        if headers.get("retry-after-ms") is not None:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        if headers.get("retry-after") is not None:
            return max(0.0, float(headers["retry-after"]))
    except (TypeError, ValueError):  # an HTTP date: not worth parsing, back off instead
        return None
    return None


class RateLimiter:
    """Client-side request and token limits over a sliding window, shared by threads.

    `wait()` blocks until a request may start (fewer than `rpm` started in the last `window_s` seconds,
    fewer than `tpm` tokens answered in them), records it and returns the seconds it waited;
    `add_tokens(n)` records the tokens of an answered call. `clock` and `sleep` are injectable for tests.
    """

    def __init__(
        self,
        rpm: int | None = None,
        tpm: int | None = None,
        *,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.rpm, self.tpm, self.window_s = rpm, tpm, window_s
        self._clock, self._sleep = clock, sleep
        self._started: deque[float] = deque()
        self._tokens: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()

    def wait(self) -> float:
        waited = 0.0
        while True:
            with self._lock:
                now = self._clock()
                while self._started and self._started[0] <= now - self.window_s:
                    self._started.popleft()
                while self._tokens and self._tokens[0][0] <= now - self.window_s:
                    self._tokens.popleft()
                delay = 0.0
                if self.rpm is not None and len(self._started) >= self.rpm:
                    delay = self._started[0] + self.window_s - now
                if self.tpm is not None and sum(n for _, n in self._tokens) >= self.tpm:
                    delay = max(delay, self._tokens[0][0] + self.window_s - now)
                if delay <= 0:
                    self._started.append(now)
                    return waited
            self._sleep(delay)
            waited += delay

    def add_tokens(self, n: int) -> None:
        if self.tpm is not None and n > 0:
            with self._lock:
                self._tokens.append((self._clock(), n))


def check_model(model: str, api_base: str | None = None) -> str:
    """The provider litellm finds for `model` ("openai", "anthropic", ...); raise UnknownModelError (one
    line, saying how to write a model string) when it knows none."""
    litellm = _import_litellm()
    try:
        return litellm.get_llm_provider(model=model, api_base=api_base)[1]
    except Exception:
        raise UnknownModelError(
            f"unknown model {model!r}: litellm knows no provider for it; write PROVIDER/MODEL, e.g. "
            "openai/gpt-4o, anthropic/claude-sonnet-4-5, ollama/NAME, or openai/NAME with --api-base "
            "for an OpenAI-compatible server (or scripted/demo)"
        ) from None


def check_reachable(api_base: str, timeout_s: float = 3.0) -> None:
    """Raise ModelUnreachable (one line naming `api_base`) when no TCP connection to its host and port
    opens within `timeout_s` seconds (port 80/443 by the scheme when the URL names none)."""
    url = urllib.parse.urlsplit(api_base if "://" in api_base else f"http://{api_base}")
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        raise ModelUnreachable(f"--api-base {api_base}: the port is not a number") from None
    if not url.hostname:
        raise ModelUnreachable(
            f"--api-base {api_base}: no host in the URL; write e.g. http://127.0.0.1:8000/v1"
        )
    try:
        socket.create_connection((url.hostname, port), timeout=timeout_s).close()
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__)
        raise ModelUnreachable(
            f"cannot reach the model server at {api_base} ({reason}); start it, or point --api-base at "
            "a running one"
        ) from None


OPENAI_COMPATIBLE = ("openai", "hosted_vllm", "lm_studio", "llamafile")
"""litellm providers that post to `api_base` + `/chat/completions` (what `check_chat_route` probes)."""


_PROBE_BODY_BYTES = 65536  # of a probe's successful answer, read to tell JSON from a web page


def _check_json_answer(api_base: str, url: str, status: int, kind: str, body: bytes) -> None:
    """Raise WrongEndpoint when the probe's successful answer is not JSON (each chat call would then
    fail to parse and be retried for about 40 s before its trajectory ended)."""
    try:
        json.loads(body)
    except ValueError:  # not JSON, or cut at _PROBE_BODY_BYTES (no API error answer is that long)
        raise WrongEndpoint(
            f"the model server at {api_base} does not serve OpenAI chat completions: POST {url} answered "
            f"{status} with {kind}, not JSON; point --api-base at an OpenAI-compatible server"
        ) from None


def check_chat_route(api_base: str, api_key: str | None = None, timeout_s: float = 3.0) -> None:
    """Raise WrongEndpoint (one line naming the URL and what it answered) when `api_base` +
    `/chat/completions`, the URL litellm posts to for an OpenAI-compatible provider, answers a POST of
    an empty JSON object with 404, 405 or 501, or with a success whose body is not JSON (a web page: a
    web app, a login or proxy page a redirect led to). An OpenAI-compatible server refuses that body at
    once (400 or 422: no model, no messages) without generating anything; any other answer, or none
    within `timeout_s` seconds, passes (the run's own calls then say more)."""
    url = (api_base if "://" in api_base else f"http://{api_base}").rstrip("/") + "/chat/completions"
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=b"{}", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status, kind = response.status, response.headers.get_content_type()
            body = response.read(_PROBE_BODY_BYTES)
    except urllib.error.HTTPError as e:
        e.close()
        status = e.code
    except (OSError, ValueError):  # no answer in time, TLS, a reset: not evidence of a wrong route
        return
    else:
        _check_json_answer(api_base, url, status, kind, body)
        return
    if status not in NOT_SERVED:
        return
    try:
        answer = f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        answer = str(status)
    hint = "" if urllib.parse.urlsplit(url).path.startswith("/v1/") else " (its URL usually ends in /v1)"
    raise WrongEndpoint(
        f"the model server at {api_base} does not serve OpenAI chat completions: POST {url} answered "
        f"{answer}; point --api-base at an OpenAI-compatible server{hint}"
    )


class _BreakerOpen(Exception):
    """Raised inside `LiteLLMModel.complete` instead of a request once its endpoint is down."""


class LiteLLMModel:
    """`LLM` over `litellm.completion`. Checks the model string (UnknownModelError) and the API key
    (MissingKeyError) on construction; `preflight()` checks that `api_base` answers, and serves chat
    completions. `down`: None, or the `EndpointDown` that opened the circuit breaker (module docstring);
    it stays open for the life of the object (a resumed run makes a new one).

    `sleep` is the function used to wait between retries and for the rate limits (tests pass a recorder);
    None waits on the breaker, so that a call waiting to retry stops as soon as it opens.
    """

    def __init__(self, config: LLMConfig, *, sleep: Callable[[float], None] | None = None):
        self.config = config
        self.name = config.model
        self.down: EndpointDown | None = None
        self._lock = threading.Lock()
        self._tripped = threading.Event()
        self._sleep = sleep if sleep is not None else self._tripped.wait
        self._litellm = _import_litellm()
        self.provider = check_model(config.model, config.api_base)
        self._api_key = resolve_api_key(config)
        limited = config.rpm or config.tpm
        self.limiter = RateLimiter(config.rpm, config.tpm, sleep=sleep or time.sleep) if limited else None

    def preflight(self, timeout_s: float = 3.0) -> None:
        """Before a run: raise ModelUnreachable within about `timeout_s` seconds when nothing listens at
        `api_base`, WrongEndpoint when an OpenAI-compatible provider's server there does not serve chat
        completions (`check_chat_route`). No check without `api_base` (a hosted provider's own endpoint)."""
        if self.config.api_base:
            check_reachable(self.config.api_base, timeout_s)
            if self.provider in OPENAI_COMPATIBLE:
                check_chat_route(self.config.api_base, self._api_key, timeout_s)

    def _wait(self, state: RetryCallState) -> float:
        c = self.config
        backoff = min(c.backoff_max_s, c.backoff_initial_s * 2 ** (state.attempt_number - 1))
        backoff += random.uniform(0, c.backoff_initial_s)
        exc = state.outcome.exception() if state.outcome else None
        asked = retry_after_s(exc) if exc is not None else None
        return backoff if asked is None else asked

    def _request_kwargs(self, messages: list[dict]) -> dict[str, Any]:
        c = self.config
        kw: dict[str, Any] = {
            "model": c.model,
            "messages": messages,
            "max_tokens": c.max_tokens,
            "timeout": c.timeout_s,
            "num_retries": 0,  # tenacity is the only retry layer; this also zeroes the SDK's max_retries
            "drop_params": c.drop_params,
        }
        if c.api_base:
            kw["api_base"] = c.api_base
        if self._api_key:
            kw["api_key"] = self._api_key
        if c.temperature is not None:
            kw["temperature"] = c.temperature
        if c.reasoning_effort:
            kw["reasoning_effort"] = c.reasoning_effort
        kw.update(c.extra)
        return kw

    def complete(self, messages: list[dict]) -> LLMReply:
        """One model answer to `messages`. Raises LLMError after retries or on a non-retryable error."""
        c = self.config
        sent = (
            fit_messages(messages, c.model, c.max_tokens, window=c.context_window)
            if c.fit_context
            else list(messages)
        )
        kwargs = self._request_kwargs(sent)
        retries: list[dict] = []
        attempts = 0
        t_start = time.monotonic()

        def record(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            wait = state.next_action.sleep if state.next_action else None
            retries.append({"attempt": state.attempt_number, "error": _describe(exc), "wait_s": wait})
            log.warning(
                "%s: attempt %d failed (%s); retrying in %.1f s",
                c.model,
                state.attempt_number,
                _describe(exc),
                wait or 0,
            )

        def attempt() -> tuple[Any, float]:
            nonlocal attempts
            if self.limiter is not None:
                self.limiter.wait()
            if self.down is not None:
                raise _BreakerOpen()
            attempts += 1
            t0 = time.monotonic()
            resp = self._litellm.completion(**kwargs)
            if not getattr(resp, "choices", None):
                raise MalformedResponseError("the server answered with no choices")
            if self.limiter is not None:
                usage = getattr(resp, "usage", None)
                self.limiter.add_tokens((getattr(usage, "prompt_tokens", 0) or 0)
                                        + (getattr(usage, "completion_tokens", 0) or 0))  # fmt: skip
            return resp, time.monotonic() - t0

        retrying = Retrying(
            retry=retry_if_exception(_is_retryable),
            wait=self._wait,
            stop=stop_after_attempt(max(1, c.max_attempts)) | stop_before_delay(c.max_retry_s),
            before_sleep=record,
            sleep=self._sleep,
            reraise=True,
        )
        try:
            resp, request_s = retrying(attempt)
        except Exception as e:
            if attempts > len(retries) and not isinstance(e, _BreakerOpen):
                retries.append({"attempt": attempts, "error": _describe(e), "wait_s": None})
            raise self._failure(e, attempts, retries) from e
        reply = self._to_reply(resp, latency_s=time.monotonic() - t_start)
        if c.api_base:  # where the reply came from (a resumed run may be pointed at another server)
            reply.extra["api_base"] = c.api_base
        reply.extra.update(
            attempts=attempts,
            retries=retries,
            request_s=round(request_s, 4),
            dropped_messages=len(messages) - len(sent),
        )
        return reply

    def _failure(self, exc: BaseException, attempts: int, retries: list[dict]) -> LLMError:
        """The LLMError a failed call raises: `EndpointDown` (opening the breaker) for a failure of the
        endpoint (`_is_endpoint_failure`, or 404/405/501 from `api_base`), or when it is open already."""
        c = self.config
        if isinstance(exc, _BreakerOpen):
            return EndpointDown(str(self.down), attempts=attempts, retries=retries)
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
        where = f"the model server at {c.api_base}" if c.api_base else "the provider"
        if c.api_base and _status(exc) in NOT_SERVED:
            message = (f"{c.model}: {where} does not serve chat completions for this model ({_describe(exc)}); "
                       "point --api-base at an OpenAI-compatible server that serves it")  # fmt: skip
        elif _is_endpoint_failure(exc):
            message = f"{c.model}: {where} stopped answering ({_describe(exc)}, {tries})"
        else:
            return LLMError(f"{c.model}: {_describe(exc)} ({tries})", attempts=attempts, retries=retries,
                            transient=_is_retryable(exc))  # fmt: skip
        down = EndpointDown(message, attempts=attempts, retries=retries)
        with self._lock:
            first, self.down = self.down is None, self.down or down
        if first:
            log.info("%s; no call asks it again in this run", message)
        self._tripped.set()
        return down

    def _to_reply(self, resp: Any, latency_s: float) -> LLMReply:
        choice = resp.choices[0]
        message = getattr(choice, "message", None)
        text = getattr(message, "content", None) or ""
        usage = getattr(resp, "usage", None)
        extra: dict[str, Any] = {"response_id": getattr(resp, "id", None)}
        details = getattr(usage, "completion_tokens_details", None)
        if getattr(details, "reasoning_tokens", None):
            extra["reasoning_tokens"] = details.reasoning_tokens
        reasoning = getattr(message, "reasoning_content", None)
        if reasoning:
            extra["reasoning_content"] = reasoning
        return LLMReply(
            text=text,
            tokens_in=getattr(usage, "prompt_tokens", None),
            tokens_out=getattr(usage, "completion_tokens", None),
            cost_usd=self._cost(resp),
            latency_s=round(latency_s, 4),
            model=getattr(resp, "model", None),
            finish_reason=getattr(choice, "finish_reason", None),
            raw=_as_dict(resp),
            extra=extra,
        )

    def _cost(self, resp: Any) -> float | None:
        try:
            cost = self._litellm.completion_cost(completion_response=resp)
        except Exception:  # the offline price map does not know this model
            return None
        return float(cost) if cost is not None else None


def _as_dict(resp: Any) -> dict[str, Any]:
    try:
        return json.loads(resp.model_dump_json())
    except Exception:
        try:
            return json.loads(json.dumps(dict(resp), default=str))
        except Exception:
            return {"repr": repr(resp)[:2000]}


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = str(exc)
    text = re.sub(r"^litellm\.\w+:\s*", "", text)  # "litellm.RateLimitError: RateLimitError: ..." -> one name
    name = type(exc).__name__
    text = re.sub(rf"^{name}:\s*", "", text)
    return _one_line(f"{name}: {text}", 300)


def _one_line(text: str, limit: int = 500) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- context window ----------------------------------------------------------------------------------
def context_window(model: str) -> int | None:
    """The model's input context window in tokens, from litellm's offline model info; None if unknown."""
    litellm = _import_litellm()
    try:
        info = litellm.get_model_info(model)
    except Exception:
        return None
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return int(window) if window else None


DEFAULT_CONTEXT_WINDOW = 32_768
"""The input window (tokens) assumed for a model litellm does not know (a local or self-served one):
32k, what many open code models are served with. `LLMConfig.context_window` gives the real one."""


def fit_messages(
    messages: list[dict], model: str, max_tokens: int, keep_first: int = 2, *, window: int | None = None
) -> list[dict]:
    """`messages` with the oldest turns dropped so that prompt + `max_tokens` fit the context window.

    The window is `window` (tokens) when given, else litellm's figure for `model`, else
    DEFAULT_CONTEXT_WINDOW, so an unknown or local model is trimmed too. The first `keep_first`
    messages (the system prompt and the task) and the last message are always kept; turns are dropped
    from the oldest in assistant+user pairs so roles still alternate. May still overflow when even the
    kept messages do not fit (the request then fails with a context-window error, not retried).
    """
    window = window or context_window(model) or DEFAULT_CONTEXT_WINDOW
    if len(messages) <= keep_first + 1:
        return list(messages)
    litellm = _import_litellm()
    budget = window - max_tokens

    def size(msgs: list[dict]) -> int:
        try:
            return int(litellm.token_counter(model=model, messages=msgs))
        except Exception:
            return sum(len(str(m.get("content", ""))) for m in msgs) // 3

    head, middle, last = list(messages[:keep_first]), list(messages[keep_first:-1]), messages[-1]
    while middle and size(head + middle + [last]) > budget:
        del middle[: 2 if len(middle) >= 2 else 1]
    if len(middle) != len(messages) - keep_first - 1:
        log.info(
            "%s: dropped %d old messages to fit the context window",
            model,
            len(messages) - keep_first - 1 - len(middle),
        )
    return head + middle + [last]


# -- the fake -------------------------------------------------------------------------------------------
class ScriptedModel:
    """An `LLM` that replays `replies`: strings become replies, `LLMReply`s are returned as they are,
    exceptions are raised (an `LLMError` ends a trajectory as a model error).

    In call order by default; with `by_turn`, each conversation gets reply N+1 when it holds N
    assistant messages, so every trajectory of a run (and a resumed one, whose conversation is
    rebuilt from the store) walks the same script from its first reply. Under the "last" context
    policy a conversation shows at most one earlier reply, so from turn 3 on it gets reply 2 again.

    `calls` records a copy of the messages of every call. Raises LLMError when the script runs out.
    """

    def __init__(
        self,
        replies: Iterable[str | LLMReply | BaseException],
        name: str = "scripted",
        *,
        by_turn: bool = False,
    ):
        self.replies = list(replies)
        self.name = name
        self.by_turn = by_turn
        self.config = LLMConfig(model=name)  # what the run records, and what `model_for` rebuilds
        self.calls: list[list[dict]] = []

    def complete(self, messages: list[dict]) -> LLMReply:
        """The next scripted reply (tokens estimated at 4 characters each, cost 0)."""
        self.calls.append([dict(m) for m in messages])
        if self.by_turn:
            i = sum(m.get("role") == "assistant" for m in messages)
        else:
            i = len(self.calls) - 1
        if i >= len(self.replies):
            raise LLMError(f"{self.name}: script exhausted after {len(self.replies)} replies", attempts=1)
        item = self.replies[i]
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, LLMReply):
            return item
        prompt_chars = sum(len(str(m.get("content", ""))) for m in messages)
        return LLMReply(
            text=item,
            tokens_in=prompt_chars // 4,
            tokens_out=len(item) // 4,
            cost_usd=0.0,
            latency_s=0.0,
            model=self.name,
            finish_reason="stop",
            extra={"attempts": 1, "retries": []},
        )


def builtin_scripts() -> list[str]:
    """Names of the scripts shipped with kb-agent (package data in `agent/scripted/NAME/N.md`)."""
    root = files("kb_agent.agent").joinpath("scripted")
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_"))


def scripted_model(name: str) -> ScriptedModel:
    """The built-in scripted model `scripted/NAME`: replies `1.md`, `2.md`, ... of `agent/scripted/NAME`,
    one per turn of every trajectory (`by_turn`). `demo` holds three Triton replies written for
    toy/relu: a compile error, a wrong result, a correct kernel.

    Raises LLMError (one line, naming the scripts there are) for an unknown name.
    """
    name = name.removeprefix(SCRIPTED_PREFIX)
    if name not in builtin_scripts():
        raise LLMError(
            f"unknown scripted model {SCRIPTED_PREFIX}{name}; built in: "
            + ", ".join(SCRIPTED_PREFIX + n for n in builtin_scripts())
        )
    folder = files("kb_agent.agent").joinpath("scripted", name)
    paths = sorted((p for p in folder.iterdir() if p.name.endswith(".md")), key=lambda p: int(p.name[:-3]))
    return ScriptedModel([p.read_text(encoding="utf-8") for p in paths], SCRIPTED_PREFIX + name, by_turn=True)


def model_for(config: LLMConfig, **kwargs: Any) -> LLM:
    """The `LLM` that `config.model` names: `scripted_model` for `scripted/NAME`, else
    `LiteLLMModel(config, **kwargs)` (which checks the API key: MissingKeyError before any request).

    Raises LLMError for an unknown scripted model or a missing key.
    """
    if config.model.startswith(SCRIPTED_PREFIX):
        return scripted_model(config.model)
    return LiteLLMModel(config, **kwargs)


__all__ = [
    "DUMMY_API_KEY",
    "EndpointDown",
    "NOT_SERVED",
    "OPENAI_COMPATIBLE",
    "LLM",
    "LLMConfig",
    "LLMError",
    "LLMReply",
    "LiteLLMModel",
    "MalformedResponseError",
    "MissingKeyError",
    "ModelUnreachable",
    "RateLimiter",
    "UnknownModelError",
    "WrongEndpoint",
    "REASONING_EFFORTS",
    "SCRIPTED_PREFIX",
    "ScriptedModel",
    "builtin_scripts",
    "check_chat_route",
    "check_model",
    "check_reachable",
    "DEFAULT_CONTEXT_WINDOW",
    "context_window",
    "fit_messages",
    "model_for",
    "required_env_vars",
    "resolve_api_key",
    "retry_after_s",
    "scripted_model",
]
