"""RQ-MoE and QINCo: residual quantizers whose codebooks adapt to the input.

Both keep plain RQ's step 0 (codebook ``C_0``) and replace the fixed codebook of
every later step ``m = 1..M-1`` by codewords computed by a small network:

* **QINCo** conditions step m on the partial reconstruction ``x_hat_{m-1}``:
  ``c~_k = c_k + W [c_k ; x_hat_{m-1}] + b``, then residual blocks
  ``h <- h + B relu(A h)``. Decoding must run the steps one after another.
* **RQ-MoE** conditions step m on an *instruction* ``I_m`` that depends on the
  codes only: ``I_1 = E_0[i_0]``, ``I_{m+1} = I_m + E_m[i_m]``. With
  ``z_k = W_c c_k + W_I I_m + b`` and gate ``alpha = softmax(G_2 relu(G_1 z_k))``,
  ``c~_k = sum_n alpha_n Expert_n(z_k)``, each expert a stack of residual blocks.
  All ``I_m`` come from one cumulative sum of table look-ups, so every step can
  be decoded at once.

Parameters of all steps are stored stacked along a leading step axis (size
``M - 1``), so one step is a slice and RQ-MoE's fused decoder is a batched matmul.

Both are initialised to be *exactly* plain RQ with the given codebooks: ``W_c = I``,
``b = 0``, zero instruction tables, zero last layers of every residual block, and
QINCo's ``W = 0``. Training then moves them away from RQ.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from minirepro.papers.rq_moe.rq import assign, check_codes, check_vectors


def _uniform(*shape: int, fan_in: int) -> nn.Parameter:
    """A parameter drawn like ``nn.Linear``'s default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in)
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


