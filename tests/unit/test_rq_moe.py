"""Tests of the RQ-MoE chapter's module against faiss, brute force and exact special cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minirepro.core import set_seed
from minirepro.papers.rq_moe import (
    FaissQuantizer,
    PlainRQ,
    QINCo,
    RQMoE,
    load_vectors,
    mse,
    normalized_loss,
    recall_at,
    sequential_depth,
    train_quantizer,
    true_neighbours,
)
from minirepro.papers.rq_moe.baselines import pack_codes, unpack_codes
from minirepro.papers.rq_moe.rq import kmeans

D, K, M = 8, 16, 3


@pytest.fixture(scope="module")
def splits():
    return load_vectors("synthetic", 1500, 400, 50, d=D, seed=1)


@pytest.fixture(scope="module")
def plain_rq(splits):
    return PlainRQ(D, M, K).fit(splits.train, seed=0)


def _randomise(model: torch.nn.Module, seed: int = 0, scale: float = 0.3) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))


# ---------------------------------------------------------------- plain RQ vs faiss

def test_plain_rq_matches_faiss_residual_quantizer(splits, plain_rq):
    faiss_rq = FaissQuantizer("RQ", D, M, 4, seed=0).fit(splits.train)
    ours = mse(splits.database, plain_rq.decode(plain_rq.encode(splits.database)))
    ref = mse(splits.database, faiss_rq.decode(faiss_rq.encode(splits.database)))
    assert abs(ours - ref) / ref < 0.05, (ours, ref)


def test_plain_rq_encoding_is_greedy_nearest_codeword(splits, plain_rq):
    x = splits.database[:50].astype(np.float64)
    codes = plain_rq.encode(splits.database[:50])
    r = x.copy()
    for m in range(M):
        dist = ((r[:, None, :] - plain_rq.codebooks[m][None].astype(np.float64)) ** 2).sum(-1)
        np.testing.assert_array_equal(codes[:, m], dist.argmin(1))
        r -= plain_rq.codebooks[m][codes[:, m]]


def test_kmeans_centroids_are_cluster_means():
    x = torch.randn(300, 4, generator=torch.Generator().manual_seed(0))
    C = kmeans(x, 5, n_iter=30)
    a = ((x[:, None] - C[None]) ** 2).sum(-1).argmin(1)
    for k in range(5):
        torch.testing.assert_close(C[k], x[a == k].mean(0), atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------- special cases

@pytest.mark.parametrize("cls", [RQMoE, QINCo])
def test_fresh_model_is_exactly_rq(cls, splits, plain_rq):
    model = cls(D, K, M).init_from_rq(plain_rq.codebooks, scale=2.0)
    codes = model.encode(splits.database)
    np.testing.assert_array_equal(codes.numpy(), plain_rq.encode(splits.database))
    np.testing.assert_allclose(model.decode(codes).numpy(), plain_rq.decode(codes.numpy()),
                               rtol=1e-5, atol=1e-5)


def test_zeroed_experts_and_instructions_decode_as_rq(splits, plain_rq):
    """Train-like random weights everywhere, then zero the experts' output layers and the
    instruction tables and make the input projection the identity: RQ-MoE is plain RQ."""
    model = RQMoE(D, K, M, n_experts=3, hidden=8, n_layers=2).init_from_rq(plain_rq.codebooks)
    _randomise(model)
    with torch.no_grad():
        model.C0.copy_(torch.from_numpy(plain_rq.codebooks[0]))
        model.C.copy_(torch.from_numpy(plain_rq.codebooks[1:]))
        model.B.zero_()
        model.E.zero_()
        model.Wc.copy_(torch.eye(D).repeat(M - 1, 1, 1))
        model.b.zero_()
    rng = np.random.default_rng(0)
    codes = rng.integers(0, K, size=(64, M))
    np.testing.assert_allclose(model.decode(codes).numpy(), plain_rq.decode(codes),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(model.encode(splits.database).numpy(),
                                  plain_rq.encode(splits.database))


def test_two_step_qinco_is_a_special_case_of_rq_moe(splits, plain_rq):
    """With E_0 = C_0 (so I_1 = x_hat_0), W = [I + W_c ; W_x] and every expert equal to
    QINCo's residual blocks, RQ-MoE with M = 2 decodes exactly as QINCo."""
    books = plain_rq.codebooks[:2]
    q = QINCo(D, K, 2, hidden=8, n_layers=2).init_from_rq(books)
    _randomise(q, seed=3)
    r = RQMoE(D, K, 2, n_experts=3, hidden=8, n_layers=2).init_from_rq(books)
    _randomise(r, seed=4)
    with torch.no_grad():
        r.C0.copy_(q.C0)
        r.C.copy_(q.C)
        r.E[0].copy_(q.C0)
        r.Wc[0].copy_(torch.eye(D) + q.W[0, :D])
        r.WI[0].copy_(q.W[0, D:])
        r.b.copy_(q.b)
        r.A.copy_(q.A[:, None].expand_as(r.A))
        r.B.copy_(q.B[:, None].expand_as(r.B))
    codes = np.random.default_rng(1).integers(0, K, size=(64, 2))
    torch.testing.assert_close(r.decode(codes), q.decode(codes), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(r.encode(splits.database).numpy(), q.encode(splits.database).numpy())


# ---------------------------------------------------------------- decoding

@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n_experts=st.integers(1, 3), n_layers=st.integers(1, 2),
       steps=st.integers(2, 5))
