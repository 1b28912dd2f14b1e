"""Fresh database and query vectors for a seed's trained quantizers (robustness runs).

The book's networks are a checked artifact trained on each seed's *training* vectors, so
another base seed has no trained networks. What a run can still re-draw is what the
quantizers are evaluated on: :func:`redraw_eval` keeps a seed's training vectors (and so
its fitted quantizers, faiss's and the artifact's alike) and draws new database and query
vectors from the same distribution with their own generator, seeded by
``SeedSequence([seed, 7, eval_seed])``:

* ``synthetic``: the same Gaussian mixture (its means and bases are fixed by ``seed``),
  sampled anew (:func:`minirepro.core.datasets.gaussian_mixture` with ``sample_seed``);
* ``digits``: new warps of the same held-out database and query images, embedded by the
  seed's PCA (fitted on its training vectors, as in :func:`~.data.digits_vectors`).

Kept apart from :mod:`~minirepro.papers.rq_moe.data`, which the artifact's source hash
covers.
"""

from __future__ import annotations

import inspect

import numpy as np

from minirepro.core import datasets
from minirepro.papers.rq_moe.data import (
    VectorSplits,
    digits_vectors,
    synthetic_vectors,
    warp_images,
)


def eval_generator_seed(seed: int, eval_seed: int) -> int:
    """The seed of the re-drawn database and queries: independent of ``seed``'s own draws."""
    return int(np.random.SeedSequence([int(seed), 7, int(eval_seed)]).generate_state(1)[0])


def _default(fn, name: str):
    return inspect.signature(fn).parameters[name].default


def _synthetic(splits: VectorSplits, seed: int, sample_seed: int) -> tuple[np.ndarray, np.ndarray]:
    n_db, n_q, d = len(splits.database), len(splits.queries), splits.d
    X, _ = datasets.gaussian_mixture(n=n_db + n_q, d=d,
                                     n_components=_default(synthetic_vectors, "n_components"),
                                     rank=_default(synthetic_vectors, "rank"), seed=seed,
                                     sample_seed=sample_seed)
    X = X.astype(np.float32)
    return X[:n_db], X[n_db:]


def _digits(splits: VectorSplits, seed: int, sample_seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.decomposition import PCA

    split = datasets.digits(seed=seed)
    tr_img, te_img = split.X_train.reshape(-1, 8, 8), split.X_test.reshape(-1, 8, 8)
    n_query_images = _default(digits_vectors, "query_images")
    q_img, db_img = te_img[:n_query_images], te_img[n_query_images:]
    Xt = warp_images(tr_img, len(splits.train), np.random.default_rng(seed + 12_000))
    pca = PCA(n_components=splits.d, random_state=seed).fit(Xt)
    if not np.array_equal(pca.transform(Xt).astype(np.float32), splits.train):
        raise RuntimeError("the digits training vectors could not be rebuilt: "
                           "data.digits_vectors changed and redraw must follow it")
    rng = np.random.default_rng(sample_seed)
    Xb = warp_images(db_img, len(splits.database), rng)
    Xq = warp_images(q_img, len(splits.queries), rng)
    return pca.transform(Xb).astype(np.float32), pca.transform(Xq).astype(np.float32)


def redraw_eval(splits: VectorSplits, seed: int, eval_seed: int) -> VectorSplits:
    """``splits`` (the seed's draw) with new database and query vectors, same sizes and distribution.

    Args:
        splits: a seed's vectors, as :func:`~.data.load_vectors` returns them.
        seed: the seed that drew them.
        eval_seed: which fresh draw.

    Returns:
        A :class:`~.data.VectorSplits` with ``splits.train`` unchanged (the same array).
    """
    sample_seed = eval_generator_seed(seed, eval_seed)
    if splits.name == "synthetic":
        xb, xq = _synthetic(splits, seed, sample_seed)
    elif splits.name == "digits":
        xb, xq = _digits(splits, seed, sample_seed)
    else:
        raise ValueError(f"unknown dataset {splits.name!r}; expected synthetic or digits")
    return VectorSplits(splits.name, splits.train, xb, xq)
