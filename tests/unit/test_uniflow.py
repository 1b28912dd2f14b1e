"""UniFLoW / FedA²-LoRA: the aggregators against independent references.

References: ``numpy.linalg.lstsq`` (FedA²'s ridge ``B+`` as an augmented least-squares
problem), the exact average update ``sum_i p_i B_i A_i`` formed by a plain loop, tensor
sizes for the byte counts, an unmodified ``peft`` model for the batched multi-client
forward, and one round through a real Flower gRPC server.
"""

from __future__ import annotations

import shutil
import socket
import sys
import tempfile
import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minirepro.papers import uniflow as U
from minirepro.papers.uniflow import aggregation as agg
from minirepro.papers.uniflow.flower import pack, unpack
from minirepro.papers.uniflow.strategies import LoRASpec, LoRAStrategy, client_update, fit_res

SPEC = LoRASpec((("a", 6, 5), ("b", 3, 7)), rank=2, alpha=4.0, init_scale=0.3)


def clients(rng, K=4, spec=SPEC, shared_A=False):
    """K clients' states: LoRA factors, zero base change, head and an 'image' projector."""
    out = []
    A0 = {m: rng.normal(size=(spec.rank, di)) for m, _, di in spec.modules}
    for _ in range(K):
        s = {}
        for m, do, di in spec.modules:
            s[f"lora.{m}.A"] = (A0[m] if shared_A else rng.normal(size=(spec.rank, di))).astype(np.float32)
            s[f"lora.{m}.B"] = rng.normal(size=(do, spec.rank)).astype(np.float32)
            s[f"base.{m}"] = np.zeros((do, di), np.float32)
        s["head.w"] = rng.normal(size=(10, 4)).astype(np.float32)
        s["head.b"] = rng.normal(size=10).astype(np.float32)
        s["enc.image.w"] = rng.normal(size=(16, 4)).astype(np.float32)
        s["enc.image.b"] = rng.normal(size=4).astype(np.float32)
        out.append(s)
    return out


def exact_target(states, p, m, s):
    """sum_i p_i s B_i A_i by a plain loop, float64."""
    w = np.asarray(p, float) / np.sum(p)
    return sum(wi * s * st[f"lora.{m}.B"].astype(np.float64) @ st[f"lora.{m}.A"].astype(np.float64)
               for wi, st in zip(w, states))


def run_round(method, states, p, lam_rel=1e-3, spec=SPEC):
    """One round in process: upload, aggregate_fit on Flower FitRes, apply the broadcast."""
    strat = LoRAStrategy(method, spec, {k: v for k, v in states[0].items() if not k.startswith("base.")},
                         lam_rel=lam_rel)
    keys = U.upload_keys(method, spec)
    results = []
    for i, s in enumerate(states):
        named = {k: s[k] for k in keys} | {k: v for k, v in s.items() if k.startswith(("head.", "enc."))}
        results.append((f"c{i}", fit_res(named, p[i], "image")))
    strat.aggregate_fit(1, results, [])
    new = []
    for i, s in enumerate(states):
        ins = strat.fit_ins(f"c{i}")
        new.append(client_update(s, unpack(ins.parameters, ins.config["names"]), spec,
                                 ins.config.get("reset_seed")))
    return strat, new


def implied_update(old, new, m, s, p):
    w = np.asarray(p, float) / np.sum(p)
    return sum(wi * (s * n[f"lora.{m}.B"].astype(np.float64) @ n[f"lora.{m}.A"] + n[f"base.{m}"] - o[f"base.{m}"])
               for wi, o, n in zip(w, old, new))


# ------------------------------------------------------------------ FedA²'s ridge solve


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), r=st.integers(1, 4), lam=st.sampled_from([0.0, 1e-3, 0.1, 2.0]),
       scaling=st.sampled_from([0.5, 2.0, 16.0]))
def test_feda2_b_is_the_ridge_least_squares_solution(seed, r, lam, scaling):
    rng = np.random.default_rng(seed)
    d_out, d_in = 6, 9
    A = rng.normal(size=(r, d_in))
    T = rng.normal(size=(d_out, d_in))
    B = agg.feda2_b(T, A, scaling, lam)
    # argmin_B ||s B A - T||^2 + lam s^2 ||B||^2 as one stacked lstsq: [s A^T; s sqrt(lam) I] B^T = [T^T; 0]
    M = np.vstack([scaling * A.T, scaling * np.sqrt(lam) * np.eye(r)])
    rhs = np.vstack([T.T, np.zeros((r, d_out))])
    ref = np.linalg.lstsq(M, rhs, rcond=None)[0].T
    np.testing.assert_allclose(B, ref, rtol=1e-8, atol=1e-8)


