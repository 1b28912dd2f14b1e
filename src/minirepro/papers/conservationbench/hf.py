"""An adapter for image-text models through ``transformers`` (a :class:`Model`).

Give it a local folder (or a hub id, where the machine may download) holding an
``AutoProcessor`` and an ``AutoModelForImageTextToText`` checkpoint: LLaVA, Qwen-VL,
Idefics and most current VLMs load this way. Each trial becomes one multi-image prompt
(the frames in order, then the question), answered by greedy decoding; the text is
scored by :func:`~minirepro.papers.conservationbench.models.parse_response`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from minirepro.papers.conservationbench.models import Trial


class TransformersVLM:
    """§3 (models): a VLM answering the benchmark; satisfies ``Model``.

    Args:
        path: a folder with the processor and model (``save_pretrained``), or a hub id.
        name: the model's name in the answers (default: the folder name).
        max_new_tokens: the length of the generated answer.
        device: a torch device string.
    """

    def __init__(self, path: str | Path, name: str | None = None, max_new_tokens: int = 16,
                 device: str = "cpu") -> None:
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.path = str(path)
        self.name = name or Path(self.path).name
        self.processor = AutoProcessor.from_pretrained(self.path)
        self.model = AutoModelForImageTextToText.from_pretrained(self.path).to(device).eval()
        self.max_new_tokens, self.device, self._torch = max_new_tokens, device, torch
        self.image_token = getattr(self.processor, "image_token", None) or "<image>"

    def build_text(self, trial: Trial) -> str:
        """The prompt string: the processor's chat template if it has one, else one image
        token per frame followed by the question."""
        n = len(trial.images)
        if getattr(self.processor, "chat_template", None):
            content = [{"type": "image"} for _ in range(n)] + [{"type": "text", "text": trial.prompt}]
            return self.processor.apply_chat_template([{"role": "user", "content": content}],
                                                      add_generation_prompt=True)
        return " ".join([self.image_token] * n + [trial.prompt])

    def respond(self, trials: Sequence[Trial]) -> list[str]:
        from PIL import Image

        out = []
        for tr in trials:
            images = [Image.fromarray(np.asarray(im, dtype=np.uint8)).convert("RGB") for im in tr.images]
            inputs = self.processor(text=self.build_text(tr), images=images or None, return_tensors="pt")
            inputs = {k: v.to(self.device) for k, v in inputs.items()}
            with self._torch.no_grad():
                ids = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
            new = ids[0, inputs["input_ids"].shape[1]:]
            out.append(self.processor.tokenizer.decode(new, skip_special_tokens=True).strip())
        return out


def build_tiny_llava(folder: str | Path, seed: int = 0) -> Path:
    """A randomly initialised LLaVA of a few thousand weights with its processor, saved to
    ``folder`` (no download): CLIP vision tower 32 px, a one-layer Llama, a word tokenizer.
    For tests of the adapter; its answers are noise."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    words = ("<pad> <s> </s> <unk> <image> A B C ( ) Answer : same more less the of in image "
             "images frames first last is it dots stick liquid clay length number amount").split()
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                        eos_token="</s>", unk_token="<unk>",
                                        additional_special_tokens=["<image>"])
    vision = CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                              num_attention_heads=2, image_size=32, patch_size=8, projection_dim=16)
    text = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048)
    cfg = LlavaConfig(vision_config=vision, text_config=text, image_token_index=vocab["<image>"],
                      image_seq_length=17, vision_feature_layer=-1, vision_feature_select_strategy="full")
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(cfg).eval()
    processor = LlavaProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32},
                                                                  crop_size={"height": 32, "width": 32}),
                               tokenizer=tokenizer, patch_size=8, vision_feature_select_strategy="full",
                               num_additional_image_tokens=1)
    folder = Path(folder)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
