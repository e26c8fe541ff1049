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


def test_paired_difference_counts_discordant_videos():
    """The paired difference is the mean of per-video differences; McNemar counts the videos that
    disagree; a planted loss of 10 of 100 videos is seen as -10 points with an interval below zero."""
    ref = np.ones(100, bool)
    same = frontier.paired(ref, ref)
    assert same["diff"] == 0 and same["ci95"] == [0.0, 0.0] and same["worse"] == same["better"] == 0
    hits = ref.copy()
    hits[::10] = False
    p = frontier.paired(hits, ref)
    assert p["diff"] == pytest.approx(-0.10) and p["worse"] == 10 and p["better"] == 0
    assert p["ci95"][1] < 0 and p["ci95"][0] > -0.2 and p["mcnemar_p"] == pytest.approx(2 / 2 ** 10)
    swapped = frontier.paired(ref, hits)
    assert swapped["diff"] == pytest.approx(0.10) and swapped["better"] == 10
    with pytest.raises(ValueError, match="same videos"):
        frontier.paired(hits[:5], ref)


def _entry(name, family, path, speedup, replay, pf, dense_pf, held, dense_held):
    return {"name": name, "family": family, "path": path, "step_speedup": speedup, "replay": replay,
            "splits": {"all": {"prompt_following": pf, "dense": dense_pf},
                       "heldout": {"prompt_following": held, "dense": dense_held}}}


def test_choose_takes_the_fastest_video_within_budget_on_every_path():
    def both(name, family, speedups, pf, held):
        return [_entry(name, family, p, x, 0.5, a, 0.95, h, 0.90)
                for p, x, a, h in zip(("float", "integer"), speedups, pf, held, strict=True)]

    entries = [*both("dense", "dense", (1, 1), (0.95, 0.95), (0.90, 0.90)),
               *both("a", "shipped", (1.01, 1.01), (0.94, 0.94), (0.90, 0.90)),
               *both("b", "sparse_aware", (2.3, 2.31), (0.91, 0.90), (0.86, 0.85)),
               *both("c", "sparse_aware", (2.32, 2.33), (0.93, 0.93), (0.87, 0.80)),  # c fails held-out, int
               *both("u", "sparse_untrained", (2.4, 2.4), (0.95, 0.95), (0.90, 0.90))]  # not a candidate
    got = frontier.choose(entries, ("float", "integer"))
    assert got == {"name": "b", "step_speedup": {"float": 2.3, "integer": 2.31},
                   "replay": {"float": 0.5, "integer": 0.5}}
    assert frontier.choose(entries, ("float",))["name"] == "c"
    entries[5]["splits"]["all"]["prompt_following"] = 0.8999                   # b leaves it on integer
    assert frontier.choose(entries, ("float", "integer"))["name"] == "a"
    assert frontier.choose(entries[:2], ("float", "integer")) is None


def test_run_writes_the_documented_contract(tmp_path, monkeypatch):
    """A two-setting run on 4 prompts: calibration on one seed, the choice confirmed on a test seed
    that is not a calibration seed; fractions, paired differences, speed-ups, both plots."""
    from sw import operating_point

    settings = [frontier.Setting("dense", "dense", None, paths=("float",)),
                frontier.Setting("sparse tas -4", "shipped", "logit", -4.0, sparse=(5, 65), paths=("float",))]
    prompts = [*data.DEFAULT_PROMPTS[:2], *data.heldout_prompts()[:2]]
    monkeypatch.setattr(frontier, "BUDGET_POINTS", 100.0)       # 4 videos: let any result be chosen
    front = frontier.run(settings, paths=("float",), prompts=prompts, seeds=(0,), heldout_seeds=(),
                         test_seeds=(100,), jobs=1, progress=False)
    assert front["seeds"]["calibration"]["all_prompts"] == [0] and front["seeds"]["test"]["all_prompts"] == [100]
    cal = [e for e in front["entries"] if e["phase"] == "calibration"]
    assert [e["name"] for e in cal] == ["dense", "sparse tas -4"]
    dense, fc = cal
    assert dense["replay"] == 0.0 and dense["step_speedup"] == pytest.approx(1.0)
    assert 0 < fc["replay"] <= 7 / 8 and fc["ideal_mlp_speedup"] == pytest.approx(1 / (1 - fc["replay"]))
    assert 2.0 < fc["step_speedup"] < 3.0                                      # sparse 5+65 on the step
    assert dense["board"]["speedup"] == pytest.approx(1.0)                     # its board: the best dense
    assert "KV cache" in fc["board"]["placement"] and fc["board"]["speedup"] > 2.0   # sparse KV on chip
    for e in front["entries"]:
        a = e["splits"]["all"]
        assert 0.0 <= a["prompt_following"] <= 1.0 and a["videos"] == 4
        assert a["ci95"][0] <= a["prompt_following"] <= a["ci95"][1]
    assert "paired" in fc["splits"]["all"] and "paired" not in dense["splits"]["all"]
    assert fc["splits"]["all"]["paired"]["diff"] == pytest.approx(
        fc["splits"]["all"]["prompt_following"] - dense["splits"]["all"]["prompt_following"])
    assert "sprite_psnr_db" in fc and "sprite_psnr_db" not in dense
    assert front["chosen"]["name"] == "sparse tas -4"                          # the faster video
    test = [e for e in front["entries"] if e["phase"] == "test"]
    assert [e["name"] for e in test] == ["dense", "sparse tas -4"] and all(e["seeds"] == [100] for e in test)
    assert front["confirmation"]["name"] == "sparse tas -4" and front["confirmation"]["holds"]
    assert fc["splits"]["heldout"]["videos"] == 2 and fc["splits"]["train"]["videos"] == 2
    assert front["default"]["checkpoint"] == operating_point.DEFAULT.checkpoint
    json.dumps(front)
    frontier.plot(front, tmp_path / "f.png")
    frontier.plot_speed(front, tmp_path / "s.png")
    assert (tmp_path / "f.png").stat().st_size > 10_000 and (tmp_path / "s.png").stat().st_size > 10_000
    assert "calibration seeds" in frontier.markdown(front)