def test_feda2_with_lambda_zero_projects_onto_the_row_space_of_A_plus():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(3, 8))
    T = rng.normal(size=(5, 8))
    B = agg.feda2_b(T, A, 2.0, 0.0)
    resid = T - 2.0 * B @ A
    np.testing.assert_allclose(resid @ A.T, 0.0, atol=1e-10)  # normal equations
    # and it beats FedIT's product for any B in that row space (here: a random one)
    other = rng.normal(size=B.shape)
    assert np.linalg.norm(resid) <= np.linalg.norm(T - 2.0 * other @ A)


def test_large_lambda_shrinks_B_towards_zero():
    rng = np.random.default_rng(1)
    A, T = rng.normal(size=(2, 5)), rng.normal(size=(4, 5))
    norms = [np.linalg.norm(agg.feda2_b(T, A, 1.0, agg.ridge_lambda(A, lam))) for lam in (1e-4, 1, 1e4)]
    assert norms[0] > norms[1] > norms[2] and norms[2] < 1e-2 * norms[0]


# ------------------------------------------------------------------ exactness of the baselines


@pytest.mark.parametrize("method", ["FLoRA", "FedEx-LoRA"])
def test_flora_and_fedex_reproduce_the_exact_average_update(method):
    rng = np.random.default_rng(2)
    states, p = clients(rng), [10, 30, 20, 40]
    _, new = run_round(method, states, p)
    for m, _, _ in SPEC.modules:
        target = exact_target(states, p, m, SPEC.scaling)
        np.testing.assert_allclose(implied_update(states, new, m, SPEC.scaling, p), target, rtol=1e-5, atol=1e-5)
    if method == "FLoRA":  # the LoRA restarts: B = 0, fresh A shared by every client
        assert all(np.all(n["lora.a.B"] == 0) for n in new)
        assert all(np.array_equal(n["lora.a.A"], new[0]["lora.a.A"]) for n in new)


def test_flora_stack_product_is_the_weighted_sum():
    rng = np.random.default_rng(3)
    As = [rng.normal(size=(2, 5)) for _ in range(3)]
    Bs = [rng.normal(size=(4, 2)) for _ in range(3)]
    A_s, B_s = agg.flora_stack(As, Bs, [1, 2, 3])
    assert A_s.shape == (6, 5) and B_s.shape == (4, 6)
    ref = sum(w * b @ a for w, a, b in zip(np.array([1, 2, 3]) / 6, As, Bs))
    np.testing.assert_allclose(B_s @ A_s, ref, atol=1e-12)


def test_fedit_error_is_zero_when_every_client_shares_A():
    rng = np.random.default_rng(4)
    states, p = clients(rng, shared_A=True), [5, 5, 10, 20]
    _, new = run_round("FedIT", states, p)
    for m, _, _ in SPEC.modules:
        target = exact_target(states, p, m, SPEC.scaling)
        assert agg.relative_error(implied_update(states, new, m, SPEC.scaling, p), target) < 1e-6


def test_fedit_error_is_positive_and_feda2_not_larger_with_drifted_A():
    rng = np.random.default_rng(5)
    states, p = clients(rng), [1, 1, 1, 1]
    errs = {}
    for method in ("FedIT", "FedA2-LoRA"):
        _, new = run_round(method, states, p, lam_rel=0.0)
        errs[method] = agg.relative_error(implied_update(states, new, "a", SPEC.scaling, p),
                                          exact_target(states, p, "a", SPEC.scaling))
    assert errs["FedIT"] > 0.1 and errs["FedA2-LoRA"] <= errs["FedIT"] + 1e-6


def test_ffa_keeps_A_and_is_exact():
    rng = np.random.default_rng(6)
    states, p = clients(rng, shared_A=True), [3, 1, 2, 4]
    strat, new = run_round("FFA-LoRA", states, p)
    assert all(np.array_equal(n["lora.a.A"], states[i]["lora.a.A"]) for i, n in enumerate(new))
    target = exact_target(states, p, "a", SPEC.scaling)
    np.testing.assert_allclose(implied_update(states, new, "a", SPEC.scaling, p), target, rtol=1e-5, atol=1e-5)


def test_fedsa_keeps_each_clients_B():
    rng = np.random.default_rng(7)
    states, p = clients(rng), [1, 2, 3, 4]
    _, new = run_round("FedSA-LoRA", states, p)
    for s, n in zip(states, new):
        assert np.array_equal(s["lora.a.B"], n["lora.a.B"])
    A_plus = sum(w * s["lora.a.A"].astype(np.float64) for w, s in zip(np.array(p) / 10, states))
    np.testing.assert_allclose(new[0]["lora.a.A"], A_plus, rtol=1e-6)


def test_aggregate_fit_on_flower_messages_equals_the_in_process_path():
    rng = np.random.default_rng(8)
    states, p = clients(rng), [4, 3, 2, 1]
    for method in U.METHODS:
        strat, _ = run_round(method, states, p)
        init = {k: v for k, v in states[0].items() if not k.startswith("base.")}
        twin = LoRAStrategy(method, SPEC, init)
        keys = U.upload_keys(method, SPEC)
        ups = [{k: s[k] for k in keys} | {k: v for k, v in s.items() if k.startswith(("head.", "enc."))}
               for s in states]
        twin.aggregate_named(1, ups, p, ["image"] * 4)
        assert strat.outbox.keys() == twin.outbox.keys()
        for k in strat.outbox:
            np.testing.assert_array_equal(strat.outbox[k], twin.outbox[k])


# ------------------------------------------------------------------ bytes


def lora_bytes(spec, parts):
    return sum(4 * spec.rank * ({"A": di, "B": do}[x]) for _, do, di in spec.modules for x in parts)


def test_byte_counts_match_tensor_sizes():
    rng = np.random.default_rng(9)
    states, p = clients(rng), [1, 1, 1, 1]
    other = 4 * (10 * 4 + 10 + 16 * 4 + 4)  # head + one projector, float32
    ups = {"FedIT": ("A", "B"), "FFA-LoRA": ("B",), "FedSA-LoRA": ("A",)}
    for method, parts in ups.items():
        named = {k: states[0][k] for k in U.upload_keys(method, SPEC)}
        assert U.message_bytes(named) == lora_bytes(SPEC, parts)
    K = len(states)
    dense = sum(4 * do * di for _, do, di in SPEC.modules)
    down = {"FedIT": lora_bytes(SPEC, "AB"), "FedA2-LoRA": lora_bytes(SPEC, "AB"),
            "FFA-LoRA": lora_bytes(SPEC, "B"), "FedSA-LoRA": lora_bytes(SPEC, "A"),
            "FedEx-LoRA": lora_bytes(SPEC, "AB") + dense, "FLoRA": K * lora_bytes(SPEC, "AB")}
    for method, expect in down.items():
        strat, _ = run_round(method, states, p)
        msg = strat.message_for("c0")
        assert U.message_bytes(msg) == expect + other, method
        params, _ = pack(msg)  # Flower's serialisation adds only npy headers
        assert U.message_bytes(msg) < sum(len(t) for t in params.tensors) < U.message_bytes(msg) + 200 * len(msg)


