"""Swimmer bodies from the public code's 6 parameters [L1, L2, L3, r1, r2, r3].

The XML is gymnasium's ``swimmer.xml`` with the three capsules' lengths and radii
filled in. The torso frame sits at the centre of the middle segment, as in
gymnasium's file, so the default vector reproduces gymnasium's default swimmer
exactly (the public code's template puts it at the first joint instead: the same
body, translated by half a segment).
"""

from __future__ import annotations

import os
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence

import numpy as np

PARAM_NAMES: tuple[str, ...] = ("L1", "L2", "L3", "r1", "r2", "r3")
DEFAULT: tuple[float, ...] = (1.0, 1.0, 1.0, 0.1, 0.1, 0.1)
# design space of the miniature [reconstruction]: lengths in m, radii in m
LOWER: tuple[float, ...] = (0.2, 0.2, 0.2, 0.01, 0.01, 0.01)
UPPER: tuple[float, ...] = (2.0, 2.0, 2.0, 0.2, 0.2, 0.2)
# the bodies the public code's baselines report (baselines/swimmer/*)
PUBLIC_BODIES: dict[str, tuple[float, ...]] = {
    "default": DEFAULT,
    "D2C (released)": (0.30, 0.34, 0.92, 0.055, 0.028, 0.016),
    "Eureka+morphology": (0.9, 0.7, 0.5, 0.035, 0.025, 0.015),
    "RoboMoRe": (2.0, 2.0, 2.0, 0.01, 0.01, 0.01),
    "Bayesian opt.": (1.01, 1.01, 1.5, 0.11, 0.11, 0.11),
}


def check_params(params: Sequence[float]) -> np.ndarray:
    """Validate a Swimmer parameter vector: 6 finite numbers inside [LOWER, UPPER].

    Returns the vector as float64 of shape (6,). Raises ``ValueError`` naming the
    offending entry.
    """
    p = np.asarray(params, dtype=float)
    if p.shape != (len(PARAM_NAMES),):
        raise ValueError(f"a Swimmer body needs {len(PARAM_NAMES)} parameters {PARAM_NAMES}, "
                         f"got shape {p.shape}")
    for name, v, lo, hi in zip(PARAM_NAMES, p, LOWER, UPPER, strict=True):
        if not np.isfinite(v):
            raise ValueError(f"parameter {name} is not finite: {v}")
        if not lo <= v <= hi:
            raise ValueError(f"parameter {name}={v:g} is outside [{lo:g}, {hi:g}]")
    return p


def _f(x: float) -> str:
    return f"{float(x):.12g}"


def swimmer_xml(params: Sequence[float]) -> str:
    """§3 (design space, Swimmer): the body's MJCF for ``params`` = [L1, L2, L3, r1, r2, r3] (m)."""
    L1, L2, L3, r1, r2, r3 = check_params(params)
    h = L2 / 2
    return f"""<mujoco model="swimmer">
  <compiler angle="degree" coordinate="local" inertiafromgeom="true"/>
  <option density="4000" integrator="RK4" timestep="0.01" viscosity="0.1"/>
  <default>
    <geom conaffinity="0" condim="1" contype="0" material="geom" rgba="0.8 0.6 .4 1"/>
    <joint armature='0.1'  />
  </default>
  <asset>
    <texture builtin="gradient" height="100" rgb1="1 1 1" rgb2="0 0 0" type="skybox" width="100"/>
    <texture builtin="flat" height="1278" mark="cross" markrgb="1 1 1" name="texgeom" random="0.01" rgb1="0.8 0.6 0.4" rgb2="0.8 0.6 0.4" type="cube" width="127"/>
    <texture builtin="checker" height="100" name="texplane" rgb1="0 0 0" rgb2="0.8 0.8 0.8" type="2d" width="100"/>
    <material name="MatPlane" reflectance="0.5" shininess="1" specular="1" texrepeat="30 30" texture="texplane"/>
    <material name="geom" texture="texgeom" texuniform="true"/>
  </asset>
  <worldbody>
    <light cutoff="100" diffuse="1 1 1" dir="-0 0 -1.3" directional="true" exponent="1" pos="0 0 1.3" specular=".1 .1 .1"/>
    <geom condim="3" material="MatPlane" name="floor" pos="0 0 -0.1" rgba="0.8 0.9 0.8 1" size="40 40 0.1" type="plane"/>
    <body name="torso" pos="0 0 0">
      <camera name="track" mode="trackcom" pos="0 -3 3" xyaxes="1 0 0 0 1 1"/>
      <geom name="seg1" density="1000" fromto="{_f(h + L1)} 0 0 {_f(h)} 0 0" size="{_f(r1)}" type="capsule"/>
      <joint axis="1 0 0" name="slider1" pos="0 0 0" type="slide"/>
      <joint axis="0 1 0" name="slider2" pos="0 0 0" type="slide"/>
      <joint axis="0 0 1" name="free_body_rot" pos="0 0 0" type="hinge"/>
      <body name="mid" pos="{_f(h)} 0 0">
        <geom name="seg2" density="1000" fromto="0 0 0 {_f(-L2)} 0 0" size="{_f(r2)}" type="capsule"/>
        <joint axis="0 0 1" limited="true" name="motor1_rot" pos="0 0 0" range="-100 100" type="hinge"/>
        <body name="back" pos="{_f(-L2)} 0 0">
          <geom name="seg3" density="1000" fromto="0 0 0 {_f(-L3)} 0 0" size="{_f(r3)}" type="capsule"/>
          <joint axis="0 0 1" limited="true" name="motor2_rot" pos="0 0 0" range="-100 100" type="hinge"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor ctrllimited="true" ctrlrange="-1 1" gear="150.0" joint="motor1_rot"/>
    <motor ctrllimited="true" ctrlrange="-1 1" gear="150.0" joint="motor2_rot"/>
  </actuator>
</mujoco>
"""


def segment_geometry(xml: str) -> tuple[np.ndarray, np.ndarray]:
    """Lengths and radii (m) of the three capsules, read back from an MJCF string.

    Returns two arrays of shape (3,), in the order torso, mid, back.
    """
    root = ET.fromstring(xml)
    lengths, radii = [], []
    for name in ("seg1", "seg2", "seg3"):
        g = root.find(f".//geom[@name='{name}']")
        if g is None:
            raise ValueError(f"no geom named {name!r} in the XML")
        a = np.array(g.get("fromto").split(), dtype=float)
        lengths.append(float(np.linalg.norm(a[3:] - a[:3])))
        radii.append(float(g.get("size").split()[0]))
    return np.array(lengths), np.array(radii)


def make_env(params: Sequence[float], reset_noise_scale: float = 0.0, **kwargs):
    """A gymnasium ``Swimmer-v5`` whose body is ``params`` (through ``xml_file=``).

    The XML is written to a temporary file that gymnasium reads at construction.
    """
    import gymnasium as gym

    xml = swimmer_xml(params)
    fd, path = tempfile.mkstemp(suffix=".xml", prefix="d2c-swimmer-")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(xml)
        return gym.make("Swimmer-v5", xml_file=path, reset_noise_scale=reset_noise_scale, **kwargs)
    finally:
        os.unlink(path)


def load_model(params: Sequence[float]):
    """The compiled ``mujoco.MjModel`` of the body ``params`` (the model Swimmer-v5 builds)."""
    import mujoco

    return mujoco.MjModel.from_xml_string(swimmer_xml(params))
