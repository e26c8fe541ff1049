"""The frontier command's metrics, its choice of the operating point, its output contract and the
compositional held-out split."""

import json

import numpy as np
import pytest

from sw.evidence import frontier
from sw.model import data


def test_heldout_split_is_compositional():
    held, train = data.heldout_prompts(), data.train_prompts()
    assert len(held) == 24 and len(train) == 72 and not set(held) & set(train)
    assert sorted(held + train) == sorted(data.all_prompts())
    assert not any(data.is_heldout(p) for p in data.DEFAULT_PROMPTS)
    seen = [data.parse_prompt(p) for p in train]
    for c, s, d in (data.parse_prompt(p) for p in held):
        # every word pair of a held-out prompt occurs in training; the triple never does
        assert any(t[:2] == (c, s) for t in seen) and any((t[0], t[2]) == (c, d) for t in seen)
        assert any(t[1:] == (s, d) for t in seen) and (c, s, d) not in seen


def test_dataset_restricted_to_training_prompts():
    _, prompts = data.make_dataset(40, seed=3, progress=False, prompts=data.train_prompts())
    assert not any(data.is_heldout(p) for p in prompts) and len(set(prompts)) > 10
    with pytest.raises(ValueError, match="empty"):
        data.make_dataset(2, prompts=[])


def test_wilson_interval():
    lo, hi = frontier.wilson(184, 192)
    assert lo == pytest.approx(0.9198, abs=1e-3) and hi == pytest.approx(0.9786, abs=1e-3)
    assert frontier.wilson(0, 10)[0] == 0.0 and frontier.wilson(10, 10)[1] == 1.0


def test_path_length_handles_wraparound_and_missing_frames():
    c = np.array([[10, 60], [10, 0], [10, 4], [np.nan, np.nan], [10, 8]], float)
    assert frontier.path_length(c) == pytest.approx(4 + 4 + 4)
    assert frontier.path_length(np.full((3, 2), np.nan)) == 0.0


def test_sprite_region_metrics():
    clip = data.render_clip("red", "square", "right", 20, 4, frames=8)
    cen = data.describe_clip(clip)["centroids"]
    mask, box = frontier.sprite_region(cen)
    assert mask.shape == (8, 64, 64) and box[1] - box[0] >= 16 and box[3] - box[2] >= 16 + 7 * 4
    assert frontier.region_psnr(clip, clip, mask) == 99.0
    assert frontier.region_ssim(clip, clip, box) == pytest.approx(1.0)
    frozen = np.repeat(clip[:1], 8, axis=0)
    assert frontier.region_psnr(frozen, clip, mask) < 20 and frontier.region_ssim(frozen, clip, box) < 0.9


def _entry(name, family, replay, pf_train, held=None):
    out = [{"name": name, "family": family, "replay": replay, "path": "float", "prompts": "all",
            "splits": {"train": {"prompt_following": pf_train}}}]
    if held is not None:
        out.append({"name": f"{name} (held-out)", "family": family, "replay": replay, "path": "float",
                    "prompts": "held-out", "splits": {"heldout": {"prompt_following": held}}})
    return out


def test_choose_default_takes_the_largest_replay_within_budget_confirmed_on_heldout():
    entries = [*_entry("dense", "dense", 0.0, 0.95, held=0.90), *_entry("a", "shipped", 0.5, 0.94, held=0.9),
               *_entry("b", "shipped", 0.7, 0.90, held=0.86), *_entry("c", "shipped", 0.8, 0.89, held=0.88),
               *_entry("o", "oracle", 0.85, 0.95)]
    assert frontier.choose_default(entries)["name"] == "b"
    entries[4]["splits"]["train"]["prompt_following"] = 0.8999       # b leaves the budget on training
    assert frontier.choose_default(entries)["name"] == "a"
    entries[4]["splits"]["train"]["prompt_following"] = 0.90
    entries[5]["splits"]["heldout"]["prompt_following"] = 0.8499     # b is not confirmed on held-out
    assert frontier.choose_default(entries)["name"] == "a"
    assert frontier.choose_default([*entries[:2], *_entry("x", "shipped", 0.9, 0.1)]) is None


