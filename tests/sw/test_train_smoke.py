"""sw/model/train.py runs end to end (tiny budget), writes a loadable checkpoint, refuses to overwrite."""

import json
import subprocess
import sys
from pathlib import Path

from sw.model.checkpoint import load_checkpoint

REPO = Path(__file__).resolve().parents[2]


def test_train_smoke(tmp_path):
    out = tmp_path / "ck"
    args = [sys.executable, "sw/model/train.py", "--out", str(out), "--steps", "3", "--clips", "40",
            "--batch", "2", "--eval-prompts", "2", "--threads", "1"]
    r = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    ck = load_checkpoint(out)
    info = json.loads((out / "train.json").read_text())
    assert len(info["losses"]) == 3 and info["seed"] == 0 and (out / "loss.png").stat().st_size > 1000
    assert ck.model.config.spatial_embedding
    r = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 1 and "already exists and is not empty; pass --force" in r.stderr
    # Replay-aware fine-tuning from that checkpoint: same tokenizer, the replay settings recorded.
    tuned = tmp_path / "tuned"
    r = subprocess.run([*args[:3], str(tuned), *args[4:], "--init", str(out), "--replay-fraction", "0.5,1"],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    info = json.loads((tuned / "train.json").read_text())
    assert info["replay_aware"] == {"fraction": [0.5, 1.0], "dense": 0.25} and info["init"]["checkpoint"] == "ck"
    import numpy as np

    np.testing.assert_array_equal(np.asarray(load_checkpoint(tuned).tokenizer.codebook),
                                  np.asarray(ck.tokenizer.codebook))
    r = subprocess.run([*args[:3], str(tmp_path / "bad"), *args[4:], "--replay-fraction", "0.9,0.5"],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "--replay-fraction needs" in r.stderr and not (tmp_path / "bad").exists()
    for bad, message in ((["--replay-tau=1,-1"], "--replay-tau needs"),
                         (["--replay-start", "0.5"], "--replay-start needs --replay-tau"),
                         (["--replay-tau=0,1", "--replay-fraction", "0.5,1"], "not both")):
        r = subprocess.run([*args[:3], str(tmp_path / "bad"), *args[4:], *bad], cwd=REPO, capture_output=True,
                           text=True)
        assert r.returncode == 2 and message in r.stderr and not (tmp_path / "bad").exists(), bad


def test_replay_at_threshold_mode_starts_late_and_draws_in_range():
    import numpy as np

    from sw.model.train import replay_at

    replay = {"tau": [-2.5, 0.5], "start": 5, "dense": 0.25}
    rng = np.random.default_rng(0)
    assert all(replay_at(step, rng, replay) == {} for step in range(5))
    drawn = [replay_at(step, rng, replay) for step in range(5, 405)]
    taus = [d["replay_tau"] for d in drawn if d]
    assert 250 < len(taus) < 350 and all(-2.5 <= t <= 0.5 for t in taus)
    assert all(set(d) == {"replay_fraction"} for d in
               filter(None, (replay_at(0, rng, {"fraction": [0.6, 1.0], "dense": 0.25}) for _ in range(50))))
    assert replay_at(0, rng, None) == {}


def test_generate_cli_integer(tmp_path):
    out = tmp_path / "g.png"
    r = subprocess.run([sys.executable, "-m", "sw.golden.generate", "--prompt", "red square moves up",
                        "--frames", "2", "--tau", "-1.5", "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert out.stat().st_size > 1000 and "replay ratio" in r.stdout
    r = subprocess.run([sys.executable, "sw/model/generate.py", "--prompt", "purple square moves up"],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 1 and "purple" in r.stderr and r.stderr.count("\n") == 1
