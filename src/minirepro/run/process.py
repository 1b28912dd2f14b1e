"""Processes of a run: stop signals raised as :class:`Interrupted`, process trees stopped for sure.

While a run executes, SIGTERM and SIGHUP are handled like SIGINT: the notebook's
process tree (papermill, the kernel and whatever the kernel started) is stopped,
and :class:`Interrupted` (a ``KeyboardInterrupt``) is raised.
"""

from __future__ import annotations

import resource
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal (SIGINT, SIGTERM or SIGHUP); ``.signum`` says which."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def signame(self) -> str:
        return signal.Signals(self.signum).name


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted(signum)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Inside: SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` (in the main thread;
    a signal that is ignored, as ``nohup`` ignores SIGHUP, stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {}
    for sig in _STOP_SIGNALS:
        current = signal.getsignal(sig)
        if current in (signal.SIG_DFL, signal.default_int_handler):
            old[sig] = signal.signal(sig, _raise_interrupted)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextmanager
def signals_ignored() -> Iterator[None]:
    """Inside: the stop signals are ignored (cleanup after an interrupt is not interrupted)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def stop_process_tree(pid: int, timeout: float = 10.0) -> None:
    """Stop process ``pid`` and all its descendants, for sure.

    The tree is frozen first (SIGSTOP, repeated until no new descendant appears),
    so nothing can fork away, then every process is killed (SIGKILL). The kernel
    papermill starts is in its own session, so killing a process group would miss it.
    """
    import psutil

    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    seen: dict[int, psutil.Process] = {}
    for _ in range(20):
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            procs = []
        for q in seen.values():  # the descendants of the already-frozen ones too
            try:
                procs += q.children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        new = [q for q in procs if q.pid not in seen]
        if not new:
            break
        for q in new:
            seen[q.pid] = q
            try:
                q.suspend()
            except psutil.NoSuchProcess:
                pass
    for q in seen.values():
        try:
            q.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(list(seen.values()), timeout=timeout)


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children: papermill, and through
    it the kernel and the kernel's workers. A run's difference is its CPU time, which is
    what its cost is on a quiet machine when other work shares the cores."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime

