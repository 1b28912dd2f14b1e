"""The faiss baselines: PQ, OPQ, RQ (beam 1 and a wider beam) and LSQ, behind one interface."""

from __future__ import annotations

import numpy as np

from minirepro.papers.rq_moe.rq import check_codes, check_vectors

BASELINES: tuple[str, ...] = ("PQ", "OPQ", "RQ", "RQ (beam 8)", "LSQ")


class FaissQuantizer:
    """Eqs. (rq-moe-eq-pq, rq-moe-eq-rq, rq-moe-eq-lsq): the faiss baselines behind one codec.

    A faiss vector codec with ``M`` codebooks of ``2**nbits`` codewords.

    ``name`` is one of ``BASELINES``: ``ProductQuantizer`` ("PQ"), an ``OPQMatrix``
    rotation then PQ ("OPQ"), ``ResidualQuantizer`` with beam 1 ("RQ") or beam
    ``wide_beam`` ("RQ (beam 8)"), ``LocalSearchQuantizer`` ("LSQ"). ``fit``, then
    ``encode`` (n, d) -> (n, M) int64 and ``decode`` (n, M) -> (n, d) float32.

    The OPQ and LSQ iteration counts default to faiss's own defaults (``OPQMatrix.niter``,
    ``LocalSearchQuantizer.train_iters`` and ``encode_ils_iters``; a unit test reads them
    from fresh faiss objects).
    """

    def __init__(self, name: str, d: int, M: int, nbits: int, wide_beam: int = 8,
                 lsq_train_iters: int = 25, lsq_encode_iters: int = 16, opq_iters: int = 50,
                 kmeans_iters: int = 25, seed: int = 0) -> None:
        import faiss

        if name not in BASELINES:
            raise ValueError(f"unknown baseline {name!r}; expected one of {', '.join(BASELINES)}")
        if name in ("PQ", "OPQ") and d % M:
            raise ValueError(f"{name} needs d divisible by M, got d={d}, M={M}")
        self.name, self.d, self.M, self.nbits = name, d, M, nbits
        self.rotation = None
        if name in ("PQ", "OPQ"):
            self.q = faiss.ProductQuantizer(d, M, nbits)
            self.q.cp.seed = seed
            self.q.cp.niter = kmeans_iters
            self.q.cp.min_points_per_centroid = 1  # small training sets are intended here
            if name == "OPQ":
                self.rotation = faiss.OPQMatrix(d, M)
                self.rotation.pq = self.q  # optimise the rotation for this PQ (nbits, seed)
                self.rotation.niter = opq_iters
        elif name.startswith("RQ"):
            self.q = faiss.ResidualQuantizer(d, M, nbits)
            # plain k-means per step, trained greedily (beam 1); "RQ (beam 8)" keeps these
            # codebooks and searches with a wider beam when encoding (see fit)
            self.q.train_type = faiss.ResidualQuantizer.Train_default
            self.q.max_beam_size = 1
            self.wide_beam = 1 if name == "RQ" else wide_beam
            self.q.cp.seed = seed
            self.q.cp.niter = kmeans_iters
            self.q.cp.min_points_per_centroid = 1  # small training sets are intended here
        else:
            self.q = faiss.LocalSearchQuantizer(d, M, nbits)
            self.q.train_iters = lsq_train_iters
            self.q.encode_ils_iters = lsq_encode_iters
            self.q.random_seed = seed
        self.trained = False

    def _in(self, x: np.ndarray) -> np.ndarray:
        check_vectors(x, self.d)
        x = np.ascontiguousarray(x, dtype=np.float32)
        return self.rotation.apply(x) if self.rotation is not None else x

    def fit(self, x: np.ndarray) -> FaissQuantizer:
        """Train on (n, d) vectors."""
        check_vectors(x, self.d)
        x = np.ascontiguousarray(x, dtype=np.float32)
        if self.rotation is not None:
            self.rotation.train(x)
        self.q.train(self._in(x))
        if self.name.startswith("RQ"):
            self.q.max_beam_size = self.wide_beam
        self.trained = True
        return self

    def _require_fit(self) -> None:
        if not self.trained:
            raise RuntimeError(f"the {self.name} quantizer is untrained: call fit(x) first")

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Codes (n, M) int64 (unpacked from faiss's bit-packed codes)."""
        self._require_fit()
        packed = self.q.compute_codes(self._in(x))
        return unpack_codes(packed, self.M, self.nbits)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """Reconstruction (n, d) float32."""
        self._require_fit()
        check_codes(codes, self.M, 2 ** self.nbits)
        y = self.q.decode(pack_codes(codes, self.nbits, self.q.code_size))
        return self.rotation.reverse_transform(y) if self.rotation is not None else y

    def codebooks(self) -> np.ndarray:
        """(M, K, d) codebooks of an additive quantizer (RQ, LSQ)."""
        import faiss
        from faiss.contrib.inspect_tools import get_additive_quantizer_codebooks

        self._require_fit()
        if not isinstance(self.q, faiss.AdditiveQuantizer):
            raise TypeError(f"{self.name} is not an additive quantizer")
        return np.stack(get_additive_quantizer_codebooks(self.q))


def unpack_codes(packed: np.ndarray, M: int, nbits: int) -> np.ndarray:
    """Eq. (rq-moe-eq-code): faiss's bit-packed codes (n, code_size) uint8 -> (n, M) int64."""
    bits = np.unpackbits(packed, axis=1, bitorder="little")[:, :M * nbits]
    weights = 1 << np.arange(nbits, dtype=np.int64)
    return (bits.reshape(len(packed), M, nbits).astype(np.int64) * weights).sum(-1)


def pack_codes(codes: np.ndarray, nbits: int, code_size: int) -> np.ndarray:
    """Eq. (rq-moe-eq-code): inverse of ``unpack_codes``, (n, M) ints -> (n, code_size) uint8."""
    codes = np.asarray(codes, dtype=np.int64)
    n, M = codes.shape
    bits = ((codes[:, :, None] >> np.arange(nbits)) & 1).astype(np.uint8).reshape(n, M * nbits)
    bits = np.pad(bits, ((0, 0), (0, code_size * 8 - M * nbits)))
    return np.packbits(bits, axis=1, bitorder="little")
