"""The three modalities (10 classes each) and the Dirichlet label-skew split across clients.

Every sample becomes ``T = 4`` input tokens for the backbone:

* ``image``: scikit-learn's bundled 8x8 digits; each pair of pixel rows is a token (16 features).
* ``speech`` [stand-in]: a synthetic waveform per sample, two class-dependent tones with random
  phase, pitch jitter and white noise; its magnitude spectrogram (4 frames of 32 samples,
  16 frequency bins) gives the tokens (16 features each).
* ``text`` [stand-in]: 4 token ids; each position is, with probability ``keyword_p``, one of the
  class's 2 keywords and otherwise a filler word, from a fixed range of the LM's vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.datasets import load_digits

MODALITIES: tuple[str, ...] = ("image", "speech", "text")
N_CLASSES = 10
T_TOKENS = 4
FEATURES = {"image": 16, "speech": 16}
TEXT_VOCAB = (20, 180)  # token-id range used by the text modality (inside the LM's vocabulary)


@dataclass
class ModalityData:
    """One modality's pool: inputs ``x`` ``(N, T, F)`` float32 (``(N, T)`` int64 for text), labels ``y``."""

    x: np.ndarray
    y: np.ndarray


def image_pool() -> ModalityData:
    """The 1797 bundled digits, pixels scaled to [0, 1], row pairs as tokens: ``(1797, 4, 16)``."""
    d = load_digits()
    return ModalityData((d.images / 16.0).reshape(-1, 4, 16).astype(np.float32), d.target.astype(np.int64))


def speech_pool(n: int, seed: int, noise: float = 0.5) -> ModalityData:
    """[reconstruction] Synthetic "speech": two class tones + noise as spectrogram frames, ``(n, 4, 16)``.

    Class ``c`` has tones near bins ``2 + c`` and ``4 + (3 c) mod 11`` (of 16), each with a
    random frequency jitter of up to half a bin, random phase and amplitude; white noise of
    standard deviation ``noise`` is added to the waveform before framing.
    """
    rng = np.random.default_rng(seed)
    frame = 32
    t = np.arange(T_TOKENS * frame)
    y = rng.integers(0, N_CLASSES, size=n)
    wave = noise * rng.normal(size=(n, t.size))
    for k, base in enumerate((2 + y, 4 + (3 * y) % 11)):
        f = (base + rng.uniform(-0.5, 0.5, size=n)) / frame
        amp = rng.uniform(0.5, 1.0, size=n) * (1.0 if k == 0 else 0.7)
        wave += amp[:, None] * np.sin(2 * np.pi * f[:, None] * t[None] + rng.uniform(0, 2 * np.pi, (n, 1)))
    frames = wave.reshape(n, T_TOKENS, frame) * np.hanning(frame)
    spec = np.abs(np.fft.rfft(frames, axis=-1))[..., 1:17] / np.sqrt(frame)
    return ModalityData(np.log1p(spec).astype(np.float32), y.astype(np.int64))


def text_pool(n: int, seed: int, keyword_p: float = 0.5) -> ModalityData:
    """[reconstruction] Synthetic token sequences ``(n, 4)``: class keywords among filler words.

    Each class owns 2 keyword ids; every position is a keyword of the class with probability
    ``keyword_p``, else a uniform filler id from the rest of ``TEXT_VOCAB``.
    """
    rng = np.random.default_rng(seed)
    lo, hi = TEXT_VOCAB
    keywords = (lo + np.arange(2 * N_CLASSES)).reshape(N_CLASSES, 2)
    y = rng.integers(0, N_CLASSES, size=n)
    filler = rng.integers(lo + 2 * N_CLASSES, hi, size=(n, T_TOKENS))
    kw = keywords[y[:, None], rng.integers(0, 2, size=(n, T_TOKENS))]
    x = np.where(rng.random((n, T_TOKENS)) < keyword_p, kw, filler)
    return ModalityData(x.astype(np.int64), y.astype(np.int64))


def dirichlet_split(y: np.ndarray, n_clients: int, alpha: float, seed: int,
                    min_size: int = 8) -> list[np.ndarray]:
    """[reconstruction] Dirichlet label skew: class ``c``'s samples go to clients in proportions
    ``q_c ~ Dir(alpha 1_K)``. Resampled until every client has ``min_size`` samples.
    Returns one index array per client (disjoint, covering ``y``)."""
    if alpha <= 0 or not np.isfinite(alpha):
        raise ValueError(f"the Dirichlet concentration must be positive, got {alpha}")
    if n_clients < 1 or n_clients * min_size > len(y):
        raise ValueError(f"cannot give {n_clients} clients {min_size} samples each from {len(y)}")
    rng = np.random.default_rng(seed)
    for _ in range(1000):
        parts: list[list[int]] = [[] for _ in range(n_clients)]
        for c in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == c))
            cuts = (np.cumsum(rng.dirichlet(alpha * np.ones(n_clients))) * len(idx)).astype(int)[:-1]
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.sort(np.array(p, dtype=np.int64)) for p in parts]
    raise RuntimeError("no Dirichlet split gave every client enough samples; raise alpha")


def label_skew(y: np.ndarray, parts: list[np.ndarray]) -> float:
    """[reconstruction] Mean total-variation distance between each client's label distribution
    and the pool's (0: IID; near 1: each client holds classes the others lack)."""
    glob = np.bincount(y, minlength=N_CLASSES) / len(y)
    tv = [0.5 * np.abs(np.bincount(y[p], minlength=N_CLASSES) / len(p) - glob).sum() for p in parts]
    return float(np.mean(tv))


@dataclass
class Client:
    """A client: its modality and its local training data."""

    cid: str
    modality: str
    x: np.ndarray
    y: np.ndarray


@dataclass
class Federation:
    """The clients and the balanced test set of each modality."""

    clients: list[Client]
    test: dict[str, ModalityData]
    skew: dict[str, float]


def make_federation(clients_per_modality: int, n_train: int, n_test: int, alpha: float,
                    seed: int, modalities: tuple[str, ...] = MODALITIES,
                    text_keyword_p: float = 0.5, speech_noise: float = 0.5) -> Federation:
    """[reconstruction] ``clients_per_modality`` clients per modality, ``n_train`` training
    samples per modality split by :func:`dirichlet_split`, and ``n_test`` test samples each."""
    rng = np.random.default_rng(seed)
    pools = {"image": image_pool(),
             "speech": speech_pool(n_train + n_test, seed + 1, speech_noise),
             "text": text_pool(n_train + n_test, seed + 2, text_keyword_p)}
    clients, test, skew = [], {}, {}
    for mod in modalities:
        pool = pools[mod]
        order = rng.permutation(len(pool.y))
        if len(order) < n_train + n_test:
            raise ValueError(f"{mod}: {len(order)} samples < n_train + n_test = {n_train + n_test}")
        tr, te = order[:n_train], order[n_train:n_train + n_test]
        test[mod] = ModalityData(pool.x[te], pool.y[te])
        parts = dirichlet_split(pool.y[tr], clients_per_modality, alpha, seed * 7 + len(clients))
        skew[mod] = label_skew(pool.y[tr], parts)
        for p in parts:
            clients.append(Client(f"{mod}-{len(clients)}", mod, pool.x[tr][p], pool.y[tr][p]))
    return Federation(clients, test, skew)


__all__ = ["Client", "FEATURES", "Federation", "MODALITIES", "ModalityData", "N_CLASSES",
           "T_TOKENS", "dirichlet_split", "image_pool", "label_skew", "make_federation",
           "speech_pool", "text_pool"]
