"""Shared fixtures of the software tests."""

import pytest
import torch

from sw.model import data
from sw.model.decoder import Decoder, ModelConfig
from sw.model.tokenizer import VQTokenizer
from sw.model.tokens import TokenLayout
from sw.model.train import save_checkpoint


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory):
    torch.manual_seed(0)
    frames, _ = data.make_dataset(12, seed=0, progress=False)
    tok = VQTokenizer.fit(frames, k=64, seed=0, progress=False)
    layout = TokenLayout(codebook_size=tok.vocab_size, tokens_per_frame=tok.tokens_per_frame)
    cfg = ModelConfig(vocab_size=layout.vocab_size, d_model=32, n_layers=2, n_heads=2, d_ff=64,
                      tokens_per_frame=layout.tokens_per_frame, prompt_len=layout.prompt_len,
                      codebook_size=layout.codebook_size, spatial_embedding=True)
    model = Decoder(cfg, init_std=0.2)
    out = tmp_path_factory.mktemp("ckpt") / "tiny"
    save_checkpoint(out, model, tok, layout, {"losses": [1.0, 0.5]}, force=False)
    return out


@pytest.fixture(autouse=True)
def single_thread():
    """Tiny matmuls run fastest on one thread; with 2 threads on a busy 2-core machine they stall."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