def test_fused_decode_equals_serial_decode(seed, n_experts, n_layers, steps):
    model = RQMoE(D, K, steps, n_experts=n_experts, hidden=8, n_layers=n_layers)
    model.init_from_rq(np.zeros((steps, K, D), np.float32))
    _randomise(model, seed)
    codes = np.random.default_rng(seed).integers(0, K, size=(20, steps))
    torch.testing.assert_close(model.decode(codes), model.decode_serial(codes), rtol=1e-4, atol=1e-5)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_two_product_mixture_equals_expert_by_expert(seed):
    model = RQMoE(D, K, 3, n_experts=4, hidden=8, n_layers=1)
    _randomise(model, seed)
    z = torch.randn(2, 30, D, generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(model.mixture(z, slice(None)), model.mixture_reference(z, slice(None)),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cls", [RQMoE, QINCo])
def test_encode_decode_round_trip(cls, splits, plain_rq):
    """decode(encode(x)) is exactly the reconstruction the encoder committed to, codes are
    valid, every greedy choice is the nearest of that step's K candidates (brute force), and
    decoding from NumPy or torch codes agrees."""
    model = cls(D, K, M).init_from_rq(plain_rq.codebooks)
    _randomise(model, seed=5, scale=0.05)
    x = torch.as_tensor(splits.database)
    codes = model.encode(x)
    assert codes.shape == (len(x), M) and codes.dtype == torch.int64
    assert int(codes.min()) >= 0 and int(codes.max()) < K
    xs = x / model.scale
    with torch.no_grad():
        codes2, x_hat_enc = model.encode_with_reconstruction(xs)
        partial = model.partial_reconstructions(codes)
    torch.testing.assert_close(codes2, codes, rtol=0, atol=0)
    torch.testing.assert_close(model.decode(codes), x_hat_enc * model.scale, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.decode(codes), model.decode(codes.numpy()))
    with torch.no_grad():
        for m in range(1, M):
            ctx = model.instructions(codes)[m - 1] if cls is RQMoE else partial[m - 1]
            cands = model.step_candidates(m, ctx)  # (n, K, d)
            dist = ((xs - partial[m - 1])[:, None] - cands).pow(2).sum(-1)
            chosen = dist.gather(1, codes[:, m:m + 1])[:, 0]
            assert (chosen <= dist.min(1).values + 1e-5).all()


def test_faiss_code_packing_round_trip():
    rng = np.random.default_rng(0)
    for nbits, Mq in ((4, 3), (5, 4), (6, 8), (8, 2)):
        codes = rng.integers(0, 2 ** nbits, size=(30, Mq))
        size = (nbits * Mq + 7) // 8
        np.testing.assert_array_equal(unpack_codes(pack_codes(codes, nbits, size), Mq, nbits), codes)


@pytest.mark.parametrize("name", ["PQ", "OPQ", "RQ", "RQ (beam 8)", "LSQ"])
def test_faiss_baselines_round_trip(name, splits):
    q = FaissQuantizer(name, D, 2, 4, opq_iters=3, lsq_train_iters=2, lsq_encode_iters=2).fit(splits.train)
    codes = q.encode(splits.database)
    assert codes.shape == (len(splits.database), 2)
    np.testing.assert_array_equal(q.encode(q.decode(codes)) if name in ("PQ", "OPQ") else codes, codes)
    assert mse(splits.database, q.decode(codes)) < mse(splits.database, 0 * splits.database)


# ---------------------------------------------------------------- loss and training

def test_normalized_loss_closed_form():
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    partials = torch.stack([torch.zeros(2, 2), torch.tensor([[1.0, 0.0], [0.0, 1.0]])])
    # step 0 error 5 of energy 5 -> log 2; step 1 error 1 of 5 -> log 1.2
    expected = np.log(2.0) + np.log(1.2)
    assert abs(normalized_loss(x, partials).item() - expected) < 1e-5


@pytest.mark.parametrize("cls", [RQMoE, QINCo])
def test_training_lowers_the_error_below_rq(cls, splits, plain_rq):
    set_seed(0, threads=1)
    model = cls(D, K, M, hidden=16).init_from_rq(plain_rq.codebooks, scale=1.0)
    x = splits.train[:600]
    before = mse(x, model.decode(model.encode(x)).numpy())
    losses = train_quantizer(model, x, steps=20, batch_size=300, lr=3e-3)
    after = mse(x, model.decode(model.encode(x)).numpy())
    assert len(losses) == 20
    assert after < before


# ---------------------------------------------------------------- metrics

def test_recall_against_brute_force():
    rng = np.random.default_rng(0)
    xb = rng.normal(size=(200, 6)).astype(np.float32)
    xq = rng.normal(size=(30, 6)).astype(np.float32)
    dec = xb + 0.3 * rng.normal(size=xb.shape).astype(np.float32)
    gt = true_neighbours(xq, xb)
    np.testing.assert_array_equal(gt, ((xq[:, None] - xb[None]) ** 2).sum(-1).argmin(1))
    rank = ((xq[:, None] - dec[None]) ** 2).sum(-1).argsort(1)
    pos = (rank == gt[:, None]).argmax(1)
    rec = recall_at(xq, dec, gt, ks=(1, 10))
    assert rec[1] == pytest.approx((pos < 1).mean()) and rec[10] == pytest.approx((pos < 10).mean())
    assert recall_at(xq, xb, gt, ks=(1,))[1] == 1.0


def test_mse_is_mean_per_vector_sum():
    x = np.array([[0.0, 0.0], [1.0, 1.0]])
    assert mse(x, x + np.array([[1.0, 1.0], [0.0, 2.0]])) == pytest.approx((2 + 4) / 2)


def test_sequential_depth():
    assert sequential_depth("QINCo", 8, 2) == 7 * 5
    assert sequential_depth("RQ-MoE", 8, 1) == sequential_depth("RQ-MoE", 2, 1) == 3


def test_splits_are_disjoint_and_sized():
    s = load_vectors("digits", 300, 200, 40, d=16, seed=0)
    assert s.train.shape == (300, 16) and s.database.shape == (200, 16) and s.queries.shape == (40, 16)
    assert not np.isin(s.queries.view([("", s.queries.dtype)] * 16),
                       s.database.view([("", s.database.dtype)] * 16)).any()


@pytest.mark.parametrize("dataset", ["synthetic", "digits"])
def test_eval_redraw_keeps_training_vectors_and_the_distribution(dataset):
    """A fresh database/query draw: the seed's training vectors untouched (so its trained
    quantizers still apply), other vectors, the same distribution, deterministic."""
    from minirepro.papers.rq_moe.redraw import redraw_eval

    base = load_vectors(dataset, 600, 800, 100, d=16, seed=3)
    new = redraw_eval(base, 3, 0)
    again = redraw_eval(base, 3, 0)
    other = redraw_eval(base, 3, 1000)
    assert new.train is base.train and new.database.shape == base.database.shape
    assert new.queries.shape == base.queries.shape and new.database.dtype == np.float32
    assert np.array_equal(new.database, again.database) and np.array_equal(new.queries, again.queries)
    assert not np.array_equal(new.database, base.database) and not np.array_equal(new.database, other.database)
    # same distribution: per-dimension means and spreads agree within sampling error
    sd = base.database.std(0)
    assert np.abs(new.database.mean(0) - base.database.mean(0)).max() < 0.25 * sd.max()
    assert np.allclose(new.database.std(0), sd, rtol=0.2, atol=0.05 * sd.max())


def test_eval_seed_in_the_config():
    from minirepro.papers.rq_moe import Config, vectors

    cfg = Config(n_train=300, n_database=200, n_queries=40, d=16)
    assert np.array_equal(vectors("digits", cfg, 1).database,
                          load_vectors("digits", 300, 200, 40, d=16, seed=1).database)
    fresh = vectors("digits", Config(n_train=300, n_database=200, n_queries=40, d=16, eval_seed=5), 1)
    assert np.array_equal(fresh.train, load_vectors("digits", 300, 200, 40, d=16, seed=1).train)
    with pytest.raises(ValueError, match="eval_seed"):
        Config(eval_seed=-1)


# ---------------------------------------------------------------- clear errors

def test_untrained_quantizers_raise(splits):
    with pytest.raises(RuntimeError, match="not trained"):
        PlainRQ(D, M, K).encode(splits.database)
    with pytest.raises(RuntimeError, match="untrained"):
        RQMoE(D, K, M).encode(splits.database)
    with pytest.raises(RuntimeError, match="untrained"):
        QINCo(D, K, M).decode(np.zeros((2, M), dtype=np.int64))
    with pytest.raises(RuntimeError, match="untrained"):
        FaissQuantizer("PQ", D, 2, 4).encode(splits.database)


def test_wrong_dimensions_raise(splits, plain_rq):
    model = RQMoE(D, K, M).init_from_rq(plain_rq.codebooks)
    with pytest.raises(ValueError, match="dimension 5"):
        model.encode(np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match=r"shape \(n, M=3\)"):
        model.decode(np.zeros((3, 2), np.int64))
    with pytest.raises(ValueError, match=r"lie in \[0, K=16\)"):
        model.decode(np.full((3, M), K, np.int64))
    with pytest.raises(ValueError, match="shape"):
        RQMoE(D, K, M).init_from_rq(np.zeros((M, K, D + 1), np.float32))
    with pytest.raises(ValueError, match="dimension"):
        plain_rq.encode(np.zeros((3, D + 1), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        plain_rq.encode(np.full((3, D), np.nan, np.float32))
    with pytest.raises(ValueError, match="divisible"):
        FaissQuantizer("PQ", 10, 3, 4)
    with pytest.raises(ValueError, match="unknown baseline"):
        FaissQuantizer("IVF", D, 2, 4)
    with pytest.raises(ValueError, match="M >= 2"):
        RQMoE(D, K, 1)


def test_special_case_constructions_on_trained_like_weights(plain_rq):
    from minirepro.papers.rq_moe.special_cases import special_case_deviations

    r = RQMoE(D, K, M, n_experts=3, hidden=8).init_from_rq(plain_rq.codebooks, scale=1.5)
    q = QINCo(D, K, M, hidden=8, n_layers=2).init_from_rq(plain_rq.codebooks, scale=1.5)
    _randomise(r, seed=7)
    _randomise(q, seed=8)
    codes = torch.as_tensor(np.random.default_rng(2).integers(0, K, size=(100, M)))
    dev = special_case_deviations(r, q, codes)
    assert dev["RQ"] < 1e-4 and dev["QINCo (2 steps)"] < 1e-4
    # and the constructions are not vacuous: the unconstrained models differ from RQ
    from minirepro.papers.rq_moe.special_cases import rq_decode
    assert (r.decode(codes) - rq_decode(r, codes)).abs().max().item() > 1e-2


def test_per_seed_and_summary_on_a_known_table():
    import pandas as pd

    from minirepro.papers import rq_moe

    df = pd.DataFrame({"dataset": "s", "seed": [1, 0, 1, 0], "method": ["RQ", "RQ", "QINCo", "QINCo"],
                       "mse": [2.0, 4.0, 1.0, 3.0], "R@1": 0.5, "R@10": 0.9})
    rel = rq_moe.per_seed(df, "s", relative_to="RQ")
    assert list(rel.index) == [0, 1] and list(rel["QINCo"]) == [0.75, 0.5] and (rel["RQ"] == 1).all()
    summ = rq_moe.summarise(df)
    assert list(summ.index.get_level_values("method")) == ["QINCo", "RQ"]  # book order
    assert summ.loc[("s", "QINCo"), "mse mean"] == 2.0 and summ.loc[("s", "QINCo"), "n"] == 2
    with pytest.raises(ValueError, match="no rows"):
        rq_moe.per_seed(df, "other")


def test_opq_and_lsq_iterations_are_faiss_defaults():
    """The config (every preset) and FaissQuantizer run OPQ and LSQ at faiss's own defaults."""
    import inspect

    import faiss

    from minirepro.papers.rq_moe import Config

    lsq, opq = faiss.LocalSearchQuantizer(D, 2, 4), faiss.OPQMatrix(D, 2)
    want = {"opq_iters": opq.niter, "lsq_train_iters": lsq.train_iters,
            "lsq_encode_iters": lsq.encode_ils_iters}
    sig = inspect.signature(FaissQuantizer).parameters
    for scale in ("smoke", "book", "full"):
        cfg = Config.from_params({"scale": scale})
        assert {k: getattr(cfg, k) for k in want} == want, scale
    assert {k: sig[k].default for k in want} == want
    q = FaissQuantizer("LSQ", D, 2, 4)
    assert (q.q.train_iters, q.q.encode_ils_iters) == (lsq.train_iters, lsq.encode_ils_iters)
    assert FaissQuantizer("OPQ", D, 2, 4).rotation.niter == opq.niter


@pytest.mark.parametrize("net", [
    lambda: RQMoE(8, 16, 5, n_experts=3, hidden=6, gate_hidden=5),
    lambda: RQMoE(8, 16, 4, n_experts=2, hidden=6, n_layers=2),
    lambda: QINCo(8, 16, 5, hidden=7, n_layers=3),
])
def test_decode_macs_match_the_products_torch_runs(net):
    """The architecture's count equals torch's FLOP counter (from the matmuls' shapes) / 2 per vector."""
    from torch.utils.flop_counter import FlopCounterMode

    from minirepro.papers.rq_moe import model_decode_macs

    q = net()
    q.init_from_rq(np.random.default_rng(0).normal(size=(q.M, 16, 8)).astype(np.float32))
    codes = torch.randint(0, 16, (13, q.M))
    with FlopCounterMode(display=False) as fc:
        q.decode(codes)
    assert fc.get_total_flops() == 2 * 13 * model_decode_macs(q)


def test_decode_macs_by_hand():
    from minirepro.papers.rq_moe import decode_macs

    # QINCo, d=4, M=3, H=2, L=1: 2 steps x (2*16 + 2*4*2) = 96
    assert decode_macs("QINCo", 4, 3, hidden=2, n_layers=1) == 96
    # RQ-MoE, d=4, M=3, N=2, H=2, G=3: 2 x (32 + 12 + 6 + 2*4*2*2) + 4*4 = 2 x 82 + 16 = 180
    assert decode_macs("RQ-MoE", 4, 3, n_experts=2, hidden=2, gate_hidden=3) == 180
    with pytest.raises(ValueError, match="unknown method"):
        decode_macs("PQ", 4, 3)


def test_late_drop():
    from minirepro.papers.rq_moe import late_drop

    assert late_drop([1.0] * 20) == 0.0
    assert late_drop([3.0] * 16 + [2.2, 2.2, 2.0, 2.0]) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="at least 10"):
        late_drop([1.0] * 9)


def test_cosine_schedule_trains_and_rejects_unknown(splits, plain_rq):
    q = RQMoE(D, K, M, n_experts=2, hidden=8).init_from_rq(plain_rq.codebooks)
    losses = train_quantizer(q, splits.train, 12, 64, 1e-2, schedule="cosine")
    assert len(losses) == 12 and np.isfinite(losses).all()
    with pytest.raises(ValueError, match="schedule"):
        train_quantizer(q, splits.train, 2, 64, schedule="step")


def test_stored_networks_match_the_book_config_and_their_manifest():
    """The book preset loads the artifact's networks; they reproduce the MSE recorded at build time."""
    from minirepro.papers.rq_moe import Config, pretrained

    book, smoke = Config.from_params({"scale": "book"}), Config.from_params({"scale": "smoke"})
    assert pretrained.mismatches(book) == [] and book.pretrained
    assert "n_train" in pretrained.mismatches(smoke) and not smoke.pretrained
    assert pretrained.stored_network(smoke, "RQ-MoE", "synthetic", 0, 4) is None
    meta = pretrained.artifact_meta()
    assert meta["recipe"]["seeds"] == list(range(book.n_seeds))
    for method in ("RQ-MoE", "QINCo"):
        net = pretrained.stored_network(book, method, "digits", 1, book.M)
        db = load_vectors("digits", book.n_train, book.n_database, book.n_queries, d=book.d, seed=1).database
        stored = meta["networks"][f"{method}/digits/1/M{book.M}/"]
        assert mse(db, net.decode(net.encode(db)).numpy()) == pytest.approx(stored["db_mse"], rel=1e-3)
        assert stored["db_mse"] < stored["db_mse_rq"]  # training moved it below its RQ start
    curves = pretrained.training_curves(M=book.M)
    assert len(curves) == 2 * 2 * book.n_seeds * (book.steps // meta["curve_every"])