def test_bad_options_are_refused(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "f").write_text("keep")
    assert frontier.main(["--out", str(tmp_path / "x"), "--quick"]) == 1
    assert "pass --force" in capsys.readouterr().err and (tmp_path / "x" / "f").read_text() == "keep"
    assert frontier.main(["--out", str(tmp_path / "y"), "--jobs", "0"]) == 1
    assert frontier.main(["--out", str(tmp_path / "y"), "--jobs", "2", "--scheduler", "tcp://h:1"]) == 1
    assert "the scheduler's workers decide" in capsys.readouterr().err
    assert frontier.main(["--out", str(tmp_path / "y"), "--quick", "--scheduler", "nonsense"]) == 1
    assert "error: cannot reach the Dask scheduler at nonsense: " in capsys.readouterr().err
    assert not (tmp_path / "y").exists()
    with pytest.raises(frontier.FrontierError, match="unique"):
        frontier.run([frontier.Setting("dense", "dense", None)] * 2, prompts=["red square moves up"])
    with pytest.raises(frontier.FrontierError, match="dense"):
        frontier.run([frontier.Setting("a", "shipped", "logit", 0.0)], prompts=["red square moves up"])
    with pytest.raises(frontier.FrontierError, match="also calibration seeds"):
        frontier.run([frontier.Setting("dense", "dense", None)], prompts=["red square moves up"],
                     seeds=(0, 1), test_seeds=(1, 2))
    with pytest.raises(frontier.FrontierError, match="missing"):
        frontier.run([frontier.Setting("dense", "dense", None, model="nope")], prompts=["red square moves up"])


def test_the_integer_path_calibrates_only_what_holds_on_float(monkeypatch, tmp_path):
    """A candidate that leaves the budget on the float path is not run on the integer path; the
    choice is confirmed on the test seeds alone; no job of the test phase uses a calibration seed."""
    seen = []

    def fake_job(job):
        s, seed = job["setting"], job["seed"]
        seen.append((job["key"][0], s.name, job["key"][2], seed))
        good = s.name != "bad" and not (s.name == "fast" and job["integer"] and seed == 100)
        n = len(job["prompts"])
        reads = [{"prompt": p if good else None, "colour": None, "shape": None, "direction": None,
                  "centroids": np.full((8, 2), np.nan)} for p in job["prompts"]]
        speed = {"dense": 1.0, "slow": 1.1, "fast": 2.5, "bad": 3.0}[s.name]
        return {"key": job["key"], "prompts": job["prompts"], "seed": seed, "reads": reads,
                "videos": [np.zeros((8, 64, 64, 3), np.uint8)] * n, "replayed": 1, "total": 4,
                "cycles": 100 / speed, "dense_cycles": 100.0, "pairs": 1}

    monkeypatch.setattr(frontier, "run_job", fake_job)
    settings = [frontier.Setting("dense", "dense", None),
                frontier.Setting("slow", "shipped", "logit", -3.0),
                frontier.Setting("fast", "sparse_aware", "logit", -4.0, sparse=(5, 65)),
                frontier.Setting("bad", "sparse_aware", "logit", -6.0, sparse=(5, 65))]
    prompts = [*data.DEFAULT_PROMPTS[:2], *data.heldout_prompts()[:2]]
    front = frontier.run(settings, prompts=prompts, seeds=(0,), heldout_seeds=(1,), test_seeds=(100,),
                         jobs=1, progress=False)
    integer = {name for phase, name, path, _ in seen if phase == "calibration" and path == "integer"}
    assert integer == {"dense", "slow", "fast"}                       # "bad" failed on float
    assert front["chosen"]["name"] == "fast" and front["chosen"]["step_speedup"]["integer"] == 2.5
    test = [x for x in seen if x[0] == "test"]
    assert {x[3] for x in test} == {100} and {x[1] for x in test} == {"dense", "fast"}
    assert front["confirmation"] == {"name": "fast", "holds": False,             # planted: fails on test
                                     "step_speedup": {"float": 2.5, "integer": 2.5},
                                     "replay": {"float": 0.25, "integer": 0.25}}
    assert "confirmed on the test seeds: NO" in frontier.markdown(front)

    # Resumed from a store: a run that keeps its results by job key runs none of them again, and
    # gives the same frontier; with one result dropped from the store, only that job runs again.
    store = tmp_path / "jobs"
    first = frontier.run(settings, prompts=prompts, seeds=(0,), heldout_seeds=(1,), test_seeds=(100,),
                         jobs=1, progress=False, store=store)
    seen.clear()
    again = frontier.run(settings, prompts=prompts, seeds=(0,), heldout_seeds=(1,), test_seeds=(100,),
                         jobs=1, progress=False, store=store)
    assert seen == [] and again == first
    next(store.rglob("*.pkl")).unlink()
    frontier.run(settings, prompts=prompts, seeds=(0,), heldout_seeds=(1,), test_seeds=(100,),
                 jobs=1, progress=False, store=store)
    assert len(seen) == 1
