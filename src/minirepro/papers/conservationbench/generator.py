"""The benchmark's videos: four conservation properties rendered with numpy, seeded.

Each *pair* is one scene rendered twice: a conserving video (the quantity is only
rearranged) and its matched control (the same scene, where quantity is added or
removed halfway through the transformation). Frames are ``SIZE x SIZE`` uint8 grey
images: background 255, the object (dots, stick, liquid, clay) ``INK`` = 40, and
scenery (table, glasses) ``SCENERY`` = 150. Pixels darker than ``INK_THRESHOLD`` are
the object, so the quantity can be measured back from the pixels (``measure``).

Timeline of a video of ``N_SOURCE`` frames: frames ``0..5`` are still, the
transformation runs over frames ``6..17`` (progress ``s`` from 0 to 1), frames
``18..23`` are still again; a control's quantity jumps at one frame in ``10..13``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

PROPERTIES: tuple[str, ...] = ("number", "length", "volume", "size")
ANSWERS: tuple[str, ...] = ("same", "more", "less")
SIZE = 64
N_SOURCE = 24
MOTION = (6, 17)  # first and last frame of the transformation
EVENT_RANGE = (10, 13)  # a control's quantity changes at one of these frames
INK, SCENERY, INK_THRESHOLD = 40, 150, 100
SAME_TOL = 0.06  # measured quantities within this relative difference count as "the same"

_YY, _XX = np.mgrid[0:SIZE, 0:SIZE].astype(float)


@dataclass(frozen=True)
class Video:
    """One rendered video of the benchmark.

    Attributes:
        video_id: ``"<property>-<pair:02d>-<c|nc>"``, unique within a benchmark.
        prop: one of :data:`PROPERTIES`.
        pair: index of the pair within its property.
        conserving: True for the conserving video, False for its control.
        answer: the true answer to "last vs first": ``"same"``, ``"more"`` or ``"less"``.
        q0, q1: the quantity in the first and last frame (count, px length, px^2 area).
        frames: ``(N_SOURCE, SIZE, SIZE)`` uint8 grey levels.
        keyframes: the frames a person would pick: still start, motion start/end, event, end.
        event: the frame where a control's quantity changes (``-1`` when conserving).
    """

    video_id: str
    prop: str
    pair: int
    conserving: bool
    answer: str
    q0: float
    q1: float
    frames: np.ndarray = field(repr=False)
    keyframes: tuple[int, ...] = ()
    event: int = -1


def _progress(t: int) -> float:
    lo, hi = MOTION
    return min(max((t - lo) / (hi - lo), 0.0), 1.0)


def _blank() -> np.ndarray:
    img = np.full((SIZE, SIZE), 255, dtype=np.uint8)
    img[54:56, 2:62] = SCENERY  # the table
    return img


def _disc(img: np.ndarray, cx: float, cy: float, r: float) -> None:
    x0, x1 = max(int(cx - r) - 1, 0), min(int(cx + r) + 2, SIZE)
    y0, y1 = max(int(cy - r) - 1, 0), min(int(cy + r) + 2, SIZE)
    win = (_XX[y0:y1, x0:x1] - cx) ** 2 + (_YY[y0:y1, x0:x1] - cy) ** 2 <= r * r
    img[y0:y1, x0:x1][win] = INK


def _rect(img: np.ndarray, x0: int, y0: int, x1: int, y1: int, value: int = INK) -> None:
    img[max(y0, 0):max(y1, 0), max(x0, 0):max(x1, 0)] = value


def _render_number(p: dict, t: int, n: int) -> np.ndarray:
    img = _blank()
    s = _progress(t)
    gap = p["gap0"] + (p["gap1"] - p["gap0"]) * s
    xs = 32 + gap * (np.arange(n) - (p["n0"] - 1) / 2)  # an added/removed dot is at the end
    for x in xs:
        _disc(img, x, p["y"], 2.0)
    return img


def _render_length(p: dict, t: int, length: int) -> np.ndarray:
    img = _blank()
    x0 = int(round(p["x0"] + p["dx"] * _progress(t)))
    _rect(img, x0, p["y"], x0 + length, p["y"] + 3)
    return img


def _render_volume(p: dict, t: int, volume: int) -> np.ndarray:
    """2-D glasses: the liquid's area (px^2) is the volume; poured from ``w_from`` into ``w_to``."""
    img = _blank()
    s = _progress(t)
    glasses = ((8, p["w_from"]), (36, p["w_to"]))
    left = int(round(volume * (1 - s) / p["w_from"]))  # liquid rows still in the first glass
    right_area = volume - left * p["w_from"]
    right = int(round(right_area / p["w_to"]))
    for (gx, w), h in zip(glasses, (left, right), strict=True):
        _rect(img, gx - 1, 6, gx, 54, SCENERY)
        _rect(img, gx + w, 6, gx + w + 1, 54, SCENERY)
        _rect(img, gx, 53 - h, gx + w, 53)
        _rect(img, gx - 1, 53, gx + w + 1, 54, SCENERY)
    return img


def _render_size(p: dict, t: int, area_scale: float) -> np.ndarray:
    img = _blank()
    f = np.exp(np.log(p["f1"]) * _progress(t))  # elongation, log-linear in time
    a, b = p["r"] * f * np.sqrt(area_scale), p["r"] / f * np.sqrt(area_scale)
    img[((_XX - 32) / a) ** 2 + ((_YY - (53 - b)) / b) ** 2 <= 1.0] = INK
    return img


