"""Debate2Create: bodies, rollouts, CMA-ES, rewards, agent JSON, the HTTP adapter."""

from __future__ import annotations

import json
import threading
import time
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minirepro.papers import debate2create as d

# --- bodies -------------------------------------------------------------------------


def test_default_parameters_reproduce_gymnasium_swimmer():
    ours = d.load_model(d.DEFAULT)
    ref = gym.make("Swimmer-v5").unwrapped.model
    for attr in ("body_pos", "body_mass", "body_inertia", "geom_size", "geom_pos", "jnt_pos",
                 "jnt_range", "dof_armature", "actuator_gear"):
        np.testing.assert_allclose(getattr(ours, attr), getattr(ref, attr), atol=1e-12, err_msg=attr)
    assert ours.opt.density == ref.opt.density and ours.opt.viscosity == ref.opt.viscosity


@settings(max_examples=15, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=6, max_size=6))
def test_generated_xml_has_declared_segments(u):
    p = np.array(d.LOWER) + np.array(u) * (np.array(d.UPPER) - np.array(d.LOWER))
    xml = d.swimmer_xml(p)
    ET.fromstring(xml)  # well-formed
    lengths, radii = d.segment_geometry(xml)
    np.testing.assert_allclose(lengths, p[:3], rtol=1e-5)
    np.testing.assert_allclose(radii, p[3:], rtol=1e-5)
    m = mujoco.MjModel.from_xml_string(xml)  # loads in MuJoCo
    # the capsule half-lengths MuJoCo compiled match the declared lengths
    np.testing.assert_allclose(2 * m.geom_size[1:, 1], p[:3], rtol=1e-5)
    np.testing.assert_allclose(m.geom_size[1:, 0], p[3:], rtol=1e-5)


def test_make_env_uses_the_generated_body():
    p = np.array([0.5, 1.5, 0.8, 0.05, 0.03, 0.02])
    env = d.make_env(p)
    np.testing.assert_allclose(env.unwrapped.model.geom_size[1:, 0], p[3:], rtol=1e-6)


@pytest.mark.parametrize("bad", [[1, 1, 1, 0.1, 0.1], [1, 1, 1, 0.1, 0.1, 5.0],
                                 [1, 1, float("nan"), 0.1, 0.1, 0.1]])
def test_bad_parameters_raise(bad):
    with pytest.raises(ValueError):
        d.swimmer_xml(bad)


# --- rollouts and the score -----------------------------------------------------------


def test_forward_displacement_matches_gymnasium_steps():
    """Batched mujoco.rollout with frame skip 4 = gymnasium's Swimmer-v5 env.step loop."""
    p = np.array([0.7, 1.2, 0.9, 0.06, 0.08, 0.05])
    theta = np.array([[0.9, 0.8, 0.8, -1.0]])
    T = 40
    model = d.load_model(p)
    tr = d.simulate(model, d.cpg_controls(theta, T, 0.04), d.initial_states(model, 1))
    env = d.make_env(p)
    _, info = env.reset(seed=0)
    x0 = info["x_position"]
    for a in tr.actions[0]:
        _, _, _, _, info = env.step(a)
    assert tr.forward_displacement()[0] == pytest.approx(info["x_position"] - x0, abs=1e-9)
    assert tr.qpos[0, -1, 1] == pytest.approx(info["y_position"], abs=1e-9)
    assert abs(tr.forward_displacement()[0]) > 0.05  # the test is not trivially satisfied


def test_observations_match_gymnasium():
    p = np.array(d.DEFAULT)
    model = d.load_model(p)
    tr = d.simulate(model, d.cpg_controls(np.array([[1, 1, 0.7, -1.0]]), 10, 0.04),
                    d.initial_states(model, 1))
    env = d.make_env(p)
    env.reset(seed=0)
    o = d.observations(tr)
    for t, a in enumerate(tr.actions[0]):
        obs, _, _, _, info = env.step(a)
        np.testing.assert_allclose(o["obs"][0, t], obs, atol=1e-9)
        assert o["metrics"]["x_velocity"][0, t] == pytest.approx(info["x_velocity"], abs=1e-9)


