"""Procedural scenes: height-field normals, textured albedo, Blinn-Phong materials, coloured lights.

[reconstruction] The paper trains on photographs (MIIW, BigTime); the miniature renders
small scenes whose shading has a closed form, so a relit target exists for every pair.

Conventions: images are float32 ``(3, H, W)`` in [0, 1]; the camera looks down the
``+z`` axis at a height field ``h(row, col)`` (pixel units); directions are
``(x, y, z)`` with ``x`` along columns, ``y`` along rows and ``z`` towards the viewer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MATERIALS: tuple[str, ...] = ("diffuse", "glossy", "metallic")
# kd (diffuse weight), ks (specular weight), shininess p, metallic (highlight tinted by albedo)
MATERIAL_PARAMS: dict[str, tuple[float, float, float, bool]] = {
    "diffuse": (1.0, 0.0, 1.0, False),
    "glossy": (0.8, 0.45, 12.0, False),
    "metallic": (0.2, 0.9, 24.0, True),
}
SHAPES: tuple[str, ...] = ("bumps", "ridges", "ring", "pyramid")
DOMAINS: tuple[str, ...] = ("synthetic", "shifted")
AMBIENT = 0.15


def material_index(name: str) -> int:
    """The index of material ``name`` in :data:`MATERIALS`, or a clear error."""
    if name not in MATERIALS:
        raise ValueError(f"unknown material {name!r}; expected one of {', '.join(MATERIALS)}")
    return MATERIALS.index(name)


@dataclass(frozen=True)
class Light:
    """A directional light: unit ``direction`` (x, y, z with z > 0) and linear ``rgb`` colour."""

    direction: tuple[float, float, float]
    rgb: tuple[float, float, float]


def heightfield_normals(h: np.ndarray) -> np.ndarray:
    """[reconstruction] Unit normals ``(H, W, 3)`` of a height field ``h`` (H, W), by central differences.

    ``n = (-dh/dx, -dh/dy, 1) / ||.||``: exact for a plane, second order elsewhere.
    """
    h = np.asarray(h, dtype=float)
    if h.ndim != 2 or min(h.shape) < 2:
        raise ValueError(f"height field must be 2-D with at least 2x2 pixels, got shape {h.shape}")
    if not np.all(np.isfinite(h)):
        raise ValueError("height field holds a non-finite value")
    dy, dx = np.gradient(h)
    n = np.stack([-dx, -dy, np.ones_like(h)], axis=-1)
    return n / np.linalg.norm(n, axis=-1, keepdims=True)


def shade(normals: np.ndarray, albedo: np.ndarray, material: np.ndarray, light: Light,
          ambient: float = AMBIENT) -> np.ndarray:
    """[reconstruction] Blinn-Phong image ``(3, H, W)`` in [0, 1] under one directional light.

    Per pixel, with view ``v = (0, 0, 1)`` and half vector ``h = (l + v)/||l + v||``:
    ``I = c * a * (ambient + kd * max(0, n.l)) + [n.l > 0] * c * s * ks * max(0, n.h)^p``,
    where ``c`` is the light colour, ``a`` the albedo and ``s`` the highlight colour
    (white, or the albedo for a metal). ``material`` holds indices into :data:`MATERIALS`.
    The result is clipped to [0, 1] (a camera's saturation).

    Args:
        normals: (H, W, 3) unit normals.
        albedo: (H, W, 3) linear albedo in [0, 1].
        material: (H, W) integer material indices.
    """
    normals, albedo, material = np.asarray(normals, float), np.asarray(albedo, float), np.asarray(material)
    if normals.ndim != 3 or normals.shape[-1] != 3:
        raise ValueError(f"normals must be (H, W, 3), got {normals.shape}")
    if albedo.shape != normals.shape:
        raise ValueError(f"albedo must be {normals.shape} like the normals, got {albedo.shape}")
    if material.shape != normals.shape[:2]:
        raise ValueError(f"material must be {normals.shape[:2]}, got {material.shape}")
    if material.size and (material.min() < 0 or material.max() >= len(MATERIALS)):
        raise ValueError(f"material indices must be in 0..{len(MATERIALS) - 1} ({', '.join(MATERIALS)})")
    l_dir = np.asarray(light.direction, float)
    if l_dir.shape != (3,) or not np.isclose(np.linalg.norm(l_dir), 1.0) or l_dir[2] <= 0:
        raise ValueError(f"light direction must be a unit 3-vector with z > 0, got {light.direction}")
    rgb = np.asarray(light.rgb, float)
    params = np.array([MATERIAL_PARAMS[m][:3] for m in MATERIALS])[material]  # (H, W, 3)
    kd, ks, p = params[..., 0:1], params[..., 1:2], params[..., 2:3]
    metal = np.array([MATERIAL_PARAMS[m][3] for m in MATERIALS])[material][..., None]
    half = l_dir + np.array([0.0, 0.0, 1.0])
    half /= np.linalg.norm(half)
    ndl = normals @ l_dir
    ndh = np.clip(normals @ half, 0.0, None)[..., None]
    lit = (ndl > 0)[..., None]
    diffuse = albedo * rgb * (ambient + kd * np.clip(ndl, 0.0, None)[..., None])
    highlight = np.where(metal, albedo, 1.0)
    spec = lit * rgb * highlight * ks * ndh ** p
    return np.clip(diffuse + spec, 0.0, 1.0).transpose(2, 0, 1).astype(np.float32)


# ------------------------------------------------------------------ random scenes

def _grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    yy, xx = np.mgrid[0:size, 0:size].astype(float)
    return yy, xx


def random_height(rng: np.random.Generator, size: int, shape: str) -> np.ndarray:
    """[reconstruction] A height field (size, size) of one shape class (:data:`SHAPES`), pixel units."""
    yy, xx = _grid(size)
    s = size / 24.0
    if shape == "bumps":
        h = np.zeros((size, size))
        for _ in range(rng.integers(3, 6)):
            cy, cx = rng.uniform(0, size, 2)
            r = rng.uniform(2.5, 5.0) * s
            h += rng.choice([-1, 1]) * rng.uniform(2.0, 4.0) * s * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
    elif shape == "ridges":
        theta, period = rng.uniform(0, np.pi), rng.uniform(6.0, 10.0) * s
        u = xx * np.cos(theta) + yy * np.sin(theta)
        h = rng.uniform(1.2, 2.0) * s * np.sin(2 * np.pi * u / period + rng.uniform(0, 2 * np.pi))
    elif shape == "ring":
        cy, cx = rng.uniform(0.35, 0.65, 2) * size
        r0, w = rng.uniform(5.0, 8.0) * s, rng.uniform(1.8, 2.8) * s
        rad = np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2)
        h = rng.uniform(2.5, 4.0) * s * np.exp(-((rad - r0) ** 2) / (2 * w * w))
    elif shape == "pyramid":
        cy, cx = rng.uniform(0.3, 0.7, 2) * size
        slope = rng.uniform(0.5, 0.9)
        h = np.maximum(0.0, slope * (rng.uniform(7, 10) * s - np.maximum(np.abs(yy - cy), np.abs(xx - cx))))
    else:
        raise ValueError(f"unknown shape {shape!r}; expected one of {', '.join(SHAPES)}")
    return h


def _voronoi(rng: np.random.Generator, size: int, k: int) -> np.ndarray:
    yy, xx = _grid(size)
    pts = rng.uniform(0, size, (k, 2))
    d = (yy[..., None] - pts[:, 0]) ** 2 + (xx[..., None] - pts[:, 1]) ** 2
    return d.argmin(-1)


def random_albedo(rng: np.random.Generator, size: int, domain: str) -> np.ndarray:
    """[reconstruction] Albedo (size, size, 3): smooth coloured cells with stripes (``synthetic``)
    or saturated colours under a blotchy value-noise texture (``shifted``)."""
    if domain == "synthetic":
        cells = _voronoi(rng, size, 4)
        cols = rng.uniform(0.35, 0.95, (4, 3))
        yy, xx = _grid(size)
        theta = rng.uniform(0, np.pi)
        stripes = 0.9 + 0.1 * np.sign(np.sin((xx * np.cos(theta) + yy * np.sin(theta)) * 2 * np.pi / 6))
        return cols[cells] * stripes[..., None]
    if domain == "shifted":
        coarse = rng.uniform(0.0, 1.0, (6, 6, 3))
        idx = np.linspace(0, 5, size)
        i0 = np.floor(idx).astype(int).clip(0, 4)
        t = (idx - i0)[:, None, None]
        rows = coarse[i0] * (1 - t) + coarse[i0 + 1] * t
        t2 = (idx - i0)[None, :, None]
        noise = rows[:, i0] * (1 - t2) + rows[:, i0 + 1] * t2
        base = rng.dirichlet([0.5, 0.5, 0.5]) * 1.6
        return np.clip(0.2 + 0.8 * noise * base, 0.05, 1.0)
    raise ValueError(f"unknown domain {domain!r}; expected one of {', '.join(DOMAINS)}")


def random_light(rng: np.random.Generator) -> Light:
    """[reconstruction] A directional light, elevation 30-75 degrees, random hue (saturation <= 0.6)."""
    az, el = rng.uniform(0, 2 * np.pi), np.deg2rad(rng.uniform(30, 75))
    d = (np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el))
    hue = rng.dirichlet([1.0, 1.0, 1.0])
    hue = hue / hue.max()
    sat = rng.uniform(0.0, 0.6)
    rgb = (1.0 - sat * (1.0 - hue)) * rng.uniform(0.85, 1.1)
    return Light(tuple(float(v) for v in d), tuple(float(v) for v in rgb))


@dataclass
class SceneSet:
    """Scenes rendered under several lights.

    Attributes:
        images: (S, M, 3, H, W) float32 in [0, 1], the camera's images (with sensor noise
            in the shifted domain).
        clean: (S, M, 3, H, W) the noise-free renders (targets for evaluation only).
        material: (S, H, W) int64 material indices.
        shape: (S,) int64 shape-class labels (indices into :data:`SHAPES`).
        lights: the M lights of each scene, ``lights[s][m]``.
    """

    images: np.ndarray
    clean: np.ndarray
    material: np.ndarray
    shape: np.ndarray
    lights: list[list[Light]]


def make_scenes(n_scenes: int, n_lights: int, size: int, domain: str = "synthetic",
                seed: int = 0, noise: float = 0.04, shared_lights: bool = False) -> SceneSet:
    """[reconstruction] ``n_scenes`` random scenes, each rendered under ``n_lights`` random lights.

    Every scene holds all three materials (three Voronoi regions, one per material), so
    per-material metrics exist for every scene. The ``shifted`` domain has other textures
    and Gaussian sensor noise of standard deviation ``noise`` on ``images``. With
    ``shared_lights`` every scene is lit by the same ``n_lights`` lights (the cross-scene
    protocol needs a reference scene under the target's light).
    """
    if n_scenes < 1 or n_lights < 1 or size < 8:
        raise ValueError(f"need n_scenes >= 1, n_lights >= 1 and size >= 8, got {n_scenes}, {n_lights}, {size}")
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; expected one of {', '.join(DOMAINS)}")
    rng = np.random.default_rng(seed)
    clean = np.empty((n_scenes, n_lights, 3, size, size), np.float32)
    mats = np.empty((n_scenes, size, size), np.int64)
    shapes = rng.integers(0, len(SHAPES), n_scenes)
    lights = []
    common = [random_light(rng) for _ in range(n_lights)]
    for s in range(n_scenes):
        normals = heightfield_normals(random_height(rng, size, SHAPES[shapes[s]]))
        albedo = random_albedo(rng, size, domain)
        mats[s] = rng.permutation(len(MATERIALS))[_voronoi(rng, size, 3)]
        lights.append(list(common) if shared_lights else [random_light(rng) for _ in range(n_lights)])
        for m, light in enumerate(lights[-1]):
            clean[s, m] = shade(normals, albedo, mats[s], light)
    images = clean
    if domain == "shifted":
        images = np.clip(clean + rng.normal(0.0, noise, clean.shape), 0.0, 1.0).astype(np.float32)
    return SceneSet(images, clean, mats, shapes.astype(np.int64), lights)
