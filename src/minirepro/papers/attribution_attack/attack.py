"""The latent optimisation attack: a synthetic batch x = G(z) crafted against a recorded trajectory."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .fedavg import N_CLASSES, add_bias


@dataclass(frozen=True)
class PCADecoder:
    """§3 decoder G, here PCA fitted on the adversary's own images [reconstruction].

    ``G(z) = clip(mean + (z * scale) @ components, 0, 1)``: ``z`` (m, k) in units of the
    components' standard deviations, output (m, 64) pixels in [0, 1].
    """

    mean: np.ndarray
    components: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, X: np.ndarray, k: int) -> PCADecoder:
        """Top-``k`` principal components of ``X`` (n, d) by SVD; ``k < n`` and ``k <= d``."""
        if X.ndim != 2 or not 1 <= k < len(X) or k > X.shape[1]:
            raise ValueError(f"need 1 <= k < n and k <= d, got k={k}, X {X.shape}")
        mu = X.mean(0)
        _, s, Vt = np.linalg.svd(X - mu, full_matrices=False)
        return cls(mu, Vt[:k], s[:k] / np.sqrt(len(X) - 1))

    def encode(self, X: np.ndarray) -> np.ndarray:
        """Latent codes of images ``X`` (m, d): shape (m, k)."""
        return (X - self.mean) @ self.components.T / self.scale

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """G(z), differentiable in ``z`` (m, k) -> (m, d)."""
        mu = torch.as_tensor(self.mean)
        P = torch.as_tensor(self.components)
        s = torch.as_tensor(self.scale)
        return (mu + (z * s) @ P).clamp(0.0, 1.0)


def _local(W: torch.Tensor, X: torch.Tensor, Y: torch.Tensor, steps: int, lr: float, wd: float) -> torch.Tensor:
    """The same ClientUpdate as :func:`fedavg.local_update`, in torch and differentiable;
    ``W`` (..., 65, 10) may hold one model per round."""
    V = W
    for _ in range(steps):
        P = torch.softmax(X @ V, dim=-1)
        V = V - lr * (X.T @ (P - Y) / len(X) + wd * V)
    return V - W


def _ce(W: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of each model in ``W`` (R, 65, 10) on ``(X, y)``: shape (R,)."""
    logp = torch.log_softmax(X @ W, dim=-1)
    return -logp[..., torch.arange(len(y)), y].mean(-1)


def target_classes(W: np.ndarray, proxy: tuple[np.ndarray, np.ndarray], own: np.ndarray, k: int = 2) -> np.ndarray:
    """§3 'classes other clients cover poorly': the ``k`` classes, other than the adversary's own,
    on which the observed global model ``W`` (65, 10) is least accurate on the attacker's proxy set."""
    Xp, yp = proxy
    pred = (add_bias(Xp) @ W).argmax(1)
    acc = np.array([np.mean(pred[yp == c] == c) if np.any(yp == c) else 1.0 for c in range(N_CLASSES)])
    acc[np.unique(own)] = np.inf
    return np.sort(np.argsort(acc, kind="stable")[:k])


@dataclass
class AttackResult:
    """Eq. (attribution-attack-eq-loss), its result: the crafted batch, loss curve and decoder.

    The crafted batch ``X`` (m, 64) with ``labels`` (m,), the loss curve (one row per
    step: total, gap, util, cos, norm) and the decoder.
    """

    X: np.ndarray
    labels: np.ndarray
    curve: np.ndarray
    decoder: PCADecoder


def craft_batch(own: tuple[np.ndarray, np.ndarray], proxy: tuple[np.ndarray, np.ndarray],
                history: np.ndarray, n_clients: int, labels: np.ndarray, *, latent_dim: int,
                steps: int, lr: float, local_steps: int, local_lr: float, weight_decay: float,
                lam_util: float = 1.0, lam_cos: float = 1.0, lam_norm: float = 1.0,
                seed: int = 0) -> AttackResult:
    """Eq. (attribution-attack-eq-loss), §3 latent optimisation [reconstruction of the loss].

    Minimise over z

    ``-gap(z) + lam_util * CE_own(z) + lam_cos * (1 - cos(D(z), g)) + lam_norm * (|D(z)|/|D_h| - 1)^2``

    averaged over the rounds of an observed trajectory ``history`` (R + 1, 65, 10) of global
    models. ``D(z)`` is the adversary's update on its data plus G(z), ``D_h`` its honest
    update, ``g`` the observed aggregate step, and ``gap`` the proxy cross-entropy of the
    round's model without the adversary minus with its crafted update (its marginal
    contribution as the attacker can estimate it). Uses only the adversary's data, its proxy
    set and the global models it receives.
    """
    Xo, yo = own
    dec = PCADecoder.fit(Xo, latent_dim)
    gen = torch.Generator().manual_seed(seed)
    start = torch.randint(len(Xo), (len(labels),), generator=gen).numpy()
    z = torch.tensor(dec.encode(Xo[start]), requires_grad=True)
    m1, m2 = torch.zeros_like(z), torch.zeros_like(z)  # Adam moments (torch.optim costs seconds to import)
    Xo_t = torch.as_tensor(add_bias(Xo))
    yo_t = torch.as_tensor(yo)
    Xp_t, yp_t = torch.as_tensor(add_bias(proxy[0])), torch.as_tensor(proxy[1])
    lab = torch.as_tensor(labels)
    Y_all = torch.nn.functional.one_hot(torch.cat([yo_t, lab]), N_CLASSES).double()
    Y_own = Y_all[: len(yo)]
    H = torch.as_tensor(history)
    Ws, gs = H[:-1], H[1:] - H[:-1]
    n = n_clients
    with torch.no_grad():
        Dh = _local(Ws, Xo_t, Y_own, local_steps, local_lr, weight_decay)  # all rounds at once
    curve = []
    for _ in range(steps):
        X = torch.cat([Xo_t, torch.nn.functional.pad(dec.decode(z), (0, 1), value=1.0)])
        D = _local(Ws, X, Y_all, local_steps, local_lr, weight_decay)  # (R, 65, 10)
        with_ = Ws + gs + (D - Dh) / n
        without = Ws + (n * gs - Dh) / (n - 1)
        cos = torch.nn.functional.cosine_similarity(D.flatten(1), gs.flatten(1), dim=1)
        ratio = D.flatten(1).norm(dim=1) / Dh.flatten(1).norm(dim=1).clamp_min(1e-12)
        terms = torch.stack([(_ce(without, Xp_t, yp_t) - _ce(with_, Xp_t, yp_t)).mean(),
                             _ce(Ws + D, Xo_t, yo_t).mean(), (1 - cos).mean(), ((ratio - 1) ** 2).mean()])
        loss = -terms[0] + lam_util * terms[1] + lam_cos * terms[2] + lam_norm * terms[3]
        (grad,) = torch.autograd.grad(loss, z)
        with torch.no_grad():
            m1.mul_(0.9).add_(0.1 * grad)
            m2.mul_(0.999).add_(0.001 * grad * grad)
            t = len(curve) + 1
            z -= lr * (m1 / (1 - 0.9 ** t)) / ((m2 / (1 - 0.999 ** t)).sqrt() + 1e-8)
        curve.append([loss.item(), *terms.detach().tolist()])
    with torch.no_grad():
        Xs = dec.decode(z).numpy().copy()
    return AttackResult(X=Xs, labels=np.asarray(labels), curve=np.array(curve), decoder=dec)
