"""Load a Hugging Face LLaMA-format checkpoint directory into :class:`sw.model.decoder.Decoder`.

A directory holds ``config.json`` and the weights as ``model.safetensors`` or as shards listed in
``model.safetensors.index.json``. Parameter names are those of :class:`~sw.model.decoder.Decoder` with an
optional ``model.`` prefix (``model.layers.0.mlp.gate_proj.weight`` -> ``layers.0.mlp.gate_proj.weight``),
so the map needs no renaming. Grouped-query attention is supported; everything the decoder does not
implement (RoPE scaling, biases, other activations, other architectures) is refused with a
:class:`HFLoadError` that names the file and the field or key.
"""

from __future__ import annotations

import numbers
from pathlib import Path

import torch
from safetensors import safe_open

from sw.jsonio import read_json
from sw.model.decoder import Decoder, ModelConfig, ModelConfigError

INDEX_FILE = "model.safetensors.index.json"
#: Buffers that old checkpoints store and the decoder recomputes.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class HFLoadError(ValueError):
    """A checkpoint directory that cannot be loaded into the decoder."""


def _read_json(path: Path, what: str) -> dict:
    return read_json(path, HFLoadError, what)


def config_from_hf(hf: dict, *, source: str = "config.json", **overrides) -> ModelConfig:
    """Map a Hugging Face LLaMA ``config.json`` to a :class:`~sw.model.decoder.ModelConfig`.

    Parameters
    ----------
    hf : dict
        Parsed ``config.json``.
    source : str
        Name used in error messages.
    **overrides
        ModelConfig fields that ``config.json`` does not define or that should be replaced
        (``tokens_per_frame``, ``prompt_len``, ``image_token_offset``, ``codebook_size``,
        ``max_seq_len``). Without an override, the image-token range is the whole vocabulary and
        ``max_seq_len`` is ``max_position_embeddings``.

    Returns
    -------
    ModelConfig

    Raises
    ------
    HFLoadError
        On missing fields, unsupported settings, or values that make no valid configuration.
    """

    def fail(msg):
        raise HFLoadError(f"{source}: {msg}")

    model_type = hf.get("model_type", "llama")
    if model_type != "llama":
        fail(f"model_type {model_type!r} is not supported (only 'llama')")
    fields = {}
    required = (("vocab_size", "vocab_size"), ("d_model", "hidden_size"), ("d_ff", "intermediate_size"),
                ("n_layers", "num_hidden_layers"), ("n_heads", "num_attention_heads"))
    for ours, theirs in required:
        if theirs not in hf:
            fail(f"required field '{theirs}' is missing")
        fields[ours] = hf[theirs]
    n_kv = hf.get("num_key_value_heads")
    fields["n_kv_heads"] = fields["n_heads"] if n_kv is None else n_kv
    fields["norm_eps"] = hf.get("rms_norm_eps", 1e-6)
    fields["max_seq_len"] = hf.get("max_position_embeddings", 2048)

    # RoPE: transformers < 5 writes rope_theta / rope_scaling, transformers >= 5 writes rope_parameters.
    if hf.get("rope_scaling") is not None:
        fail(f"unsupported field rope_scaling={hf['rope_scaling']!r} (only plain RoPE is implemented)")
    rope = hf.get("rope_parameters")
    theta = hf.get("rope_theta", 10000.0)
    if rope is not None:
        if not isinstance(rope, dict):
            fail(f"field rope_parameters must be an object, not {rope!r}")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            fail(f"unsupported field rope_parameters.rope_type={rope_type!r} (only 'default' is implemented)")
        extra = sorted(set(rope) - {"rope_type", "type", "rope_theta"})
        if extra:
            fail(f"unsupported field(s) rope_parameters.{extra} (only plain RoPE is implemented)")
        theta = rope.get("rope_theta", theta)
    fields["rope_theta"] = theta

    act = hf.get("hidden_act", "silu")
    if act != "silu":
        fail(f"unsupported field hidden_act={act!r} (the MLP is SwiGLU with 'silu')")
    for flag in ("attention_bias", "mlp_bias"):
        if hf.get(flag):
            fail(f"unsupported field {flag}=true (the decoder has no biases)")
    head_dim = hf.get("head_dim")
    n_heads, d_model = fields["n_heads"], fields["d_model"]
    if head_dim is not None and isinstance(n_heads, int) and n_heads > 0 and head_dim * n_heads != d_model:
        fail(f"unsupported field head_dim={head_dim}: must equal hidden_size / num_attention_heads "
             f"= {d_model} / {n_heads}")
    if "codebook_size" not in overrides and isinstance(fields["vocab_size"], numbers.Integral):
        fields["codebook_size"] = fields["vocab_size"] - overrides.get("image_token_offset", 0)
    fields.update(overrides)
    try:
        return ModelConfig(**fields)
    except ModelConfigError as e:
        raise HFLoadError(f"{source}: {e}") from None
    except TypeError as e:
        raise HFLoadError(f"{source}: {e}") from None


