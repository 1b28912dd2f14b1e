"""RQ and QINCo as constrained special cases of RQ-MoE, built explicitly.

* RQ: with the instruction tables ``E`` zero, the input projection ``W_c = I``, ``b = 0``
  and every expert's last layer zero, each expert is the identity, the gate weights sum to
  one, and ``c~_k = c_k``: RQ-MoE is plain RQ with codebooks ``C_0 .. C_{M-1}``, whatever
  the gate and the other weights are.
* QINCo (two steps): with ``E_0 = C_0`` the first instruction *is* the partial
  reconstruction, ``I_1 = x_hat_0``; with ``W_c = I + W_c^Q``, ``W_I = W_x^Q`` and every
  expert a copy of QINCo's residual blocks, step 1 of RQ-MoE computes QINCo's codeword.
  From step 2 on, QINCo's ``x_hat_{m-1}`` is a non-additive function of the code prefix
  while ``I_m`` is a sum of per-code embeddings, so the equivalence needs instructions that
  identify the prefix (the paper's "full instruction dimension") and experts able to
  compute QINCo's map from them: a capacity argument, not an identity we can check.
"""

from __future__ import annotations

import copy

import torch

from minirepro.papers.rq_moe.quantizers import QINCo, RQMoE


def as_plain_rq(model: RQMoE) -> RQMoE:
    """Eq. (rq-moe-eq-special), first case: a copy of ``model`` constrained to plain RQ.

    Its own codebooks are kept and the gate is left untouched.
    """
    rq = copy.deepcopy(model)
    with torch.no_grad():
        rq.E.zero_()
        rq.B.zero_()
        rq.b.zero_()
        rq.Wc.copy_(torch.eye(model.d).repeat(model.M - 1, 1, 1))
    return rq


def rq_decode(model: RQMoE | QINCo, codes: torch.Tensor) -> torch.Tensor:
    """Eq. (rq-moe-eq-rq): plain RQ decoding ``sum_m C_m[i_m]`` with the model's codebooks, raw units."""
    x = model.C0[codes[:, 0]] + sum(model.C[s][codes[:, s + 1]] for s in range(model.M - 1))
    return x.detach() * model.scale


def two_step_qinco_as_rq_moe(qinco: QINCo, n_experts: int = 2) -> tuple[QINCo, RQMoE]:
    """Eq. (rq-moe-eq-special), second case: a 2-step QINCo and the RQ-MoE that equals it."""
    d, K = qinco.d, qinco.K
    q2 = QINCo(d, K, 2, hidden=qinco.hidden, n_layers=qinco.n_layers)
    r2 = RQMoE(d, K, 2, n_experts=n_experts, hidden=qinco.hidden, n_layers=qinco.n_layers)
    with torch.no_grad():
        for m in (q2, r2):
            m.scale.copy_(qinco.scale)
            m.initialised.fill_(True)
            m.C0.copy_(qinco.C0)
            m.C.copy_(qinco.C[:1])
        q2.W.copy_(qinco.W[:1])
        q2.b.copy_(qinco.b[:1])
        q2.A.copy_(qinco.A[:1])
        q2.B.copy_(qinco.B[:1])
        r2.E[0].copy_(qinco.C0)                          # I_1 = x_hat_0
        r2.Wc[0].copy_(torch.eye(d) + qinco.W[0, :d])
        r2.WI[0].copy_(qinco.W[0, d:])
        r2.b.copy_(qinco.b[:1])
        r2.A.copy_(q2.A[:, None].expand_as(r2.A))        # every expert = QINCo's blocks
        r2.B.copy_(q2.B[:, None].expand_as(r2.B))
    return q2, r2


def special_case_deviations(rq_moe: RQMoE, qinco: QINCo, codes: torch.Tensor) -> dict[str, float]:
    """Eq. (rq-moe-eq-special), checked: largest decode differences of both cases on ``codes``.

    ``"RQ"``: ``as_plain_rq(rq_moe)`` against plain RQ decoding with the same codebooks.
    ``"QINCo (2 steps)"``: the RQ-MoE of ``two_step_qinco_as_rq_moe`` against the 2-step QINCo.
    """
    codes = torch.as_tensor(codes)
    rq = as_plain_rq(rq_moe)
    dev_rq = (rq.decode(codes) - rq_decode(rq, codes)).abs().max().item()
    q2, r2 = two_step_qinco_as_rq_moe(qinco)
    dev_q = (r2.decode(codes[:, :2]) - q2.decode(codes[:, :2])).abs().max().item()
    return {"RQ": dev_rq, "QINCo (2 steps)": dev_q}
