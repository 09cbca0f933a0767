"""OpenAI-compatible chat completions over plain httpx.

``OpenAIChatModel`` POSTs ``{base_url}/chat/completions`` and returns the first
choice's text. Transient failures (429, 5xx, timeouts, connection errors) are
retried with exponential backoff; everything else surfaces at once as a typed
``ProviderError`` so a worker can count it.
"""

from __future__ import annotations

import json
import logging
import random
import time
from typing import Any, Protocol

import httpx

logger = logging.getLogger(__name__)

__all__ = [
    "ChatModel",
    "OpenAIChatModel",
    "ProviderBadResponse",
    "ProviderError",
    "ProviderRateLimited",
    "ProviderTimeout",
]

# A Retry-After longer than this is not slept through inside a request: the
# caller (a Celery task) is better placed to come back later.
MAX_RETRY_AFTER = 10.0
MAX_BACKOFF = 8.0


class ProviderError(Exception):
    """A model provider failed; ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ProviderTimeout(ProviderError):
    """The provider did not answer within the timeout (after retries)."""


class ProviderRateLimited(ProviderError):
    """HTTP 429 after retries, or with a Retry-After too long to wait for."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message, status=429)
        self.retry_after = retry_after


class ProviderBadResponse(ProviderError):
    """The provider answered 2xx with a body that is not the expected JSON."""


class ChatModel(Protocol):
    label: str

    def complete(self, messages: list[dict], *, temperature: float = 0.2, max_tokens: int = 1024) -> str: ...


def _retry_after_seconds(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None  # an HTTP-date: treat as unknown and use our own backoff
    return max(seconds, 0.0)


def _error_detail(response: httpx.Response) -> str:
    text = response.text.strip().replace("\n", " ")
    return text[:300]


class JSONClient:
    """POST JSON to one base URL with bounded, exponential-backoff retries.

    One ``httpx.Client`` (a connection pool) per instance; safe to share
    between threads.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str = "",
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff: float = 0.5,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_retries = max(0, int(max_retries))
        self.backoff = max(0.0, float(backoff))
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(timeout=httpx.Timeout(timeout), headers=headers)

    def close(self) -> None:
        self._client.close()

    def _sleep_before_retry(self, attempt: int, retry_after: float | None = None) -> None:
        if retry_after is not None:
            delay = retry_after
        else:
            delay = min(self.backoff * (2**attempt), MAX_BACKOFF)
            delay += random.uniform(0, delay * 0.1)  # de-synchronise workers
        if delay > 0:
            time.sleep(delay)

    def post(self, path: str, payload: dict[str, Any]) -> Any:
        """POST ``payload`` to ``base_url + path`` and return the decoded JSON body.

        Raises ProviderTimeout, ProviderRateLimited, ProviderBadResponse or
        ProviderError once retries are exhausted or the failure is permanent.
        """
        url = f"{self.base_url}/{path.lstrip('/')}"
        attempt = 0
        while True:
            try:
                response = self._client.post(url, json=payload)
            except httpx.TimeoutException as exc:
                if attempt < self.max_retries:
                    logger.warning("provider_timeout url=%s attempt=%d", url, attempt + 1)
                    self._sleep_before_retry(attempt)
                    attempt += 1
                    continue
                raise ProviderTimeout(f"{url}: timed out after {attempt + 1} attempts") from exc
            except httpx.TransportError as exc:
                if attempt < self.max_retries:
                    logger.warning("provider_transport_error url=%s attempt=%d error=%s", url, attempt + 1, exc)
                    self._sleep_before_retry(attempt)
                    attempt += 1
                    continue
                raise ProviderError(f"{url}: {type(exc).__name__}: {exc}") from exc

            status = response.status_code
            if status == 429:
                retry_after = _retry_after_seconds(response)
                too_long = retry_after is not None and retry_after > MAX_RETRY_AFTER
                if attempt < self.max_retries and not too_long:
                    logger.warning(
                        "provider_rate_limited url=%s attempt=%d retry_after=%s", url, attempt + 1, retry_after
                    )
                    self._sleep_before_retry(attempt, retry_after)
                    attempt += 1
                    continue
                raise ProviderRateLimited(f"{url}: HTTP 429 {_error_detail(response)}", retry_after=retry_after)
            if status >= 500:
                if attempt < self.max_retries:
                    logger.warning("provider_server_error url=%s status=%d attempt=%d", url, status, attempt + 1)
                    self._sleep_before_retry(attempt)
                    attempt += 1
                    continue
                raise ProviderError(f"{url}: HTTP {status} {_error_detail(response)}", status=status)
            if status >= 400:
                # 4xx other than 429 is our request's fault: retrying cannot help.
                raise ProviderError(f"{url}: HTTP {status} {_error_detail(response)}", status=status)
            try:
                return response.json()
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ProviderBadResponse(f"{url}: body is not JSON: {response.text[:200]!r}", status=status) from exc


class OpenAIChatModel:
    """``ChatModel`` for any OpenAI-compatible ``/chat/completions`` endpoint."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff: float = 0.5,
    ) -> None:
        self.model = model
        self.label = f"llm:{model}"
        self._http = JSONClient(base_url, api_key=api_key, timeout=timeout, max_retries=max_retries, backoff=backoff)

    @property
    def base_url(self) -> str:
        return self._http.base_url

    def close(self) -> None:
        self._http.close()

    def complete(self, messages: list[dict], *, temperature: float = 0.2, max_tokens: int = 1024) -> str:
        """Return the text of the first choice; raise ProviderError on any failure."""
        body = self._http.post(
            "/chat/completions",
            {"model": self.model, "messages": messages, "temperature": temperature, "max_tokens": max_tokens},
        )
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise ProviderBadResponse(f"{self.base_url}: response has no choices[0].message.content") from exc
        if not isinstance(content, str):
            raise ProviderBadResponse(f"{self.base_url}: choices[0].message.content is {type(content).__name__}")
        return content

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.base_url!r}, {self.model!r})"
