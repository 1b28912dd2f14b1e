"""Agent-written rewards run in a separate, locked-down process (never in the chapter's own).

A control agent writes ``compute_reward`` as source text, and the source runs many times
while a controller trains on it. Running it in-process with full numpy let a reward call
``np.savetxt`` and write a file. Here every reward source runs in its own worker, a fresh
interpreter (``python -I``, started by :mod:`subprocess`) that imports numpy, then limits
itself with ``resource.setrlimit`` before it reads the source (``_reward_worker.py``): no
new file descriptor (so no file, socket or import), no byte written to a file, no child
process, an address-space cap and a CPU-time cap per call. The source runs in a namespace
with a read-only numpy subset (``np``, and ``jp`` as in the public code) and a few builtins.
The parent also refuses, before any process starts, source that imports or names an
underscored attribute (:func:`check_reward_source`), and waits at most ``wall_seconds`` for
any reply before it kills the worker.

What crosses back is JSON and raw float64 bytes (never a pickle). Workers are
kept per (source, limits), at most :data:`MAX_WORKERS` alive (least recently used closed
first), and closed at exit, so a reward used for a whole training costs one start
(about 0.1 s of CPU).
"""

from __future__ import annotations

import ast
import atexit
import json
import os
import select
import struct
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

WORKER = Path(__file__).with_name("_reward_worker.py")
MAX_WORKERS = 8


class RewardError(RuntimeError):
    """A reward failed in its sandbox: it raised, returned the wrong thing, or hit a limit."""


@dataclass(frozen=True)
class Limits:
    """[reconstruction] A reward's limits: CPU seconds per call (and for its definition), address
    space beyond the worker's own in MiB, wall seconds the parent waits for any reply."""

    cpu_seconds: float = 5.0
    memory_mb: int = 512
    wall_seconds: float = 60.0

    def __post_init__(self) -> None:
        if not (self.cpu_seconds > 0 and self.memory_mb > 0 and self.wall_seconds > 0):
            raise ValueError(f"reward limits must be positive: {self}")


DEFAULT_LIMITS = Limits()


def check_reward_source(source: str) -> None:
    """§3.2 (reward code) [reconstruction]: refuse source that cannot be a safe reward, before running it.

    It must parse, define ``compute_reward`` at the top level, import nothing and name no
    attribute or variable that starts with an underscore (``__class__``, ``_d``: the ways out of
    a restricted namespace). Raises ``ValueError`` saying which rule it breaks.
    """
    if not isinstance(source, str) or "def compute_reward" not in source:
        raise ValueError("reward source must define compute_reward(obs, action, prev_action, dt, metrics)")
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise ValueError(f"reward source does not compile: {err.msg} (line {err.lineno})") from err
    if not any(isinstance(n, ast.FunctionDef) and n.name == "compute_reward" for n in tree.body):
        raise ValueError("reward source must define compute_reward at the top level")
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            raise ValueError(f"reward source may not import modules (line {node.lineno})")
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name is not None and name.startswith("_"):
            raise ValueError(f"reward source may not use the name {name!r} (line {node.lineno})")


