"""Kernels on private Unix sockets: no TCP port for two parallel kernels to race for.

A Jupyter kernel over TCP is given five ports that its manager found free a moment
earlier. Between that moment and the kernel's ``bind``, any other process on the
machine may take one of them (another kernel starting in a parallel build, or a
client's outgoing connection), and the kernel dies with "Address already in use";
the manager then reports "Kernel didn't respond in 60 seconds". That race failed a
smoke build run with two workers. Here every kernel talks over Unix sockets in a
directory of its own (``transport="ipc"``), so two kernels can never ask for the same
address. The directory is removed when its manager is garbage-collected.

Used by the book's pre-execution (:mod:`minirepro.book`), by papermill through the
``minirepro`` engine (``papermill --engine minirepro``, registered in
``pyproject.toml``), and by the goldens' nbval kernels (``tests/goldens/conftest.py``).
The first two also stop a finished notebook's kernel at once (:data:`SHUTDOWN`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import Any

from jupyter_client.manager import AsyncKernelManager, KernelManager

# How a finished notebook's kernel is stopped. "graceful" asks the kernel to exit and
# waits: with torch and transformers loaded, the interpreter's teardown takes 2-3 s per
# notebook (measured: 2.6 s after importing the TBPO chapter, 0.1 s when killed). Every
# output and every recorded result (``minirepro.claims.results`` writes its file at each
# record) is in by then, and jupyter_client kills the kernel's whole process group, so
# nothing the notebook started outlives it.
SHUTDOWN = "immediate"


def _private_sockets(km: KernelManager) -> None:
    """Point ``km`` at Unix sockets in a fresh directory that only it uses."""
    # /tmp, not a long TMPDIR: a Unix socket's path must fit in 107 bytes.
    base = "/tmp" if os.path.isdir("/tmp") else None
    where = tempfile.mkdtemp(prefix="minirepro-kernel-", dir=base)
    km.transport = "ipc"
    km.connection_file = os.path.join(where, "kernel.json")
    km.ip = os.path.join(where, "k")
    weakref.finalize(km, shutil.rmtree, where, True)


class IPCKernelManager(KernelManager):
    """A :class:`jupyter_client.KernelManager` whose kernel listens on private Unix sockets."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _private_sockets(self)


class AsyncIPCKernelManager(AsyncKernelManager):
    """The asynchronous twin (what nbclient and papermill drive)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _private_sockets(self)


class IPCEngine:
    """papermill's nbclient engine, with the kernel on private Unix sockets.

    A delegate rather than a subclass: papermill loads its engines' entry points while
    ``papermill.engines`` is itself being imported, so this module cannot import it first.
    """

    @classmethod
    def execute_notebook(cls, nb, kernel_name, **kwargs):
        """Execute ``nb`` as papermill's ``nbclient`` engine does, on private sockets."""
        from papermill.engines import NBClientEngine

        kwargs.setdefault("kernel_manager_class", AsyncIPCKernelManager)
        kwargs.setdefault("shutdown_kernel", SHUTDOWN)
        return NBClientEngine.execute_notebook(nb, kernel_name, **kwargs)

    @classmethod
    def nb_kernel_name(cls, nb, name=None):
        """The kernel's name, as papermill's own engines find it."""
        from papermill.engines import NBClientEngine

        return NBClientEngine.nb_kernel_name(nb, name)

    @classmethod
    def nb_language(cls, nb, language=None):
        """The notebook's language, as papermill's own engines find it."""
        from papermill.engines import NBClientEngine

        return NBClientEngine.nb_language(nb, language)
