"""An ``LLM(prompt) -> str`` adapter for any OpenAI-compatible chat endpoint.

Uses only the standard library (``urllib``). The chapter uses it when its ``agent`` parameter
is ``openai`` (with ``llm_base_url`` and ``llm_model``; the key, if the endpoint needs one, from
the environment variable ``OPENAI_API_KEY``); the book itself runs the scripted stand-ins.
The unit tests run it, and a whole debate through it, against a fake server on 127.0.0.1.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request


class LLMEndpointError(RuntimeError):
    """The endpoint failed: unreachable, timed out, an HTTP error, or an unexpected reply."""


class OpenAIChatLLM:
    """§4 (agents): POST ``{base_url}/chat/completions`` with one user message; return the
    first choice's message content. ``timeout`` is in seconds; ``seed`` is sent when given;
    ``calls`` counts the requests."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None,
                 temperature: float = 1.0, timeout: float = 60.0, seed: int | None = None):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key = model, api_key
        self.temperature, self.timeout, self.seed = temperature, timeout, seed
        self.calls = 0

    def __call__(self, prompt: str) -> str:
        self.calls += 1
        request = {"model": self.model, "temperature": self.temperature,
                   "messages": [{"role": "user", "content": prompt}]}
        if self.seed is not None:  # honoured by servers that sample reproducibly (OpenAI, vLLM)
            request["seed"] = self.seed
        body = json.dumps(request).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise LLMEndpointError(f"HTTP {err.code} from {self.url}") from err
        except TimeoutError as err:
            raise LLMEndpointError(f"timed out after {self.timeout} s waiting for {self.url}") from err
        except urllib.error.URLError as err:
            if isinstance(err.reason, TimeoutError):
                raise LLMEndpointError(f"timed out after {self.timeout} s waiting for {self.url}") from err
            raise LLMEndpointError(f"cannot reach {self.url}: {err.reason}") from err
        try:
            return json.loads(raw)["choices"][0]["message"]["content"]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError) as err:
            raise LLMEndpointError(f"unexpected reply from {self.url}: {raw[:200]!r}") from err
