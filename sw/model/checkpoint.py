"""Loading the shipped (or any trained) video model: decoder, tokenizer and token layout."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from sw.model.decoder import Decoder, ModelConfig
from sw.model.tokenizer import VQTokenizer
from sw.model.tokens import TokenLayout

DEFAULT_CHECKPOINT = Path(__file__).resolve().parents[1] / "checkpoints" / "default"


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message names the file and field."""


@dataclass
class Checkpoint:
    path: Path
    model: Decoder
    tokenizer: VQTokenizer
    layout: TokenLayout
    meta: dict


def load_checkpoint(path=DEFAULT_CHECKPOINT) -> Checkpoint:
    """Load ``model.safetensors``, ``config.json`` and ``tokenizer.safetensors`` from ``path``."""
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: checkpoint directory does not exist")
    for name in ("config.json", "model.safetensors", "tokenizer.safetensors"):
        if not (path / name).is_file():
            raise CheckpointError(f"{path / name}: missing")
    try:
        meta = json.loads((path / "config.json").read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path / 'config.json'}: not valid JSON ({e})") from None
    if not isinstance(meta, dict) or "model" not in meta or "layout" not in meta:
        raise CheckpointError(f"{path / 'config.json'}: needs fields 'model' and 'layout'")
    try:
        cfg = ModelConfig.from_dict(meta["model"], source=f"{path / 'config.json'}: field 'model'")
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    try:
        tok = VQTokenizer.load(path / "tokenizer.safetensors")
    except Exception as e:
        raise CheckpointError(f"{path / 'tokenizer.safetensors'}: {e}") from None
    layout = TokenLayout(codebook_size=int(meta["layout"]["codebook_size"]),
                         tokens_per_frame=int(meta["layout"]["tokens_per_frame"]))
    if layout.codebook_size != tok.vocab_size or layout.vocab_size != cfg.vocab_size:
        raise CheckpointError(f"{path / 'config.json'}: field 'layout' does not match the tokenizer "
                              f"({tok.vocab_size} codes) or the model ({cfg.vocab_size} ids)")
    try:
        state = load_file(str(path / "model.safetensors"))
    except Exception as e:
        raise CheckpointError(f"{path / 'model.safetensors'}: cannot read ({e})") from None
    model = Decoder(cfg)
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise CheckpointError(f"{path / 'model.safetensors'}: missing keys {missing[:5]}, "
                              f"unexpected keys {unexpected[:5]}")
    for k, v in state.items():
        if v.shape != own[k].shape:
            raise CheckpointError(f"{path / 'model.safetensors'}: key '{k}' has shape {tuple(v.shape)}, "
                                  f"expected {tuple(own[k].shape)}")
        if not v.is_floating_point():
            raise CheckpointError(f"{path / 'model.safetensors'}: key '{k}' has dtype "
                                  f"{str(v.dtype).removeprefix('torch.')}, expected a floating-point tensor")
        if not torch.isfinite(v).all():
            raise CheckpointError(f"{path / 'model.safetensors'}: key '{k}' contains NaN or inf")
    model.load_state_dict(state)
    model.eval()
    return Checkpoint(path=path, model=model, tokenizer=tok, layout=layout, meta=meta)
