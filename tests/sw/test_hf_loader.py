"""The Hugging Face LLaMA loader against transformers' own forward pass, and its error messages."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from sw.model.decoder import FastCarConfig, generate
from sw.model.hf_loader import HFLoadError, config_from_hf, load_hf_llama

#: Module-scoped fixtures: with pytest-xdist (--dist loadgroup) these tests share one worker.
pytestmark = pytest.mark.xdist_group("test_hf_loader")

transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed: the HF loader is not compared with a reference")

VOCAB = 50


def make_checkpoint(path, *, n_kv_heads=2, tie=False, shard=False, seed=0):
    """Save a tiny random LlamaForCausalLM (norm gains randomised too) and return it."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=n_kv_heads, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=500.0,
        tie_word_embeddings=tie)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.3 * torch.randn_like(param))
            else:
                param.normal_(0.0, 0.2)
    model.save_pretrained(path, safe_serialization=True, **({"max_shard_size": "20KB"} if shard else {}))
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf") / "llama"
    make_checkpoint(path)
    return path


def copy_checkpoint(src, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    return dst


def edit_config(path, **changes):
    config_path = path / "config.json"
    config = json.loads(config_path.read_text())
    config.update(changes)
    config_path.write_text(json.dumps(config))


def edit_weights(path, fn):
    file = path / "model.safetensors"
    tensors = load_file(file)
    fn(tensors)
    save_file(tensors, file, metadata={"format": "pt"})


@pytest.mark.parametrize("n_kv_heads,tie,shard", [(4, False, False), (2, False, True), (1, True, False)],
                         ids=["mha", "gqa-sharded", "mqa-tied"])
def test_logits_match_transformers(tmp_path, n_kv_heads, tie, shard):
    reference = make_checkpoint(tmp_path, n_kv_heads=n_kv_heads, tie=tie, shard=shard)
    if shard:
        assert (tmp_path / "model.safetensors.index.json").exists()
    model = load_hf_llama(tmp_path, tokens_per_frame=4, prompt_len=3)
    cfg = model.config
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff) == (32, 2, 4, n_kv_heads, 64)
    assert (cfg.rope_theta, cfg.norm_eps, cfg.max_seq_len, cfg.codebook_size) == (500.0, 1e-5, 64, VOCAB)
    tokens = torch.randint(0, VOCAB, (2, 19), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(tokens).logits
        ours = model(tokens)
    assert expected.abs().max() > 1.0
    torch.testing.assert_close(ours, expected, atol=1e-4, rtol=1e-4)
    # The incremental decode of the loaded model agrees as well.
    state = model.new_state(2)
    steps = [model.prefill(tokens[:, :3], state)] + [model.step(tokens[:, j], state) for j in range(3, 19)]
    torch.testing.assert_close(torch.stack(steps, 1), expected[:, 2:], atol=1e-4, rtol=1e-4)


def test_loaded_model_generates_with_fastcar(checkpoint):
    model = load_hf_llama(checkpoint, tokens_per_frame=4, prompt_len=3, image_token_offset=10,
                          codebook_size=20)
    out, stats = generate(model, torch.zeros(1, 3, dtype=torch.int64), 3, fastcar=FastCarConfig(tau=-1e9),
                          progress=False)
    assert out.shape == (1, 3, 4) and out.min() >= 10 and out.max() < 30
    assert stats.replayed[:, 1:].all()


def test_transformers_v4_style_rope_theta(tmp_path, checkpoint):
    path = copy_checkpoint(checkpoint, tmp_path)
    config = json.loads((path / "config.json").read_text())
    config.pop("rope_parameters", None)
    config["rope_theta"] = 500.0
    config["rope_scaling"] = None
    (path / "config.json").write_text(json.dumps(config))
    assert load_hf_llama(path).config.rope_theta == 500.0


def test_missing_config_json(tmp_path, checkpoint):
    path = copy_checkpoint(checkpoint, tmp_path)
    (path / "config.json").unlink()
    with pytest.raises(HFLoadError, match=r"config.json: no such config.json file"):
        load_hf_llama(path)


def test_missing_directory(tmp_path):
    with pytest.raises(HFLoadError, match="not a checkpoint directory"):
        load_hf_llama(tmp_path / "nowhere")


def test_missing_key(tmp_path, checkpoint):
    path = copy_checkpoint(checkpoint, tmp_path)
    edit_weights(path, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(HFLoadError, match=r"missing key\(s\) \['layers.1.mlp.up_proj.weight'\]"):
        load_hf_llama(path)


def test_unexpected_key(tmp_path, checkpoint):
    path = copy_checkpoint(checkpoint, tmp_path)
    edit_weights(path, lambda t: t.update({"model.layers.0.mlp.extra.weight": torch.zeros(2)}))
    with pytest.raises(HFLoadError,
                       match=r"unexpected key\(s\) \['model.safetensors:model.layers.0.mlp.extra"):
        load_hf_llama(path)


def test_wrong_shape(tmp_path, checkpoint):
    path = copy_checkpoint(checkpoint, tmp_path)
    edit_weights(path, lambda t: t.update({"model.layers.0.self_attn.q_proj.weight": torch.zeros(32, 16)}))
    with pytest.raises(HFLoadError, match=r"model.safetensors: key 'model.layers.0.self_attn.q_proj.weight' "
                                          r"has shape \(32, 16\), expected \(32, 32\)"):
        load_hf_llama(path)


def test_non_finite_weight(tmp_path, checkpoint):
    path = copy_checkpoint(checkpoint, tmp_path)

    def poison(tensors):
        tensors["model.norm.weight"][3] = float("nan")

    edit_weights(path, poison)
    with pytest.raises(HFLoadError, match=r"key 'model.norm.weight' has 1 NaN/inf value"):
        load_hf_llama(path)


@pytest.mark.parametrize("changes,msg", [
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "unsupported field rope_scaling"),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 500.0}}, "rope_parameters.rope_type='llama3'"),
    ({"hidden_act": "gelu"}, "unsupported field hidden_act='gelu'"),
    ({"attention_bias": True}, "unsupported field attention_bias=true"),
    ({"mlp_bias": True}, "unsupported field mlp_bias=true"),
    ({"head_dim": 16}, "unsupported field head_dim=16"),
    ({"num_key_value_heads": 3}, "n_heads=4 is not a multiple of n_kv_heads=3"),
    ({"model_type": "mistral"}, "model_type 'mistral' is not supported"),
])
def test_unsupported_config_field(tmp_path, checkpoint, changes, msg):
    path = copy_checkpoint(checkpoint, tmp_path)
    edit_config(path, **changes)
    with pytest.raises(HFLoadError, match=f"config.json: .*{msg}"):
        load_hf_llama(path)


def test_missing_config_field():
    with pytest.raises(HFLoadError, match="cfg.json: required field 'intermediate_size' is missing"):
        config_from_hf({"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2},
                       source="cfg.json")


def test_sharded_index_naming_a_missing_shard(tmp_path):
    make_checkpoint(tmp_path, shard=True)
    shard = sorted(tmp_path.glob("model-*.safetensors"))[0]
    shard.unlink()
    with pytest.raises(HFLoadError, match=f"shard '{shard.name}' listed in weight_map does not exist"):
        load_hf_llama(tmp_path)
