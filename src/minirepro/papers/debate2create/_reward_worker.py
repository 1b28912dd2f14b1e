"""The reward sandbox's worker: a fresh interpreter that runs one agent-written reward.

Started by :mod:`minirepro.papers.debate2create.sandbox` as ``python -I <this file>`` (no
package import, no user site, no environment), it reads framed messages on stdin and
answers on stdout. Before it looks at the reward's source it imports numpy, then locks
itself down with ``resource.setrlimit``:

* ``RLIMIT_NOFILE`` at the lowest free descriptor: no file, socket or pipe can be opened
  (and so no module can be imported that is not already loaded);
* ``RLIMIT_FSIZE`` 0: no byte can be written to a file;
* ``RLIMIT_NPROC`` 0: no process or thread can be started;
* ``RLIMIT_AS``: the address space now plus the memory limit;
* ``RLIMIT_CORE`` 0, and ``RLIMIT_CPU`` re-armed before each call at the CPU seconds used so
  far plus the limit (the kernel stops the process with SIGXCPU past it).

The reward then runs in a namespace holding only a read-only numpy subset (as ``np`` and
``jp``) and a few builtins (no ``open``, no ``__import__``). Replies carry JSON and, for a
call, the reward as raw float64 bytes (never a pickle): the parent trusts nothing else.

Messages are frames, ``8-byte big-endian length + payload``. The first is JSON
``{"source", "cpu_seconds", "memory_mb", "restricted"}``, answered by ``{"ok": ...}``. Each
call is two frames, JSON ``{"dt", "arrays": [[name, shape], ...]}`` (``obs``, ``action``,
``prev_action``, ``metric.<key>``) and their float64 bytes in that order, answered by
``{"ok": true, "shape": [...]}`` and the reward's float64 bytes, or ``{"ok": false, "error": ...}``.
"""

import json
import os
import resource
import struct
import sys

import numpy as np

NUMPY_NAMES = (
    "abs absolute add all any arccos arccosh arcsin arcsinh arctan arctan2 arctanh argmax argmin "
    "around array asarray atleast_1d atleast_2d broadcast_to ceil clip concatenate cos cosh cumsum "
    "deg2rad degrees diff divide dot e einsum equal exp exp2 expand_dims expm1 float32 float64 floor "
    "fmax fmin greater greater_equal heaviside hypot inf isfinite isinf isnan less less_equal log "
    "log10 log1p log2 logaddexp logical_and logical_not logical_or matmul maximum mean minimum mod "
    "multiply nan nan_to_num ndim negative ones ones_like pi power prod rad2deg radians reshape round "
    "shape sign sin sinh sqrt square squeeze stack std subtract sum swapaxes take tan tanh tile "
    "transpose var where zeros zeros_like").split()
BUILTINS = {"abs": abs, "min": min, "max": max, "float": float, "int": int, "bool": bool, "len": len,
            "range": range, "dict": dict, "list": list, "tuple": tuple, "zip": zip, "enumerate": enumerate,
            "sum": sum, "round": round, "pow": pow}


def _frozen(name, table):
    """A read-only object whose attributes are ``table``'s entries (a module stand-in)."""

    def get(self, key):
        if key in table:
            return table[key]
        raise AttributeError(f"{name}.{key} is not available to a reward")

    def refuse(self, key, value):
        raise AttributeError(f"{name} is read-only")

    return type(name, (), {"__slots__": (), "__getattr__": get, "__setattr__": refuse,
                           "__repr__": lambda self: f"<{name}: a read-only subset>"})()


def restricted_namespace():
    table = {k: getattr(np, k) for k in NUMPY_NAMES}
    table["linalg"] = _frozen("np.linalg", {"norm": np.linalg.norm})
    numpy = _frozen("np", table)
    return {"np": numpy, "jp": numpy, "__builtins__": dict(BUILTINS)}


def read_frame(stream):
    head = stream.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack(">Q", head)
    return stream.read(n)


def write_frame(stream, payload):
    stream.write(struct.pack(">Q", len(payload)) + payload)
    stream.flush()


def warm_up():
    """Touch what a call needs before imports become impossible (numpy loads some modules lazily)."""
    np.linalg.norm(np.ones((2, 2)), axis=-1)
    np.einsum("ij->i", np.ones((2, 2)))
    np.frombuffer(np.ones(2).tobytes(), dtype="<f8").copy().reshape(1, 2)


def lock_down(memory_mb):
    """The process limits, set once and never raised (hard limits lowered)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        vm = next(int(line.split()[1]) for line in fh if line.startswith("VmSize:"))  # kB
    limit = (vm + 1024 * int(memory_mb)) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    free = os.dup(0)  # the lowest free descriptor: every one below it is in use
    os.close(free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (free, free))


def arm_cpu(cpu_seconds):
    """SIGXCPU once this call has used ``cpu_seconds`` more CPU (whole seconds, rounded up)."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(use.ru_utime + use.ru_stime + cpu_seconds) + 1
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard < 0 else min(soft, hard), hard))


def unpack(head, data):
    """The call's arrays from its header and bytes (float64, copied so a reward may write to them)."""
    arrays, offset = {}, 0
    for name, shape in head["arrays"]:
        count = int(np.prod(shape, dtype=np.int64))
        arrays[name] = np.frombuffer(data, dtype="<f8", count=count, offset=offset).reshape(shape).copy()
        offset += 8 * count
    return arrays


def evaluate(fn, head, data):
    a = unpack(head, data)
    metrics = {k[len("metric."):]: v for k, v in a.items() if k.startswith("metric.")}
    out = fn(a["obs"], a["action"], a["prev_action"], float(head["dt"]), metrics)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        raise ValueError("compute_reward must return (reward, components), components a dict")
    return np.ascontiguousarray(np.asarray(out[0], dtype="<f8"))


def reply(stream, error=None, array=None):
    head = {"ok": error is None, "error": error}
    if array is not None:
        head["shape"] = list(array.shape)
    write_frame(stream, json.dumps(head).encode())
    if array is not None:
        write_frame(stream, array.tobytes())


def main():
    src, dst = sys.stdin.buffer, sys.stdout.buffer
    cfg = json.loads(read_frame(src))
    ns = restricted_namespace() if cfg.get("restricted", True) else {"np": np, "jp": np}
    warm_up()
    lock_down(cfg["memory_mb"])
    try:
        arm_cpu(cfg["cpu_seconds"])
        exec(compile(cfg["source"], "<reward>", "exec"), ns)  # noqa: S102 - locked down above
        fn = ns.get("compute_reward")
        if not callable(fn):
            raise ValueError("the source does not define a function compute_reward")
    except Exception as err:  # noqa: BLE001 - any failure is the reward's, reported to the parent
        reply(dst, f"{type(err).__name__}: {err}")
        return
    reply(dst)
    while (head := read_frame(src)) is not None:
        data = read_frame(src)
        try:
            arm_cpu(cfg["cpu_seconds"])
            out = evaluate(fn, json.loads(head), data)
        except Exception as err:  # noqa: BLE001
            reply(dst, f"{type(err).__name__}: {err}")
        else:
            reply(dst, array=out)


if __name__ == "__main__":
    main()