# --- CMA-ES ---------------------------------------------------------------------------


def test_cmaes_improves_a_known_quadratic():
    target = np.array([0.3, -0.2, 0.7])
    f = lambda x: -((x - target) ** 2).sum(axis=1)  # noqa: E731
    x, v, curve = d.cmaes_maximize(f, -np.ones(3), np.ones(3), 40, 8, seed=0)
    assert np.all(np.diff(curve) >= 0)
    assert v > -1e-3 and np.allclose(x, target, atol=0.05)
    assert curve[0] < v  # it improved on the first generation


def test_cmaes_controller_beats_zero_control():
    c = d.train_candidate(np.array(d.DEFAULT), d.DEFAULT_REWARD_SOURCE, 60, 6, 2, seed=0)
    zero = d.zero_control_distance(np.array(d.DEFAULT), 60, seed=0, n_inits=1, noise=0.0)
    assert abs(zero) < 1e-9
    assert c.distance > 0.3  # metres in 2.4 s


def test_cmaes_rejects_bad_settings():
    with pytest.raises(ValueError):
        d.cmaes_maximize(lambda x: x.sum(1), np.zeros(2), np.ones(2), 0, 8, seed=0)


def test_tpe_improves_a_known_quadratic_and_is_deterministic():
    target = np.array([0.3, -0.2, 0.7])
    f = lambda x: -float(((x - target) ** 2).sum())  # noqa: E731
    calls = []
    x, v, curve = d.tpe_maximize(lambda x: calls.append(x) or f(x), -np.ones(3), np.ones(3), 40, seed=0,
                                 x0=np.zeros(3))
    assert len(calls) == 40 and curve.shape == (40,) and np.all(np.diff(curve) >= 0)
    np.testing.assert_array_equal(calls[0], np.zeros(3))  # x0 is evaluated first
    assert v > curve[9] and v > -0.05  # the model-guided trials beat the 10 random start trials
    x2, v2, curve2 = d.tpe_maximize(f, -np.ones(3), np.ones(3), 40, seed=0, x0=np.zeros(3))
    np.testing.assert_array_equal(curve, curve2)
    np.testing.assert_array_equal(x, x2)
    _, _, curve3 = d.tpe_maximize(f, -np.ones(3), np.ones(3), 40, seed=1, x0=np.zeros(3))
    assert not np.array_equal(curve, curve3)  # the seed matters


@pytest.mark.parametrize("n", [0, -3, 2.5])
def test_tpe_rejects_a_budget_below_one(n):
    with pytest.raises(ValueError, match="BO budget"):
        d.tpe_maximize(lambda x: 0.0, np.zeros(2), np.ones(2), n, seed=0)


def test_bo_arm_spends_the_declared_budget_and_is_deterministic():
    b = d.Budget(rounds=2, theses=2, rewards=1, steps=20, popsize=4, generations=1)
    run = d.run_morphology_bo(b, seed=3)
    again = d.run_morphology_bo(b, seed=3)
    assert len(run.candidates) == b.candidates == 4
    np.testing.assert_array_equal(run.candidates[0].params, d.DEFAULT)  # the default body first
    assert all(c.reward_source == d.DEFAULT_REWARD_SOURCE for c in run.candidates)
    np.testing.assert_array_equal([c.params for c in run.candidates], [c.params for c in again.candidates])
    assert [c.distance for c in run.candidates] == [c.distance for c in again.candidates]
    lo, hi = np.array(d.LOWER), np.array(d.UPPER)
    assert all(np.all((c.params >= lo) & (c.params <= hi)) for c in run.candidates)
    assert len({tuple(c.params) for c in run.candidates}) == 4  # distinct bodies, not a repeat
    other = d.run_morphology_bo(b, seed=4)
    assert not np.array_equal(other.candidates[1].params, run.candidates[1].params)


