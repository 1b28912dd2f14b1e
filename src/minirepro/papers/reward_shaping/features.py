"""The reward head's input h: the backbone's last-layer state at the last real token (§3)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase


def last_token_states(backbone: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                      texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Eq. (reward-shaping-eq-bt)'s h: the final (normed) hidden state at each text's last non-pad token.

    Texts are sorted by length and right-padded; the last real token is
    ``attention_mask.sum - 1`` (valid only with right padding, which is checked).

    Args:
        backbone: the decoder (``rm.model`` of a sequence-classification model).
        texts: ``N`` strings.

    Returns:
        ``(N, d_model)`` float32 array in the order of ``texts``.
    """
    if len(texts) == 0:
        raise ValueError("no texts to encode")
    if tokenizer.padding_side != "right":
        raise ValueError("last_token_states needs right padding (the last real token is mask.sum - 1)")
    enc = [tokenizer(t)["input_ids"] for t in texts]
    order = np.argsort([len(e) for e in enc], kind="stable")
    out = np.zeros((len(texts), backbone.config.hidden_size), dtype=np.float32)
    pad = tokenizer.pad_token_id
    with torch.no_grad():
        for s in range(0, len(texts), batch_size):
            idx = order[s:s + batch_size]
            width = max(len(enc[i]) for i in idx)
            ids = torch.full((len(idx), width), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for j, i in enumerate(idx):
                ids[j, :len(enc[i])] = torch.tensor(enc[i])
                mask[j, :len(enc[i])] = 1
            hid = backbone(input_ids=ids, attention_mask=mask).last_hidden_state
            last = mask.sum(1) - 1
            out[idx] = hid[torch.arange(len(idx)), last].float().numpy()
    return out


class StateCache:
    """Eq. (reward-shaping-eq-bt)'s h, memoised (:func:`last_token_states`): each distinct text once."""

    def __init__(self, backbone: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 batch_size: int = 64) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.backbone, self.tokenizer, self.batch_size = backbone, tokenizer, batch_size
        self._store: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        new = list(dict.fromkeys(t for t in texts if t not in self._store))
        if new:
            for t, h in zip(new, last_token_states(self.backbone, self.tokenizer, new, self.batch_size)):
                self._store[t] = h
        return np.stack([self._store[t] for t in texts]) if texts else np.zeros((0, 0), np.float32)

    def __len__(self) -> int:
        return len(self._store)