def test_flora_download_grows_with_the_number_of_clients():
    rng = np.random.default_rng(10)
    sizes = []
    for K in (2, 4, 8):
        strat, _ = run_round("FLoRA", clients(rng, K=K), [1] * K)
        sizes.append(U.message_bytes({k: v for k, v in strat.message_for("c0").items() if k.startswith("stack")}))
    assert sizes[1] == 2 * sizes[0] and sizes[2] == 4 * sizes[0]


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("call,match", [
    (lambda: agg.target_update([np.ones((2, 5)), np.ones((3, 5))], [np.ones((4, 2)), np.ones((4, 3))],
                               [1, 1], 1.0), "ranks differ"),
    (lambda: agg.fedit([np.ones((2, 5))], [np.ones((4, 3))], [1]), "ranks differ"),
    (lambda: agg.feda2_b(np.ones((4, 5)), np.ones((2, 5)), 1.0, -0.1), "lambda"),
    (lambda: agg.ridge_lambda(np.ones((2, 5)), -1.0), "lambda"),
    (lambda: agg.feda2_b(np.ones((4, 5)), np.ones((2, 5)), 1.0, 0.0), "singular"),
    (lambda: agg.fedavg([np.ones(3), np.ones(3)], [1, -1]), "weights"),
    (lambda: agg.target_update([np.full((2, 5), np.nan)], [np.ones((4, 2))], [1], 1.0), "NaN"),
    (lambda: LoRAStrategy("FedA2-LoRA", SPEC, {}, lam_rel=-1.0), "lambda"),
    (lambda: LoRAStrategy("FedAvg", SPEC, {}), "unknown method"),
    (lambda: U.Config.preset("smoke", lam_rel=-1.0), "lambda"),
    (lambda: U.Config.preset("smoke", methods=("FedProx",)), "unknown methods"),
    (lambda: U.dirichlet_split(np.zeros(50, int), 3, -0.5, 0), "concentration"),
])
def test_bad_input_raises_clearly(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_mismatched_ranks_between_clients_fail_in_the_strategy():
    rng = np.random.default_rng(11)
    states = clients(rng, K=2)
    states[1]["lora.a.A"] = rng.normal(size=(3, 5)).astype(np.float32)
    states[1]["lora.a.B"] = rng.normal(size=(6, 3)).astype(np.float32)
    with pytest.raises(ValueError, match="ranks differ"):
        run_round("FedA2-LoRA", states, [1, 1])


def test_cli_refuses_a_negative_lambda_with_exit_2(capsys):
    from minirepro.cli import main

    with pytest.raises(SystemExit) as info:
        sys.exit(main(["run", "uniflow", "--scale", "smoke", "-p", "lam_rel", "-1"]))
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and len(err.splitlines()) == 1 and "lam_rel" in err, err


# ------------------------------------------------------------------ data and the batched model


def test_dirichlet_split_is_a_partition_and_skew_falls_with_alpha():
    y = np.repeat(np.arange(10), 60)
    skews = []
    for alpha in (0.1, 100.0):
        parts = U.dirichlet_split(y, 5, alpha, seed=0)
        allidx = np.concatenate(parts)
        assert len(allidx) == len(y) and len(np.unique(allidx)) == len(y)
        skews.append(U.label_skew(y, parts))
    assert skews[0] > 0.4 > 0.1 > skews[1]


def test_modalities_have_the_documented_shapes():
    fed = U.make_federation(3, 90, 30, 0.5, seed=0)
    assert len(fed.clients) == 9 and {c.modality for c in fed.clients} == set(U.MODALITIES)
    assert fed.test["image"].x.shape == (30, 4, 16) and fed.test["speech"].x.shape == (30, 4, 16)
    assert fed.test["text"].x.shape == (30, 4) and fed.test["text"].x.dtype == np.int64


def test_each_group_of_the_batched_model_equals_a_plain_peft_model():
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    mods = ["image", "text", "image"]
    model = U.GroupedUniModel(U.load_backbone(), mods, rank=4, alpha=8.0)
    rng = np.random.default_rng(0)
    for g in range(3):
        s = model.get_state(g)
        s = {k: rng.normal(size=v.shape).astype(np.float32) * (0.1 if k.startswith("base.") else 0.3)
             for k, v in s.items()}
        model.set_state(g, s)
    xs = {"image": torch.as_tensor(rng.random((2, 5, 4, 16)), dtype=torch.float32),
          "text": torch.as_tensor(rng.integers(20, 180, size=(1, 5, 4)))}
    with torch.no_grad():
        out = model(xs)
        h = model.encode(xs)
    for g in range(3):
        ref = get_peft_model(U.load_backbone(), LoraConfig(r=4, lora_alpha=8.0, target_modules=list(U.model.TARGETS),
                                                           lora_dropout=0.0))
        st_g = model.get_state(g)
        for name, mod in ref.named_modules():
            if hasattr(mod, "lora_A") and name.split(".")[-1] in U.model.TARGETS:
                k = f"L{name.split('layers.')[1].split('.')[0]}{U.model.SHORT[name.split('.')[-1]]}"
                mod.lora_A["default"].weight.data = torch.as_tensor(st_g[f"lora.{k}.A"])
                mod.lora_B["default"].weight.data = torch.as_tensor(st_g[f"lora.{k}.B"])
                mod.base_layer.weight.data += torch.as_tensor(st_g[f"base.{k}"])
        with torch.no_grad():
            last = ref(inputs_embeds=h[g]).last_hidden_state[:, -1]
            logits = last @ torch.as_tensor(st_g["head.w"]).T + torch.as_tensor(st_g["head.b"])
        torch.testing.assert_close(out[g], logits, rtol=1e-4, atol=1e-5)


def test_smoke_experiment_runs_and_exact_methods_have_zero_error():
    cfg = U.Config.preset("smoke", rounds=1, n_seeds=1, n_test=20, n_train=150, methods=("FedIT", "FLoRA", "FedA2-LoRA"),
                          lam_grid=(), text_only=False)
    ex = U.run_experiment(cfg)
    t = ex.rounds[ex.rounds["round"] == 1].set_index("method")
    assert t.loc["FLoRA", "error"] < 1e-5 and t.loc["FedIT", "error"] > 1e-3
    assert t.loc["FedA2-LoRA", "error"] <= t.loc["FedIT", "error"] + 1e-6
    assert t.loc["FLoRA", "down"] > t.loc["FedIT", "down"]


# ------------------------------------------------------------------ a real Flower round


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_one_round_through_a_real_flower_server_gives_the_same_aggregate():
    import flwr
    from flwr.compat.client.app import start_client
    from flwr.compat.server.app import start_server
    from flwr.server import ServerConfig

    rng = np.random.default_rng(12)
    states, p = clients(rng, K=3), [5, 7, 11]
    init = {k: v for k, v in states[0].items() if not k.startswith("base.")}
    ref, _ = run_round("FedA2-LoRA", states, p)
    strat = LoRAStrategy("FedA2-LoRA", SPEC, init, min_clients=3)
    assert isinstance(strat, flwr.server.strategy.Strategy)
    keys = U.upload_keys("FedA2-LoRA", SPEC)

    class Client(flwr.client.Client):
        def __init__(self, i):
            self.i = i

        def fit(self, ins):
            s = states[self.i]
            named = {k: s[k] for k in keys} | {k: v for k, v in s.items() if k.startswith(("head.", "enc."))}
            return fit_res(named, p[self.i], "image")

    # Flower samples clients in random order; the reference aggregate is order-free up to float rounding.
    # start_server installs signal handlers, so it runs in this (main) thread; the clients
    # connect from threads once it listens.
    address = f"127.0.0.1:{_free_port()}"

    def client(i):
        time.sleep(1.5)
        start_client(server_address=address, client=Client(i))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    start_server(server_address=address, config=ServerConfig(num_rounds=1, round_timeout=60), strategy=strat)
    for t in threads:
        t.join(timeout=30)
    for k in ref.outbox:
        np.testing.assert_allclose(strat.outbox[k], ref.outbox[k], rtol=1e-5, atol=1e-6)


def test_one_round_through_flowers_simulation_engine_gives_the_same_aggregate():
    """The same ``LoRAStrategy`` driven by Flower's Ray-based simulation engine (``flwr[simulation]``):
    three simulated SuperNodes run in Ray worker processes, the ServerApp aggregates their
    replies, and the aggregate equals the in-process call. Ray's workers must be gone afterwards."""
    import psutil
    from flwr.client import Client as FlowerClient
    from flwr.client import ClientApp
    from flwr.server import ServerApp, ServerConfig
    from flwr.simulation import run_simulation

    rng = np.random.default_rng(21)
    states, p = clients(rng, K=3), [4, 9, 6]
    init = {k: v for k, v in states[0].items() if not k.startswith("base.")}
    ref, _ = run_round("FedA2-LoRA", states, p)
    strat = LoRAStrategy("FedA2-LoRA", SPEC, init, min_clients=3)
    keys = U.upload_keys("FedA2-LoRA", SPEC)

    # Each client's reply, packed here: the Ray workers then need Flower alone (importing
    # minirepro.papers.uniflow, torch and peft in each worker cost most of this test's time).
    replies = []
    for i, s in enumerate(states):
        named = {k: s[k] for k in keys} | {k: v for k, v in s.items() if k.startswith(("head.", "enc."))}
        replies.append(fit_res(named, p[i], "image"))

    class Client(FlowerClient):  # defined here, so Ray ships it to its workers by value
        def __init__(self, i):
            self.i = i

        def fit(self, ins):
            return replies[self.i]

    def client_fn(context):
        return Client(int(context.node_config["partition-id"]))

    # Ray's own temporary folder, with a short path: its Unix sockets live there and a path
    # longer than ~107 bytes (pytest's tmp_path is) makes Ray wait forever for its raylet.
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    before = {c.pid for c in psutil.Process().children(recursive=True)}
    try:
        run_simulation(
            server_app=ServerApp(config=ServerConfig(num_rounds=1), strategy=strat),
            client_app=ClientApp(client_fn=client_fn),
            num_supernodes=3,
            backend_config={"client_resources": {"num_cpus": 1},
                            "init_args": {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False,
                                          "_temp_dir": ray_tmp}},
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert strat.outbox, "the simulation finished without an aggregate"
    for k in ref.outbox:
        np.testing.assert_allclose(strat.outbox[k], ref.outbox[k], rtol=1e-5, atol=1e-6)
    deadline = time.time() + 20  # Ray's shutdown reaps its workers asynchronously
    while (left := [c for c in psutil.Process().children(recursive=True) if c.pid not in before and c.is_running()
                    and c.status() != psutil.STATUS_ZOMBIE]) and time.time() < deadline:
        time.sleep(0.5)
    assert not left, f"Ray left processes running: {[c.name() for c in left]}"