def test_bo_arm_rejects_an_empty_budget():
    with pytest.raises(ValueError, match="at least 1 candidate"):
        d.run_morphology_bo(d.Budget(rounds=0, theses=2, rewards=1, steps=20, popsize=4,
                                     generations=1), seed=0)


# --- rewards ----------------------------------------------------------------------------


def test_default_reward_is_gymnasium_reward():
    p = np.array(d.DEFAULT)
    model = d.load_model(p)
    tr = d.simulate(model, d.cpg_controls(np.array([[1, 0.5, 0.9, 1.0]]), 15, 0.04),
                    d.initial_states(model, 1))
    env = d.make_env(p)
    env.reset(seed=0)
    total = sum(env.step(a)[1] for a in tr.actions[0])
    fn = d.compile_reward(d.DEFAULT_REWARD_SOURCE)
    assert d.episode_return(fn, tr)[0] == pytest.approx(total, abs=1e-9)


@pytest.mark.parametrize("src", ["x = 1", "import os\ndef compute_reward(*a): pass",
                                 "def compute_reward(obs, action, prev_action, dt, metrics):\n  return ("])
def test_compile_reward_rejects_bad_source(src):
    with pytest.raises(ValueError):
        d.compile_reward(src)


def test_reward_with_wrong_shape_is_rejected():
    fn = d.compile_reward("def compute_reward(obs, action, prev_action, dt, metrics):\n"
                          "    return np.zeros(3), {}\n")
    model = d.load_model(d.DEFAULT)
    tr = d.simulate(model, np.zeros((2, 5, 2)), d.initial_states(model, 1))
    with pytest.raises(ValueError, match="shape"):
        d.episode_return(fn, tr)


# --- agent JSON ---------------------------------------------------------------------------


def test_parse_design_accepts_valid_and_fenced():
    p, desc = d.parse_design('```json\n{"parameters": [1, 1, 1, 0.1, 0.1, 0.1], "description": "x"}\n```')
    np.testing.assert_allclose(p, d.DEFAULT)
    assert desc == "x"


@pytest.mark.parametrize("text,match", [
    ("", "empty"),
    ("the body should be longer", "not valid JSON"),
    ('[1, 1, 1, 0.1, 0.1, 0.1]', "JSON object"),
    ('{"description": "no params"}', "missing key"),
    ('{"parameters": [1, 1, 1, 0.1, 0.1]}', "list of 6"),
    ('{"parameters": [1, 1, 1, 0.1, 0.1, "0.1"]}', "number"),
    ('{"parameters": [1, 1, true, 0.1, 0.1, 0.1]}', "number"),
    ('{"parameters": [1, 1, 1, 0.1, 0.1, 9.0]}', "outside"),
    ('{"parameters": [1, 1, 1, 0.1, 0.1, NaN]}', "not finite"),
    ('{"parameters": [1, 1, 1, 0.1, 0.1, 0.1], "description": 3}', "description"),
])
def test_parse_design_rejects_malformed(text, match):
    with pytest.raises(d.AgentOutputError, match=match):
        d.parse_design(text)


def test_parse_other_roles():
    assert d.parse_critique('{"critique": "too thin"}') == "too thin"
    with pytest.raises(d.AgentOutputError):
        d.parse_critique('{"critique": ""}')
    with pytest.raises(d.AgentOutputError, match="numbers"):
        d.parse_judgement('{"observation": "It moved 3 m."}')
    with pytest.raises(d.AgentOutputError, match="30 words"):
        d.parse_judgement(json.dumps({"observation": " ".join(["word"] * 30)}))
    with pytest.raises(d.AgentOutputError):
        d.parse_rewards('{"reward_functions": ["return 1"]}')