class _Worker:
    """One sandboxed interpreter holding one reward."""

    def __init__(self, source: str, limits: Limits, restricted: bool = True):
        self.limits = limits
        self.cwd = tempfile.gettempdir()  # nothing is written there: the worker cannot create files
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OPENBLAS_NUM_THREADS": "1",
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "LANG": "C.UTF-8"}
        self.proc = subprocess.Popen([sys.executable, "-I", str(WORKER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=self.cwd,
                                     env=env, close_fds=True)
        init = {"source": source, "cpu_seconds": limits.cpu_seconds, "memory_mb": limits.memory_mb,
                "restricted": restricted}
        try:
            self._send(json.dumps(init).encode())
            self._expect()
        except RewardError:
            self.close()
            raise

    def _send(self, payload: bytes) -> None:
        try:
            self.proc.stdin.write(struct.pack(">Q", len(payload)) + payload)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as err:
            self._fail(f"the reward's process is gone ({err})")

    def _read(self, n: int, deadline: float) -> bytes:
        fd, out = self.proc.stdout.fileno(), b""
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._fail(f"no reply within {self.limits.wall_seconds:g} s (wall clock): stopped")
            chunk = os.read(fd, n - len(out))
            if not chunk:
                self._fail(self._death())
            out += chunk
        return out

    def _frame(self, deadline: float) -> bytes:
        (n,) = struct.unpack(">Q", self._read(8, deadline))
        return self._read(n, deadline)

    def _death(self) -> str:
        code = self.proc.wait(timeout=10)
        if code == -24:  # SIGXCPU: past RLIMIT_CPU
            return f"stopped at its CPU limit of {self.limits.cpu_seconds:g} s"
        return f"its process died (exit status {code})"

    def _fail(self, why: str) -> None:
        self.close()
        raise RewardError(f"reward {why}")

    def _expect(self) -> dict:
        deadline = time.monotonic() + self.limits.wall_seconds
        head = json.loads(self._frame(deadline))
        if not head.get("ok"):
            raise RewardError(f"reward failed: {head.get('error')}")
        if "shape" in head:
            shape = tuple(int(n) for n in head["shape"])
            data = self._frame(deadline)
            if len(data) != 8 * int(np.prod(shape, dtype=np.int64)):
                self._fail("sent a reply that does not match its shape")
            head["array"] = np.frombuffer(data, dtype="<f8").reshape(shape)
        return head

    def call(self, frames: tuple[bytes, bytes]) -> np.ndarray:
        for f in frames:
            self._send(f)
        return self._expect()["array"]

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:  # pragma: no cover - a pipe the dead child left broken
                pass


_WORKERS: OrderedDict[tuple, _Worker] = OrderedDict()


def _worker(source: str, limits: Limits, restricted: bool) -> _Worker:
    key = (source, limits, restricted)
    w = _WORKERS.get(key)
    if w is not None and w.alive:
        _WORKERS.move_to_end(key)
        return w
    _WORKERS.pop(key, None)
    while len(_WORKERS) >= MAX_WORKERS:
        _WORKERS.popitem(last=False)[1].close()
    w = _Worker(source, limits, restricted)
    _WORKERS[key] = w
    return w


@atexit.register
def close_all() -> None:
    """Stop every reward worker (at exit; tests call it to count processes)."""
    while _WORKERS:
        _WORKERS.popitem()[1].close()


def pack_inputs(obs: np.ndarray, action: np.ndarray, prev_action: np.ndarray, dt: float,
                metrics: Mapping[str, np.ndarray]) -> tuple[bytes, bytes]:
    """The reward's inputs as the worker reads them: a JSON header (names, shapes, ``dt``) and
    the arrays' float64 bytes in that order."""
    arrays = {"obs": obs, "action": action, "prev_action": prev_action,
              **{f"metric.{k}": v for k, v in metrics.items()}}
    arrays = {k: np.ascontiguousarray(v, dtype="<f8") for k, v in arrays.items()}
    head = {"dt": float(dt), "arrays": [[k, list(v.shape)] for k, v in arrays.items()]}
    return json.dumps(head).encode(), b"".join(v.tobytes() for v in arrays.values())


class SandboxedReward:
    """§3.2 (the control agent's reward) [reconstruction]: ``compute_reward`` run in a sandboxed worker.

    Called like the reward itself, ``fn(obs, action, prev_action, dt, metrics)``, it returns
    ``(reward, {})``: the reward array the worker computed (its components stay there).
    Raises ``ValueError`` for source :func:`check_reward_source` refuses, and :class:`RewardError`
    when the reward raises, returns the wrong thing or hits a limit. ``restricted=False`` (for
    tests only) gives the source full builtins and numpy and skips the source check, to show
    what the process limits alone refuse.
    """

    def __init__(self, source: str, limits: Limits = DEFAULT_LIMITS, restricted: bool = True):
        if restricted:
            check_reward_source(source)
        self.source, self.limits, self.restricted = source, limits, restricted
        _worker(source, limits, restricted)  # define it now: a broken definition fails here

    def __call__(self, obs, action, prev_action, dt, metrics) -> tuple[np.ndarray, dict]:
        w = _worker(self.source, self.limits, self.restricted)
        return w.call(pack_inputs(obs, action, prev_action, dt, metrics)), {}


__all__ = ["DEFAULT_LIMITS", "Limits", "MAX_WORKERS", "RewardError", "SandboxedReward",
           "check_reward_source", "close_all", "pack_inputs"]