def _scene(prop: str, rng: np.random.Generator) -> dict:
    if prop == "number":
        n0 = int(rng.integers(3, 8))
        dense, wide = 5.5, float(rng.uniform(0.85, 1.0)) * 58 / (n0 + 1)
        gap0, gap1 = (dense, wide) if rng.random() < 0.5 else (wide, dense)
        return {"n0": n0, "gap0": gap0, "gap1": gap1, "y": float(rng.uniform(22, 42))}
    if prop == "length":
        length = int(rng.integers(16, 27))
        dx = int(rng.integers(6, 13)) * (1 if rng.random() < 0.5 else -1)
        x0 = 32 - length // 2 - dx // 2
        return {"L0": length, "x0": x0, "dx": dx, "y": int(rng.integers(16, 46))}
    if prop == "volume":
        narrow, wide = 12, 24
        w_from, w_to = (narrow, wide) if rng.random() < 0.5 else (wide, narrow)
        return {"V0": 24 * int(rng.integers(8, 16)), "w_from": w_from, "w_to": w_to}
    if prop == "size":
        f1 = float(rng.uniform(1.5, 1.9))
        return {"r": float(rng.uniform(8.5, 10.5)), "f1": f1 if rng.random() < 0.5 else 1 / f1}
    raise ValueError(f"unknown property {prop!r}; expected one of {', '.join(PROPERTIES)}")


def _quantities(prop: str, p: dict, add: bool, rng: np.random.Generator) -> tuple[float, float]:
    """The control's start and end quantity (``add``: more at the end)."""
    sign = 1 if add else -1
    if prop == "number":
        return p["n0"], p["n0"] + sign
    if prop == "length":
        return p["L0"], p["L0"] + sign * max(6, int(round(0.3 * p["L0"])))
    if prop == "volume":
        k = p["V0"] // 24
        return p["V0"], p["V0"] + sign * 24 * max(3, int(round(0.35 * k)))
    return 1.0, (1.5 if add else 0.6)  # size: scale of the clay's area


def make_video(prop: str, pair: int, conserving: bool, seed: int) -> Video:
    """[reconstruction] Render one video of a pair; the two videos share the scene.

    The scene depends on ``(seed, prop, pair)`` only, so the conserving video and its
    control differ only in the quantity change. Half the controls add quantity, half
    remove it (by the parity of ``pair``).
    """
    if prop not in PROPERTIES:
        raise ValueError(f"unknown property {prop!r}; expected one of {', '.join(PROPERTIES)}")
    rng = np.random.default_rng([seed, PROPERTIES.index(prop), pair])
    p = _scene(prop, rng)
    event = int(rng.integers(EVENT_RANGE[0], EVENT_RANGE[1] + 1))
    add = pair % 2 == 0
    q0, q1 = _quantities(prop, p, add, rng)
    if conserving:
        q1, event = q0, -1
    render = {"number": _render_number, "length": _render_length, "volume": _render_volume,
              "size": _render_size}[prop]
    cache: dict[tuple[float, float], np.ndarray] = {}
    for t in range(N_SOURCE):  # still frames repeat: render each (progress, quantity) once
        key = (_progress(t), q1 if 0 <= event <= t else q0)
        if key not in cache:
            cache[key] = render(p, t, key[1])
    frames = np.stack([cache[(_progress(t), q1 if 0 <= event <= t else q0)] for t in range(N_SOURCE)])
    if prop == "size":  # report the clay's area in px^2 (the rendered ellipse's nominal area)
        q0, q1 = np.pi * p["r"] ** 2 * q0, np.pi * p["r"] ** 2 * q1
    answer = "same" if conserving else ("more" if q1 > q0 else "less")
    keys = sorted({0, MOTION[0], MOTION[1], N_SOURCE - 1} | ({event} if event >= 0 else set()))
    vid = f"{prop}-{pair:02d}-{'c' if conserving else 'nc'}"
    return Video(vid, prop, pair, conserving, answer, float(q0), float(q1), frames, tuple(keys), event)


def generate(n_pairs: int, seed: int, properties: tuple[str, ...] = PROPERTIES) -> list[Video]:
    """[reconstruction] The benchmark: ``n_pairs`` pairs per property, conserving + control each.

    Returns ``len(properties) * n_pairs * 2`` videos, ordered by property, pair, then
    conserving before control. The same ``(n_pairs, seed)`` gives the same pixels.
    """
    if n_pairs < 1:
        raise ValueError(f"n_pairs must be >= 1, got {n_pairs}")
    bad = [p for p in properties if p not in PROPERTIES]
    if bad:
        raise ValueError(f"unknown property {bad[0]!r}; expected one of {', '.join(PROPERTIES)}")
    return [make_video(prop, i, cons, seed) for prop in properties for i in range(n_pairs)
            for cons in (True, False)]


def measure(frame: np.ndarray, prop: str) -> float:
    """Measure a property's quantity from the pixels of one frame (independent of the renderer).

    number: connected dark components; length: the widest dark run in a row (px);
    volume and size: the dark area (px^2).
    """
    if frame.ndim != 2:
        raise ValueError(f"a frame is a 2-D grey image, got shape {frame.shape}")
    ink = frame < INK_THRESHOLD
    if prop == "number":
        return float(ndimage.label(ink)[1])
    if prop == "length":
        return float(ink.sum(axis=1).max())
    if prop in ("volume", "size"):
        return float(ink.sum())
    raise ValueError(f"unknown property {prop!r}; expected one of {', '.join(PROPERTIES)}")


def measured_answer(video: Video) -> str:
    """The answer the pixels give: compare ``measure`` on the last and the first frame."""
    a, b = measure(video.frames[0], video.prop), measure(video.frames[-1], video.prop)
    if abs(b - a) <= SAME_TOL * max(a, 1e-9):
        return "same"
    return "more" if b > a else "less"
