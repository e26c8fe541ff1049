"""Token layout of the video model: image codes, prompt words, BOS.

::

    [0, K)                 VQ image codes (K = tokenizer.vocab_size)
    [K, K + len(words))    prompt words, sw.model.data.TEXT_VOCAB ("<pad>" first)
    K + len(words)         BOS

A sequence is ``BOS, w1 .. w4`` (the prompt, ``prompt_len = 1 + PROMPT_LEN`` positions) followed by
the frames' codes in raster order, frame after frame. The unconditional prompt for classifier-free
guidance is the all-``<pad>`` prompt (the empty string).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sw.model import data


@dataclass(frozen=True)
class TokenLayout:
    codebook_size: int
    tokens_per_frame: int = 64

    @property
    def text_offset(self) -> int:
        return self.codebook_size

    @property
    def bos(self) -> int:
        return self.codebook_size + len(data.TEXT_VOCAB)

    @property
    def vocab_size(self) -> int:
        return self.bos + 1

    @property
    def prompt_len(self) -> int:
        return 1 + data.PROMPT_LEN

    def prompt_tokens(self, prompt: str) -> np.ndarray:
        """``[BOS, words...]`` as int64 [prompt_len]; ``""`` is the unconditional prompt."""
        return np.array([self.bos] + [self.text_offset + w for w in data.encode_prompt(prompt)],
                        dtype=np.int64)

    def prompt_batch(self, prompts):
        """``(cond, uncond)`` int64 torch tensors [len(prompts), prompt_len]: the prompts, and as
        many copies of the unconditional prompt (for classifier-free guidance)."""
        import torch

        cond = torch.tensor(np.stack([self.prompt_tokens(p) for p in prompts]))
        uncond = torch.tensor(self.prompt_tokens(""))[None].expand(len(prompts), -1)
        return cond, uncond

    def sequence(self, prompt: str, frame_tokens: np.ndarray) -> np.ndarray:
        """Prompt tokens followed by the frames' codes [T, N] flattened."""
        return np.concatenate([self.prompt_tokens(prompt), np.asarray(frame_tokens).reshape(-1)])
