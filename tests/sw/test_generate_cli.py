"""``python -m sw.model.generate``: the default operating point unless ``--dense``, ``--seed`` and
``--json`` records, refusal to overwrite."""

import json

import numpy as np
import torch

from sw import operating_point
from sw.model import generate
from sw.model.fastcar import SparseConfig, attention_mask


def test_sparse_density_is_the_masks_share():
    sp = SparseConfig(sinks=5, window=65)
    p = torch.arange(5, 5 + 2 * 64)
    mask = attention_mask(p, int(p[-1]) + 1, sp)
    causal = attention_mask(p, int(p[-1]) + 1, None)
    assert generate.sparse_density(5, 5 + 2 * 64, sp) == int(mask.sum()) / int(causal.sum())
    assert generate.sparse_density(5, 133, None) == 1.0


def test_json_records_default_and_dense(tmp_path, capsys):
    out, js = tmp_path / "g.png", tmp_path / "g.json"
    prompts = ["--prompt", "red square moves up", "--prompt", "blue circle moves left"]
    assert generate.main([*prompts, "--frames", "2", "--seed", "3", "--out", str(out), "--json", str(js)]) == 0
    recs = json.loads(js.read_text())
    assert [r["prompt"] for r in recs] == ["red square moves up", "blue circle moves left"]
    assert set(recs[0]) == {"prompt", "reads_as", "replay", "sparse_density"}
    op = operating_point.DEFAULT
    assert all((r["replay"] > 0) == (op.tau is not None) for r in recs)
    assert all((r["sparse_density"] < 1) == bool(op.window) for r in recs)
    # an existing file is refused and kept
    before = js.read_text()
    assert generate.main([*prompts, "--frames", "2", "--dense", "--out", str(out), "--json", str(js)]) == 1
    assert "--force" in capsys.readouterr().err and js.read_text() == before
    assert generate.main([*prompts, "--frames", "2", "--dense", "--out", str(out), "--json", str(js),
                          "--force"]) == 0
    dense = json.loads(js.read_text())
    assert all(r["replay"] == 0 and r["sparse_density"] == 1.0 for r in dense)
    assert np.all([isinstance(r["reads_as"], (str, type(None))) for r in dense])
