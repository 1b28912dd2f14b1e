"""The tiny multimodal LM: a small CNN over the 8x8 digit, a projector, a decoder.

The CNN turns an image into a 2x2 grid of 32-dim features, the projector maps each cell
to one visual token, and a causal pre-LN transformer decoder reads the visual tokens and
the question and answers at the last position through its output head. It stands in for
LLaVA's vision tower, projector and LLM (the paper's models have 2 B to 7 B parameters;
this one has about 140 k).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from minirepro.papers.model_dowser.data import N_VIS, SEQ, VOCAB, Batch


class DigitCNN(nn.Module):
    """Two conv + max-pool stages: (B, 1, 8, 8) -> (B, 4, 32) visual features."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, width, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return x.flatten(2).transpose(1, 2)


class Block(nn.Module):
    """A pre-LN decoder block: causal self-attention (``qkv``, ``out``) and an MLP (``fc1``, ``fc2``)."""

    def __init__(self, d: int, heads: int, mlp: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, mlp), nn.Linear(mlp, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyMLLM(nn.Module):
    """CNN -> projector -> decoder; ``forward(images, tokens)`` returns the answer logits (B, VOCAB)."""

    def __init__(self, d: int = 64, heads: int = 4, layers: int = 4, mlp: int = 128, vis: int = 32):
        super().__init__()
        self.cnn = DigitCNN(vis)
        self.projector = nn.Linear(vis, d)
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Parameter(torch.randn(SEQ, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads, mlp) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB)

    def embed(self, images: torch.Tensor | None, tokens: torch.Tensor) -> torch.Tensor:
        """Token embeddings with the visual tokens written into the first N_VIS slots."""
        e = self.tok(tokens)
        if images is not None:
            e = torch.cat([self.projector(self.cnn(images)), e[:, N_VIS:]], dim=1)
        return e + self.pos

    def forward(self, images: torch.Tensor | None, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(images, tokens)
        for blk in self.blocks:
            h = blk(h)
        return self.head(self.ln_f(h[:, -1]))

    def logits(self, batch: Batch) -> torch.Tensor:
        """Answer logits (B, VOCAB) of a :class:`Batch`."""
        return self(batch.images, batch.tokens)


@torch.no_grad()
def accuracy(model: nn.Module, batch: Batch, chunk: int = 1024) -> float:
    """Fraction of prompts whose argmax answer is the target."""
    was = model.training
    model.eval()
    hits = 0
    for i in range(0, len(batch), chunk):
        part = batch.take(torch.arange(i, min(i + chunk, len(batch))))
        hits += int((model.logits(part).argmax(-1) == part.target).sum())
    model.train(was)
    return hits / len(batch)


def finetune_linears(model: TinyMLLM, depth: str) -> dict[str, nn.Linear]:
    """The Linear layers a fine-tuning run may change, by name.

    ``"shallow"``: the last two decoder blocks; ``"deep"``: every block and the
    projector. The CNN, embeddings, norms, biases and output head stay frozen.
    """
    n = len(model.blocks)
    if depth == "shallow":
        chosen = range(max(n - 2, 0), n)
    elif depth == "deep":
        chosen = range(n)
    else:
        raise ValueError(f"depth must be 'shallow' or 'deep', got {depth!r}")
    out: dict[str, nn.Linear] = {}
    if depth == "deep":
        out["projector"] = model.projector
    for i in chosen:
        for name in ("qkv", "out", "fc1", "fc2"):
            out[f"blocks.{i}.{name}"] = getattr(model.blocks[i], name)
    return out