def test_scripted_stand_in_emits_parseable_json():
    llm = d.ScriptedLLM(0)
    p, _ = d.parse_design(llm(d.make_prompt("design_thesis", {"hall_of_fame": [], "judges": []})))
    crit = d.parse_critique(llm(d.make_prompt("control_critique", {"parameters": p.tolist()})))
    q, _ = d.parse_design(llm(d.make_prompt("design_synthesis", {"thesis": p.tolist(), "critique": crit})))
    fns = d.parse_rewards(llm(d.make_prompt("control_rewards", {"parameters": q.tolist(), "critique": crit,
                                                                 "judges": [], "n": 2})))
    assert len(fns) == 2 and all(callable(d.compile_reward(f)) for f in fns)
    ctx = {"distance": 1.0, "best_distance": 0.5, "baseline_distance": 0.8, "lateral_ratio": 0.5,
           "effort_per_metre": 10.0, "novelty": 0.1}
    for j in d.JUDGES:
        d.parse_judgement(llm(d.make_prompt(f"judge_{j}", ctx)))


def test_protocol_stops_on_malformed_agent_output():
    b = d.Budget(rounds=1, theses=1, rewards=1, steps=10, popsize=4, generations=1)
    with pytest.raises(d.AgentOutputError):
        d.run_debate(lambda prompt: "I think a longer tail", b, seed=0, baseline=0.0)


def test_debate_spends_the_declared_budget():
    b = d.Budget(rounds=2, theses=2, rewards=1, steps=20, popsize=4, generations=1)
    run = d.run_debate(d.ScriptedLLM(0), b, seed=0, baseline=0.0)
    assert len(run.candidates) == b.candidates and len(run.hall_of_fame) == 2
    assert len(run.judge_log) == 2 and len(run.judge_log[0]) == 4
    zs = d.run_debate(d.ScriptedLLM(0), b, seed=0, baseline=0.0, iterative=False, judges=False)
    assert len(zs.candidates) == b.candidates and len(zs.hall_of_fame) == 1
    single = d.run_debate(d.ScriptedLLM(0), b, seed=0, baseline=0.0, reward_design=False)
    assert all(c.reward_source == d.DEFAULT_REWARD_SOURCE for c in single.candidates)
    assert all(c.reward_source != d.DEFAULT_REWARD_SOURCE for c in run.candidates)


# --- the HTTP adapter against a fake OpenAI-compatible server ------------------------------


class _Fake(BaseHTTPRequestHandler):
    mode = "ok"

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.mode == "slow":
            time.sleep(1.0)
        if self.mode == "500":
            self.send_response(500)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if self.mode == "badjson":
            self.wfile.write(b"{not json")
            return
        reply = json.dumps({"parameters": [1, 1, 1, 0.1, 0.1, 0.1], "description":
                            body["messages"][0]["content"][:10]})
        self.wfile.write(json.dumps({"choices": [{"message": {"role": "assistant",
                                                              "content": reply}}]}).encode())


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_http_adapter_round_trip(server):
    _Fake.mode = "ok"
    llm = d.OpenAIChatLLM(server, "fake-model", timeout=5)
    p, desc = d.parse_design(llm("ROLE: design_thesis"))
    np.testing.assert_allclose(p, d.DEFAULT)
    assert desc == "ROLE: desi"


@pytest.mark.parametrize("mode,match", [("slow", "timed out"), ("500", "HTTP 500"),
                                        ("badjson", "unexpected reply")])
def test_http_adapter_errors(server, mode, match):
    _Fake.mode = mode
    llm = d.OpenAIChatLLM(server, "fake-model", timeout=0.3)
    with pytest.raises(d.LLMEndpointError, match=match):
        llm("hello")
    _Fake.mode = "ok"


def test_http_adapter_unreachable_and_bad_url():
    with pytest.raises(ValueError):
        d.OpenAIChatLLM("localhost:1", "m")
    with pytest.raises(d.LLMEndpointError, match="cannot reach"):
        d.OpenAIChatLLM("http://127.0.0.1:9/v1", "m", timeout=2)("hi")
