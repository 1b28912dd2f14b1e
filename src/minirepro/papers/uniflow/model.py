"""The UniFLoW-style model: modality projectors -> frozen pretrained LM with peft LoRA -> head.

Many clients (of several runs) train at once: the model holds ``G`` *groups*, one per
(run, client), each with its own LoRA factors, its own change to the frozen weights, its
own head and projector, and a batch of ``b`` samples. The backbone is peft's LoRA model
of the book's substrate LM (``lm-smoke``, frozen); only peft's ``lora_A``/``lora_B`` linears
and the wrapped base linear are replaced by grouped versions, so peft's own
``forward`` (``base(x) + lora_B(lora_A(x)) * alpha / r``) runs for every group in one
batched call. ``tests/unit/test_uniflow.py`` checks each group against a plain peft model.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from peft.tuners.lora import LoraLayer

from minirepro.papers.uniflow.data import FEATURES, N_CLASSES, TEXT_VOCAB

TARGETS: tuple[str, ...] = ("q_proj", "v_proj", "up_proj", "down_proj")
SHORT = {"q_proj": "q", "v_proj": "v", "up_proj": "up", "down_proj": "down"}


def load_backbone(name: str = "lm-smoke") -> nn.Module:
    """[reconstruction] The frozen decoder (``LlamaModel``) of a shipped substrate LM artifact, eval mode, no gradients."""
    from minirepro.core.artifacts import verified_folder
    from minirepro.core.lm.models import load_lm

    lm = load_lm(verified_folder(name))
    dec = lm.get_decoder()
    for p in dec.parameters():
        p.requires_grad_(False)
    return dec.eval()


class GroupedLinear(nn.Module):
    """Eq. (uniflow-eq-lora), batched: a bias-free linear map per group: ``x`` ``(G*b, T, in)`` -> ``(G*b, T, out)``, weight ``(G, out, in)``."""

    def __init__(self, groups: int, d_in: int, d_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(groups, d_out, d_in))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        G = self.weight.shape[0]
        lead = x.shape[:-1]
        xg = x.reshape(G, -1, x.shape[-1])
        return torch.bmm(xg, self.weight.transpose(1, 2)).reshape(*lead, self.weight.shape[1])


class GroupedBase(nn.Module):
    """Eqs. (uniflow-eq-fedex, uniflow-eq-flora): the frozen base linear plus a per-group dense change ``D`` ``(G, out, in)`` (FedEx, FLoRA)."""

    def __init__(self, base: nn.Linear, groups: int) -> None:
        super().__init__()
        self.base = base
        self.register_buffer("delta", torch.zeros(groups, base.out_features, base.in_features))
        self.active = torch.zeros(groups, dtype=torch.bool)  # groups whose delta is not zero

    @property
    def weight(self) -> torch.Tensor:  # peft reads base_layer.weight for dtypes and shapes
        return self.base.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        if not bool(self.active.any()):
            return y
        G = self.delta.shape[0]
        idx = torch.nonzero(self.active).ravel()
        xg = x.reshape(G, -1, x.shape[-1])[idx]
        extra = torch.zeros(G, xg.shape[1], y.shape[-1], dtype=y.dtype)
        extra[idx] = torch.bmm(xg, self.delta[idx].transpose(1, 2))
        return y + extra.reshape(y.shape)


class GroupedUniModel(nn.Module):
    """[reconstruction] UniFLoW's model for ``G`` groups: projector -> frozen LM + LoRA -> head.

    Args:
        backbone: a frozen decoder (``load_backbone``), wrapped here by ``peft``.
        group_modality: the modality of each group (``image``, ``speech`` or ``text``).
        rank, alpha: peft's LoRA rank ``r`` and ``lora_alpha`` (scaling ``alpha / r``).
    """

    def __init__(self, backbone: nn.Module, group_modality: list[str], rank: int, alpha: float) -> None:
        super().__init__()
        G = len(group_modality)
        self.G, self.modality = G, list(group_modality)
        cfg = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(TARGETS), lora_dropout=0.0)
        self.peft = get_peft_model(backbone, cfg)
        self.scaling = float(alpha) / rank
        self.lora: dict[str, LoraLayer] = {}
        for name, mod in self.peft.named_modules():
            if isinstance(mod, LoraLayer) and name.split(".")[-1] in TARGETS:
                layer = name.split("layers.")[1].split(".")[0]
                short = f"L{layer}{SHORT[name.split('.')[-1]]}"
                d_in, d_out = mod.in_features, mod.out_features
                mod.lora_A["default"] = GroupedLinear(G, d_in, rank)
                mod.lora_B["default"] = GroupedLinear(G, rank, d_out)
                mod.base_layer = GroupedBase(mod.base_layer, G)
                self.lora[short] = mod
        self.d = backbone.config.hidden_size
        self.embed = backbone.get_input_embeddings()
        self.idx = {m: [g for g, x in enumerate(group_modality) if x == m] for m in sorted(set(group_modality))}
        self.enc_w = nn.ParameterDict()
        self.enc_b = nn.ParameterDict()
        for m, gs in self.idx.items():
            f = TEXT_VOCAB[1] - TEXT_VOCAB[0] if m == "text" else FEATURES[m]
            self.enc_w[m] = nn.Parameter(torch.zeros(len(gs), f, self.d))
            self.enc_b[m] = nn.Parameter(torch.zeros(len(gs), self.d))
        self.head_w = nn.Parameter(torch.zeros(G, N_CLASSES, self.d))
        self.head_b = nn.Parameter(torch.zeros(G, N_CLASSES))

    def modules_spec(self) -> tuple[tuple[str, int, int], ...]:
        """``(name, d_out, d_in)`` of every LoRA module, in a fixed order."""
        return tuple((k, m.out_features, m.in_features) for k, m in self.lora.items())

    def lora_params(self) -> list[nn.Parameter]:
        return [p for m in self.lora.values()
                for p in (m.lora_A["default"].weight, m.lora_B["default"].weight)]

    def encode(self, xs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Eq. (uniflow-eq-model), first map: each modality's projector, ``xs[m]`` ``(G_m, b, T, F)``
        -> prefix embeddings ``(G, b, T, d)``; text token ids ``(G_m, b, T)`` index a per-group
        embedding table (initialised from the LM's own embeddings)."""
        parts, order = [], []
        for m, gs in self.idx.items():
            x = xs[m]
            if m == "text":  # a per-group embedding table over the text vocabulary
                rows = torch.arange(len(gs))[:, None, None]
                h = self.enc_w[m][rows, x - TEXT_VOCAB[0]] + self.enc_b[m][:, None, None]
            else:
                h = torch.einsum("gbtf,gfd->gbtd", x, self.enc_w[m]) + self.enc_b[m][:, None, None]
            parts.append(h)
            order += gs
        h = torch.cat(parts, 0)
        inv = torch.empty(len(order), dtype=torch.long)
        inv[torch.tensor(order)] = torch.arange(len(order))
        return h[inv]

    def forward(self, xs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Eq. (uniflow-eq-model): logits ``(G, b, 10)`` from the last position's hidden state."""
        h = self.encode(xs)
        G, b, T, d = h.shape
        out = self.peft(inputs_embeds=h.reshape(G * b, T, d)).last_hidden_state[:, -1]
        return torch.einsum("gbd,gcd->gbc", out.reshape(G, b, d), self.head_w) + self.head_b[:, None]

    # -- group state <-> named numpy arrays -------------------------------------------------
    def get_state(self, g: int) -> dict:
        """Group ``g``'s state as named float32 arrays (``lora.*``, ``base.*``, ``head.*``, ``enc.*``)."""
        out = {}
        for k, m in self.lora.items():
            out[f"lora.{k}.A"] = m.lora_A["default"].weight[g].detach().numpy().copy()
            out[f"lora.{k}.B"] = m.lora_B["default"].weight[g].detach().numpy().copy()
            out[f"base.{k}"] = m.base_layer.delta[g].numpy().copy()
        out["head.w"] = self.head_w[g].detach().numpy().copy()
        out["head.b"] = self.head_b[g].detach().numpy().copy()
        mod = self.modality[g]
        j = self.idx[mod].index(g)
        out[f"enc.{mod}.w"] = self.enc_w[mod][j].detach().numpy().copy()
        out[f"enc.{mod}.b"] = self.enc_b[mod][j].detach().numpy().copy()
        return out

    @torch.no_grad()
    def set_state(self, g: int, state: dict) -> None:
        """Write named arrays into group ``g`` (keys absent from ``state`` are left alone)."""
        t = torch.as_tensor
        for k, m in self.lora.items():
            if f"lora.{k}.A" in state:
                m.lora_A["default"].weight[g] = t(state[f"lora.{k}.A"])
            if f"lora.{k}.B" in state:
                m.lora_B["default"].weight[g] = t(state[f"lora.{k}.B"])
            if f"base.{k}" in state:
                m.base_layer.delta[g] = t(state[f"base.{k}"])
                m.base_layer.active[g] = bool(state[f"base.{k}"].any())
        if "head.w" in state:
            self.head_w[g] = t(state["head.w"])
            self.head_b[g] = t(state["head.b"])
        mod = self.modality[g]
        if f"enc.{mod}.w" in state:
            j = self.idx[mod].index(g)
            self.enc_w[mod][j] = t(state[f"enc.{mod}.w"])
            self.enc_b[mod][j] = t(state[f"enc.{mod}.b"])


__all__ = ["GroupedBase", "GroupedLinear", "GroupedUniModel", "SHORT", "TARGETS", "load_backbone"]