def residual_blocks(h: torch.Tensor, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Eqs. (rq-moe-eq-qinco, rq-moe-eq-codeword): blocks ``h <- h + relu(h A_l) B_l``, l = 1..L.

    Shapes: ``h`` (..., R, d), ``A`` (..., L, d, H), ``B`` (..., L, H, d), with the
    leading axes of ``A`` and ``B`` broadcasting against those of ``h``.
    """
    for layer in range(A.shape[-3]):
        h = h + torch.relu(h @ A[..., layer, :, :]) @ B[..., layer, :, :]
    return h


def prefix_sums(v: torch.Tensor) -> torch.Tensor:
    """Eq. (rq-moe-eq-instruction) in one product: inclusive prefix sums along the first axis.

    ``out[m] = sum_{j<=m} v[j]``, as one product with a lower-triangular matrix of ones
    (no loop over the axis): (S, ...) -> (S, ...).
    """
    S = v.shape[0]
    tri = torch.tril(torch.ones(S, S, dtype=v.dtype))
    return (tri @ v.reshape(S, -1)).reshape(v.shape)


class _NeuralRQ(nn.Module):
    """What RQ-MoE and QINCo share: step-0 codebook, step codebooks, scaling, checks."""

    def __init__(self, d: int, K: int, M: int) -> None:
        super().__init__()
        if min(d, K) < 1 or M < 2:
            raise ValueError(f"need d >= 1, K >= 1 and M >= 2 steps, got d={d}, K={K}, M={M}")
        self.d, self.K, self.M = d, K, M
        self.C0 = nn.Parameter(torch.zeros(K, d))
        self.C = nn.Parameter(torch.zeros(M - 1, K, d))
        self.register_buffer("scale", torch.ones(()))
        self.register_buffer("initialised", torch.zeros((), dtype=torch.bool))

    def init_from_rq(self, codebooks: np.ndarray, scale: float = 1.0) -> _NeuralRQ:
        """Copy plain-RQ codebooks (M, K, d) and set the data scale (inputs are divided by it)."""
        cb = np.asarray(codebooks, dtype=np.float32)
        if cb.shape != (self.M, self.K, self.d):
            raise ValueError(f"codebooks must have shape (M, K, d) = {(self.M, self.K, self.d)}, "
                             f"got {cb.shape}")
        if not scale > 0:
            raise ValueError(f"scale must be positive, got {scale}")
        with torch.no_grad():
            self.scale.fill_(float(scale))
            self.C0.copy_(torch.from_numpy(cb[0]) / scale)
            self.C.copy_(torch.from_numpy(cb[1:]) / scale)
            self.initialised.fill_(True)
        return self

    def _prepare(self, x: np.ndarray | torch.Tensor) -> torch.Tensor:
        if not bool(self.initialised):
            raise RuntimeError(f"{type(self).__name__} is untrained: call init_from_rq(codebooks) "
                               "(and train it) before encoding or decoding")
        check_vectors(x, self.d)
        return torch.as_tensor(x, dtype=torch.float32) / self.scale

    def _prepare_codes(self, codes: np.ndarray | torch.Tensor) -> torch.Tensor:
        if not bool(self.initialised):
            raise RuntimeError(f"{type(self).__name__} is untrained: call init_from_rq(codebooks) "
                               "(and train it) before encoding or decoding")
        check_codes(codes, self.M, self.K)
        return torch.as_tensor(codes, dtype=torch.int64)

    @torch.no_grad()
    def encode(self, x: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Greedy (beam 1) codes (n, M) int64 of raw vectors ``x`` (n, d)."""
        return self.encode_scaled(self._prepare(x))

    def encode_scaled(self, x: torch.Tensor) -> torch.Tensor:
        """Codes (n, M) of vectors already divided by ``scale``."""
        return self.encode_with_reconstruction(x)[0]

    @torch.no_grad()
    def decode(self, codes: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Reconstruction (n, d) float32, in the units of the raw vectors."""
        return self.partial_reconstructions(self._prepare_codes(codes))[-1] * self.scale

    def encode_with_reconstruction(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes (n, M), the encoder's own reconstruction (n, d)), scaled units."""
        raise NotImplementedError  # pragma: no cover - abstract

    def partial_reconstructions(self, codes: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def n_parameters(self) -> int:
        """Number of trainable scalars (codebooks included)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


class RQMoE(_NeuralRQ):
    """Eqs. (rq-moe-eq-instruction, rq-moe-eq-codeword): RQ-MoE, instructions + expert mixtures.

    Args:
        d, K, M: dimension, codewords per step, number of steps (code = M * log2(K) bits).
        n_experts: experts ``N`` per step; each is ``n_layers`` residual blocks d -> hidden -> d.
        gate_hidden: hidden width of the gate (default ``hidden``).
    """

    def __init__(self, d: int, K: int, M: int, n_experts: int = 4, hidden: int = 32,
                 n_layers: int = 1, gate_hidden: int | None = None) -> None:
        super().__init__(d, K, M)
        if min(n_experts, hidden, n_layers) < 1:
            raise ValueError(f"n_experts, hidden and n_layers must be positive, got "
                             f"{n_experts}, {hidden}, {n_layers}")
        S, N, L, H, G = M - 1, n_experts, n_layers, hidden, gate_hidden or hidden
        self.n_experts, self.hidden, self.n_layers = N, H, L
        self.E = nn.Parameter(torch.zeros(S, K, d))          # E_0..E_{M-2}; zero-initialised
        self.Wc = nn.Parameter(torch.eye(d).repeat(S, 1, 1))  # acts on c_k (row vectors: c @ Wc)
        self.WI = _uniform(S, d, d, fan_in=2 * d)             # acts on the instruction
        self.b = nn.Parameter(torch.zeros(S, d))
        self.G1 = _uniform(S, d, G, fan_in=d)
        self.G2 = _uniform(S, G, N, fan_in=G)
        self.A = _uniform(S, N, L, d, H, fan_in=d)
        self.B = nn.Parameter(torch.zeros(S, N, L, H, d))     # zero: every expert starts as identity

    def instructions(self, codes: torch.Tensor) -> torch.Tensor:
        """All instructions at once, (M-1, n, d): ``I_m = sum_{j<m} E_j[i_j]`` for m = 1..M-1."""
        looked_up = torch.stack([self.E[j][codes[:, j]] for j in range(self.M - 1)])  # (S, n, d)
        return prefix_sums(looked_up)

    def gate(self, z: torch.Tensor, steps: slice) -> torch.Tensor:
        """Expert weights ``alpha = softmax(relu(z G_1) G_2)``: (S', R, d) -> (S', R, N), rows sum to 1."""
        return torch.softmax(torch.relu(z @ self.G1[steps]) @ self.G2[steps], dim=-1)

    def mixture(self, z: torch.Tensor, steps: slice) -> torch.Tensor:
        """Gate-weighted sum of the experts of ``steps`` applied to ``z``: (S', R, d) -> (S', R, d).

        ``sum_n alpha_n Expert_n(z)``, each expert ``n_layers`` residual blocks. With one
        block per expert, ``Expert_n(z) = z + relu(z A_n) B_n`` and the alphas sum to one,
        so the mixture is ``z + [alpha_n relu(z A_n)]_n B`` with the experts' first layers
        side by side and their second layers stacked: two matrix products in all.
        """
        A, B = self.A[steps], self.B[steps]  # (S', N, L, d, H), (S', N, L, H, d)
        S, N, L, d, H = A.shape
        if L != 1:
            return self.mixture_reference(z, steps)
        # one product for the experts' first layers and the gate's first layer together
        first = torch.cat([A[:, :, 0].permute(0, 2, 1, 3).reshape(S, d, N * H), self.G1[steps]], -1)
        hidden = torch.relu(z @ first)                                   # (S', R, N*H + G)
        alpha = torch.softmax(hidden[..., N * H:] @ self.G2[steps], dim=-1)  # (S', R, N)
        mixed = (hidden[..., :N * H].reshape(*z.shape[:-1], N, H) * alpha[..., None])
        return z + mixed.reshape(*z.shape[:-1], N * H) @ B[:, :, 0].reshape(S, N * H, d)

    def mixture_reference(self, z: torch.Tensor, steps: slice) -> torch.Tensor:
        """``mixture`` computed expert by expert (any number of blocks; the tests compare the two)."""
        alpha = self.gate(z, steps)
        h = residual_blocks(z.unsqueeze(1), self.A[steps], self.B[steps])  # (S', N, R, d)
        return torch.einsum("snrd,srn->srd", h, alpha)

    def step_candidates(self, m: int, instruction: torch.Tensor) -> torch.Tensor:
        """All K adapted codewords of step m (1..M-1) for each vector: (n, d) -> (n, K, d)."""
        s = m - 1
        z = (self.C[s] @ self.Wc[s])[None] + (instruction @ self.WI[s] + self.b[s])[:, None]
        n = len(instruction)
        return self.mixture(z.reshape(1, n * self.K, self.d), slice(s, s + 1)).reshape(n, self.K, self.d)

    def encode_with_reconstruction(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy encoding: step 0 is RQ; step m picks the nearest of its K adapted codewords."""
        codes = torch.empty((len(x), self.M), dtype=torch.int64)
        codes[:, 0] = assign(x, self.C0)
        x_hat = self.C0[codes[:, 0]]
        instruction = self.E[0][codes[:, 0]]
        rows = torch.arange(len(x))
        for m in range(1, self.M):
            cands = self.step_candidates(m, instruction)
            codes[:, m] = assign(x - x_hat, cands)
            x_hat = x_hat + cands[rows, codes[:, m]]
            if m < self.M - 1:
                instruction = instruction + self.E[m][codes[:, m]]
        return codes, x_hat

    def step_outputs(self, codes: torch.Tensor) -> torch.Tensor:
        """Fused decoder: the chosen adapted codewords of steps 1..M-1 in one pass, (M-1, n, d)."""
        c = torch.stack([self.C[s][codes[:, s + 1]] for s in range(self.M - 1)])  # (S, n, d)
        z = c @ self.Wc + self.instructions(codes) @ self.WI + self.b[:, None]
        return self.mixture(z, slice(None))

    def partial_reconstructions(self, codes: torch.Tensor) -> torch.Tensor:
        """``x_hat_0 .. x_hat_{M-1}`` (M, n, d), scaled units, from the fused decoder."""
        x0 = self.C0[codes[:, 0]]
        return torch.cat([x0[None], x0[None] + prefix_sums(self.step_outputs(codes))])

    @torch.no_grad()
    def decode(self, codes: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Parallel decoding: ``x_hat = C_0[i_0] + sum_m c~_m``, all steps in one pass (raw units)."""
        codes = self._prepare_codes(codes)
        return (self.C0[codes[:, 0]] + self.step_outputs(codes).sum(0)) * self.scale

    @torch.no_grad()
    def decode_serial(self, codes: np.ndarray | torch.Tensor) -> torch.Tensor:
        """The same reconstruction as ``decode``, one step after another (for timing)."""
        codes = self._prepare_codes(codes)
        x_hat = self.C0[codes[:, 0]]
        instruction = self.E[0][codes[:, 0]]
        for m in range(1, self.M):
            s = m - 1
            z = self.C[s][codes[:, m]] @ self.Wc[s] + instruction @ self.WI[s] + self.b[s]
            x_hat = x_hat + self.mixture(z[None], slice(s, s + 1))[0]
            if m < self.M - 1:
                instruction = instruction + self.E[m][codes[:, m]]
        return x_hat * self.scale


class QINCo(_NeuralRQ):
    """Eq. (rq-moe-eq-qinco): QINCo, codewords conditioned on the partial reconstruction (serial).

    Step m: ``c~_k = c_k + [c_k ; x_hat_{m-1}] W + b``, then ``n_layers`` residual blocks
    d -> hidden -> d.
    """

    def __init__(self, d: int, K: int, M: int, hidden: int = 64, n_layers: int = 2) -> None:
        super().__init__(d, K, M)
        if min(hidden, n_layers) < 1:
            raise ValueError(f"hidden and n_layers must be positive, got {hidden}, {n_layers}")
        S, L, H = M - 1, n_layers, hidden
        self.hidden, self.n_layers = H, L
        self.W = nn.Parameter(torch.zeros(S, 2 * d, d))  # zero: starts as RQ
        self.b = nn.Parameter(torch.zeros(S, d))
        self.A = _uniform(S, L, d, H, fan_in=d)
        self.B = nn.Parameter(torch.zeros(S, L, H, d))

    def step_codewords(self, m: int, c: torch.Tensor, x_hat: torch.Tensor) -> torch.Tensor:
        """Adapted codewords of step m: ``c`` (n, d) or (n, K, d), ``x_hat`` (n, d) -> same shape as c."""
        s = m - 1
        Wc, Wx = self.W[s, :self.d], self.W[s, self.d:]
        ctx = x_hat @ Wx + self.b[s]
        h = (c + c @ Wc) + (ctx[:, None] if c.dim() == 3 else ctx)
        return residual_blocks(h, self.A[s], self.B[s])

    def step_candidates(self, m: int, x_hat: torch.Tensor) -> torch.Tensor:
        """All K adapted codewords of step m for each vector: ``x_hat`` (n, d) -> (n, K, d).

        Same as ``step_codewords`` on the whole codebook; ``c + c W_c`` is computed once.
        """
        s = m - 1
        C = self.C[s]
        base = C + C @ self.W[s, :self.d]                       # (K, d), shared by all vectors
        ctx = x_hat @ self.W[s, self.d:] + self.b[s]            # (n, d)
        return residual_blocks(base[None] + ctx[:, None], self.A[s], self.B[s])

    def encode_with_reconstruction(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy encoding; the K candidates of step m depend on ``x_hat_{m-1}``."""
        codes = torch.empty((len(x), self.M), dtype=torch.int64)
        codes[:, 0] = assign(x, self.C0)
        x_hat = self.C0[codes[:, 0]]
        rows = torch.arange(len(x))
        for m in range(1, self.M):
            cands = self.step_candidates(m, x_hat)
            codes[:, m] = assign(x - x_hat, cands)
            x_hat = x_hat + cands[rows, codes[:, m]]
        return codes, x_hat

    def partial_reconstructions(self, codes: torch.Tensor) -> torch.Tensor:
        """``x_hat_0 .. x_hat_{M-1}`` (M, n, d): step m needs ``x_hat_{m-1}``, so the loop is serial."""
        x_hat = self.C0[codes[:, 0]]
        out = [x_hat]
        for m in range(1, self.M):
            x_hat = x_hat + self.step_codewords(m, self.C[m - 1][codes[:, m]], x_hat)
            out.append(x_hat)
        return torch.stack(out)


def normalized_loss(x: torch.Tensor, partials: torch.Tensor) -> torch.Tensor:
    """Eq. (rq-moe-eq-loss): the training loss of the partials (M, B, d) of ``x`` (B, d); a scalar.

    $$\\log\\Big(1+\\frac{\\sum_b\\|r_1\\|^2}{\\sum_b\\|x\\|^2}\\Big)
      + \\sum_{m=1}^{M-1}\\log\\Big(1+\\frac{\\sum_b\\|r_{m+1}\\|^2}{\\mathrm{sg}(\\sum_b\\|r_m\\|^2)}\\Big)$$

    where ``r_{m+1} = x - x_hat_m`` and sg stops the gradient: each step is judged by the
    fraction of the remaining error it removes.
    """
    err = ((x[None] - partials) ** 2).sum(dim=(1, 2))  # (M,)
    eps = 1e-6
    loss = torch.log1p(err[0] / ((x ** 2).sum() + eps))
    return loss + torch.log1p(err[1:] / (err[:-1].detach() + eps)).sum()