def test_choose_common_needs_the_budget_on_every_path():
    def both(name, family, replays, train, held):
        out = []
        for path, r, t, h in zip(("float", "integer"), replays, train, held):
            for e in _entry(name, family, r, t, held=h):
                out.append({**e, "path": path, "tau": {"a": -3.0, "b": -4.0, "c": -5.0}.get(name)})
        return out

    entries = [*both("dense", "dense", (0, 0), (0.95, 0.95), (0.90, 0.90)),
               *both("a", "shipped", (0.69, 0.70), (0.94, 0.94), (0.90, 0.90)),
               *both("b", "shipped", (0.75, 0.74), (0.93, 0.91), (0.88, 0.86)),
               *both("c", "shipped", (0.82, 0.82), (0.93, 0.93), (0.87, 0.80))]   # c fails held-out on integer
    assert frontier.choose_default([e for e in entries if e["path"] == "float"])["name"] == "c"
    assert frontier.choose_default([e for e in entries if e["path"] == "integer"])["name"] == "b"
    common = frontier.choose_common(entries)
    assert common == {"name": "b", "tau": -4.0, "replay": {"float": 0.75, "integer": 0.74}}
    entries[11]["splits"]["heldout"]["prompt_following"] = 0.8499              # b leaves it on integer
    assert frontier.choose_common(entries)["name"] == "a"
    assert frontier.choose_common([e for e in entries if e["name"] in ("dense", "dense (held-out)")]) is None


def test_run_writes_the_documented_contract(tmp_path, monkeypatch):
    """A two-setting run on 4 prompts: names, fractions, the dense entry and the default flag."""
    from sw.model.fastcar import DEFAULT_TAU

    settings = [frontier.Setting("dense", "dense", None),
                frontier.Setting(f"tas {DEFAULT_TAU:g}", "shipped", "logit", DEFAULT_TAU)]
    prompts = data.DEFAULT_PROMPTS
    front = frontier.run(settings, paths=("float",), prompts=prompts, seeds=(0,),
                         heldout_seeds=(), jobs=1, progress=False)
    names = [e["name"] for e in front["entries"]]
    assert names == ["dense", f"tas {DEFAULT_TAU:g}"]
    dense, fc = front["entries"]
    assert dense["replay"] == 0.0 and not dense.get("default") and fc["default"] is True
    assert 0 < fc["replay"] <= 7 / 8 and fc["ideal_speedup"] == pytest.approx(1 / (1 - fc["replay"]))
    for e in front["entries"]:
        assert 0.0 <= e["prompt_following"] <= 1.0 and e["videos"] == 4
        lo, hi = e["prompt_following_ci95"]
        assert lo <= e["prompt_following"] <= hi
    assert "sprite_psnr_db" in fc and "sprite_psnr_db" not in dense
    json.dumps(front)
    frontier.plot(front, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 10_000
    assert "(default)" in frontier.markdown(front)
    assert front["operating_point"] is None or front["operating_point"]["name"].startswith("tas")


def test_bad_options_are_refused(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "f").write_text("keep")
    assert frontier.main(["--out", str(tmp_path / "x"), "--quick"]) == 1
    assert "pass --force" in capsys.readouterr().err and (tmp_path / "x" / "f").read_text() == "keep"
    assert frontier.main(["--out", str(tmp_path / "y"), "--seeds", "0"]) == 1
    with pytest.raises(frontier.FrontierError, match="unique"):
        frontier.run([frontier.Setting("dense", "dense", None)] * 2, prompts=["red square moves up"])
    with pytest.raises(frontier.FrontierError, match="dense"):
        frontier.run([frontier.Setting("a", "shipped", "logit", 0.0)], prompts=["red square moves up"])