def _weight_files(directory: Path) -> list[Path]:
    index_path = directory / INDEX_FILE
    if index_path.exists():
        index = _read_json(index_path, "safetensors index")
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise HFLoadError(f"{index_path}: no 'weight_map' object")
        files = []
        for name in sorted(set(weight_map.values())):
            path = directory / name
            if not path.is_file():
                raise HFLoadError(f"{index_path}: shard {name!r} listed in weight_map does not exist")
            files.append(path)
        return files
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        others = sorted(p.name for pattern in ("*.bin", "*.pt") for p in directory.glob(pattern))
        hint = f" (found {others}: only safetensors is supported)" if others else ""
        raise HFLoadError(f"{directory}: no *.safetensors weight files{hint}")
    return files


def load_hf_llama(path, *, dtype: torch.dtype = torch.float32, **overrides) -> Decoder:
    """Load a Hugging Face LLaMA checkpoint directory into a :class:`~sw.model.decoder.Decoder`.

    Parameters
    ----------
    path : str or Path
        Directory with ``config.json`` and ``*.safetensors`` (optionally sharded with
        ``model.safetensors.index.json``).
    dtype : torch.dtype
        Dtype of the loaded model (weights are converted).
    **overrides
        ModelConfig fields to set (see :func:`config_from_hf`).

    Returns
    -------
    Decoder
        The model in eval mode.

    Raises
    ------
    HFLoadError
        On a missing ``config.json``, unsupported config fields, missing, unexpected or
        duplicated keys, wrong shapes, or non-finite weights; messages name the file and key.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise HFLoadError(f"{directory}: not a checkpoint directory")
    config_path = directory / "config.json"
    hf = _read_json(config_path, "config.json")
    config = config_from_hf(hf, source=str(config_path), **overrides)
    tied = bool(hf.get("tie_word_embeddings", False))

    model = Decoder(config).to(dtype)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    loaded: dict[str, torch.Tensor] = {}
    origin: dict[str, Path] = {}
    unexpected = []
    for file in _weight_files(directory):
        try:
            handle = safe_open(str(file), framework="pt")
        except Exception as e:  # safetensors raises its own error types
            raise HFLoadError(f"{file}: cannot read safetensors file ({e})") from None
        with handle:
            for key in handle.keys():
                name = key.removeprefix("model.")
                if name.endswith(IGNORED_SUFFIXES):
                    continue
                if name not in expected:
                    unexpected.append(f"{file.name}:{key}")
                    continue
                if name in loaded:
                    raise HFLoadError(f"{file}: key {key!r} also appears in {origin[name].name}")
                tensor = handle.get_tensor(key)
                if tuple(tensor.shape) != expected[name]:
                    raise HFLoadError(f"{file}: key {key!r} has shape {tuple(tensor.shape)}, "
                                      f"expected {expected[name]} from config.json")
                if not tensor.is_floating_point():
                    dtype = str(tensor.dtype).removeprefix("torch.")
                    raise HFLoadError(f"{file}: key {key!r} has dtype {dtype}, "
                                      f"expected a floating-point tensor")
                if not torch.isfinite(tensor).all():
                    bad = int((~torch.isfinite(tensor)).sum())
                    raise HFLoadError(f"{file}: key {key!r} has {bad} NaN/inf value(s)")
                loaded[name] = tensor.to(dtype)
                origin[name] = file
    if unexpected:
        more = f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else ""
        raise HFLoadError(f"{directory}: unexpected key(s) {unexpected[:5]}{more}")
    if tied and "lm_head.weight" not in loaded and "embed_tokens.weight" in loaded:
        loaded["lm_head.weight"] = loaded["embed_tokens.weight"]
    missing = sorted(set(expected) - set(loaded))
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise HFLoadError(f"{directory}: missing key(s) {missing[:5]}{more} "
                          f"(looked in {[p.name for p in _weight_files(directory)]})")
    model.load_state_dict(loaded, strict=True)
    return model.eval()


def main(argv=None) -> int:
    """``python -m sw.model.hf_loader DIR``: load a Hugging Face LLaMA directory and summarise it, or
    print the one reason it cannot be loaded."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(
        prog="python -m sw.model.hf_loader",
        description="Check that a Hugging Face LLaMA checkpoint loads into the decoder.")
    ap.add_argument("checkpoint", type=Path, help="directory with config.json and *.safetensors")
    args = ap.parse_args(argv)
    try:
        model = load_hf_llama(args.checkpoint)
    except HFLoadError as e:
        print(f"sw.model.hf_loader: error: {e}", file=sys.stderr)
        return 1
    c = model.config
    params = sum(p.numel() for p in model.parameters())
    print(f"{args.checkpoint}: ok, {c.n_layers} layers, d_model {c.d_model}, d_ff {c.d_ff}, "
          f"{c.n_heads} heads, vocab {c.vocab_size}, {params:,} parameters")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
