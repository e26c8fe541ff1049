"""The whole-video measurement in chunks (``tb/step/e2e.py``): which steps each chunk's run takes and
keeps, and chunk files that belong to another measurement refused by name."""

import json

import pytest

from tb.step.e2e import chunk_file, chunks, load_chunk, run_spec


def test_chunks_cover_every_step_once():
    for S, n in ((517, 32), (133, 7), (5, 8), (64, 64)):
        cs = chunks(S, n)
        assert [s for a, m in cs for s in range(a, a + m)] == list(range(S))
    with pytest.raises(ValueError):
        chunks(10, 0)


@pytest.mark.parametrize("a, n, S, spec, keep", [
    (0, 32, 517, "from:0:33", (0, 32)),        # the video's first step is a run's first step
    (32, 32, 517, "from:31:34", (1, 33)),      # a step before and a step after, dropped
    (512, 5, 517, "from:511:6", (1, 6)),       # the video's last step is a run's last step
    (0, 5, 5, "from:0:5", (0, 5))])
def test_a_chunks_run_has_one_step_either_side(a, n, S, spec, keep):
    got, i, j = run_spec(a, n, S)
    assert (got, (i, j)) == (spec, keep)
    lo, count = (int(x) for x in spec.split(":")[1:])
    assert list(range(lo, lo + count))[i:j] == list(range(a, a + n))


def test_a_chunk_of_another_measurement_is_refused(tmp_path):
    path = chunk_file(tmp_path, "dense", 32)
    path.parent.mkdir(parents=True)
    good = {"mode": "dense", "steps": list(range(32, 64)), "sdram_bytes_per_cycle": 2.8,
            "cycles": [1] * 32, "step_bytes": [[8, 0]] * 32}
    path.write_text(json.dumps(good))
    assert load_chunk(path, "dense", 32, 32, 2.8)["cycles"] == [1] * 32
    assert load_chunk(tmp_path / "none.json", "dense", 32, 32, 2.8) is None
    for field, value, named in (("sdram_bytes_per_cycle", 0.0, "sdram_bytes_per_cycle is 0.0"),
                                ("steps", list(range(32, 48)), "steps is"),
                                ("cycles", [1] * 31, "cycles has 31 steps, expected 32")):
        path.write_text(json.dumps({**good, field: value}))
        with pytest.raises(SystemExit, match=f"{path}: {named}"):
            load_chunk(path, "dense", 32, 32, 2.8)
    path.write_text("{")
    with pytest.raises(SystemExit, match="not JSON"):
        load_chunk(path, "dense", 32, 32, 2.8)


@pytest.mark.parametrize("first", [0, 5, 40, 69, 100, 132, 517])
def test_the_preloaded_replay_cache_is_the_latest_step_at_each_position(first):
    from tb.step.cocotb_decode_step import replay_cache_preload

    start, N = 5, 64
    got = replay_cache_preload(first, start, N)
    indexes = [i for _, i in got]
    assert len(set(indexes)) == len(indexes)
    for s, i in got:
        assert start <= s < first and (s - start) % N == i
        assert not any((u - start) % N == i for u in range(s + 1, first))     # none later at that position
    want = min(N, max(0, first - start))
    assert len(got) == want


def test_the_report_table_names_a_speedup_only_for_whole_videos():
    from tb.step.e2e import markdown

    row = {"chunks": "17/17", "steps_measured": 517, "rtl_cycles": 200, "model_cycles": 201,
           "model_error": 0.005, "max_step_error": 0.02, "read_bytes": 10, "formula_read_bytes": 10,
           "write_bytes": 2, "formula_write_bytes": 2, "simulation_seconds": 600, "whole_video": True}
    rep = {"command": "nox -s step -- --e2e", "sdram_bytes_per_cycle": 2.8, "chunk": 32,
           "modes": {"dense": row, "sparse": {**row, "rtl_cycles": 80},
                     "fastcar": {**row, "chunks": "3/17", "whole_video": False}},
           "speedup_over_dense": {"dense": 1.0, "sparse": 2.5}}
    lines = {ln.split(" | ")[0][2:]: ln for ln in markdown(rep).splitlines() if ln.startswith("| ")}
    assert "| 2.50x |" in lines["sparse"] and "| 1.00x |" in lines["dense"]
    assert "not whole yet" in lines["fastcar"] and "3/17" in lines["fastcar"]


def test_the_reports_step_errors(tmp_path, monkeypatch):
    """``report``'s largest step error over every step, over every step but the video's first, and the
    last step's, on chunks whose cycles are the cycle model's with planted errors: +10 % at step 0,
    -3 % at the last, +1 % elsewhere."""
    import numpy as np

    import sw.trace.full_step
    import tb.step.calibrate
    import tb.step.e2e
    from sw.perf import rtl_step
    from tb.step.e2e import report

    S, n = 10, 4
    man = {"dims": {"d_model": 96, "layers": 4, "batch": 4, "n_heads": 4, "head_dim": 24, "samples": 5,
                    "prompts": 2, "codebook": 512, "steps": S},
           "prompt_len": 5, "decode": {"sparse": None}}
    replay = np.random.default_rng(3).integers(0, 2, (S, 4, 4))
    (tmp_path / "trace").mkdir()
    (tmp_path / "trace" / "manifest.json").write_text("{}")

    class Trace:
        manifest, t = man, {"replay": replay}

    monkeypatch.setattr(tb.step.calibrate, "trace_dir", lambda mode: tmp_path / "trace")
    monkeypatch.setattr(sw.trace.full_step, "load_full_step", lambda path, verify: Trace)
    model = rtl_step.predict(rtl_step.features(man, replay, range(S)), rtl_step.CALIBRATED["coefficients"])
    err = np.full(S, 0.01)
    err[0], err[-1] = 0.10, -0.03
    cycles = model / (1 + err)
    by = rtl_step.step_bytes(man, range(S), 64)
    moved = by[:, :2].copy()
    shift = int(by[0, :2].sum()) // 25           # a prefetch: 4 % of step 0's bytes, issued in step 0
    moved[0, 0] += shift                         # for step 1, which reads that much less
    moved[1, 0] -= shift
    for a, m in chunks(S, n):
        path = chunk_file(tmp_path / "e2e", "dense", a)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"mode": "dense", "steps": list(range(a, a + m)),
                                    "sdram_bytes_per_cycle": 2.8, "cycles": cycles[a:a + m].tolist(),
                                    "step_bytes": moved[a:a + m].tolist(), "data_width": 64, "mv": [8, 8],
                                    "seconds": 1.0}))
    rep, series = report(tmp_path / "e2e", ["dense"], n, 2.8)
    r = rep["modes"]["dense"]
    assert r["whole_video"] and r["chunks"] == "3/3" and r["steps_measured"] == S
    assert np.isclose(r["max_step_error"], 0.10)
    assert np.isclose(r["max_step_error_after_first"], 0.03)
    assert np.isclose(r["last_step_error"], -0.03)
    assert (r["read_bytes"], r["write_bytes"]) == (r["formula_read_bytes"], r["formula_write_bytes"])
    assert np.isclose(r["max_step_bytes_error"], max(shift / by[0, :2].sum(), shift / by[1, :2].sum()))
    assert r["steps_bytes_exact"] == S - 2
    assert r["max_step_bytes_error_step"] == int(by[1, :2].sum() < by[0, :2].sum())
    assert rep["speedup_over_dense"] == {"dense": 1.0} and "default_speedup" not in rep
    # The default operating point's video, committed, at a third of dense's cycles: 3x once it is whole.
    monkeypatch.setattr(tb.step.e2e, "COMMITTED", tmp_path / "committed")
    for a, m in chunks(S, n):
        path = chunk_file(tmp_path / "committed", "default", a)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"mode": "default", "steps": list(range(a, a + m)),
                                    "sdram_bytes_per_cycle": 2.8, "cycles": (cycles[a:a + m] / 3).tolist(),
                                    "step_bytes": moved[a:a + m].tolist(), "data_width": 64, "mv": [8, 8],
                                    "seconds": 1.0}))
    rep, _ = report(tmp_path / "e2e", ["dense", "default"], n, 2.8)
    assert np.isclose(rep["default_speedup"], 3.0) and rep["modes"]["default"]["whole_video"]
    path.unlink()
    rep, _ = report(tmp_path / "e2e", ["dense", "default"], n, 2.8)
    assert "default_speedup" not in rep and rep["modes"]["default"]["chunks"] == "2/3"


def test_a_chunk_of_another_trace_is_refused_and_out_comes_before_committed(tmp_path, monkeypatch):
    from tb.step import e2e

    monkeypatch.setattr(e2e, "COMMITTED", tmp_path / "committed")
    good = {"mode": "default", "trace_sha256": "a" * 64, "steps": list(range(32, 64)),
            "sdram_bytes_per_cycle": 2.8, "cycles": [1] * 32, "step_bytes": [[8, 0]] * 32}
    for root, cycles in ((tmp_path / "committed", 1), (tmp_path / "out", 2)):
        path = e2e.chunk_file(root, "default", 32)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({**good, "cycles": [cycles] * 32}))
    assert e2e.find_chunk(tmp_path / "out", "default", 32, 32, 2.8, "a" * 64)["cycles"] == [2] * 32
    assert e2e.find_chunk(tmp_path / "none", "default", 32, 32, 2.8, "a" * 64)["cycles"] == [1] * 32
    assert e2e.find_chunk(tmp_path / "none", "default", 0, 32, 2.8, "a" * 64) is None
    with pytest.raises(SystemExit, match="trace_sha256 is aaaaaaaaaaaa.*another model"):
        e2e.find_chunk(tmp_path / "none", "default", 32, 32, 2.8, "b" * 64)


def test_spot_names_the_first_step_that_differs():
    from tb.step.e2e import first_difference

    old = {"steps": [10, 11, 12], "cycles": [5, 6, 7], "step_bytes": [[1, 2], [3, 4], [5, 6]]}
    assert first_difference(old, json.loads(json.dumps(old))) is None
    assert first_difference(old, {**old, "cycles": [5, 6, 8]}) == 12
    assert first_difference(old, {**old, "step_bytes": [[1, 2], [3, 5], [5, 6]]}) == 11
    with pytest.raises(ValueError, match="not the same chunk"):
        first_difference(old, {**old, "steps": [11, 12, 13]})



def test_save_commits_every_measured_chunk_and_refuses_a_conflicting_one(tmp_path, monkeypatch):
    """A part of a video is committed as it is measured (a later sitting on a fresh clone measures
    only what is missing); a committed chunk with other cycles is never overwritten."""
    from tb.step import e2e

    monkeypatch.setattr(e2e, "COMMITTED", tmp_path / "committed")
    out = tmp_path / "out"
    chunk = {"mode": "dense", "trace_sha256": "a" * 64, "steps": list(range(32, 64)),
             "sdram_bytes_per_cycle": 2.8, "cycles": [5] * 32, "step_bytes": [[8, 0]] * 32}
    e2e.chunk_file(out, "dense", 32).parent.mkdir(parents=True)
    e2e.chunk_file(out, "dense", 32).write_text(json.dumps(chunk))
    rep = {"modes": {"dense": {"chunks": "1/3", "whole_video": False}}}
    e2e.save(out, rep, 32, 2.8)
    committed = e2e.chunk_file(tmp_path / "committed", "dense", 32)
    assert json.loads(committed.read_text()) == chunk
    e2e.save(out, rep, 32, 2.8)                                     # the same again: nothing changes
    assert json.loads(committed.read_text()) == chunk
    e2e.chunk_file(out, "dense", 32).write_text(json.dumps({**chunk, "cycles": [6] * 32}))
    with pytest.raises(SystemExit, match="0032.json: committed with other cycles"):
        e2e.save(out, rep, 32, 2.8)
    assert json.loads(committed.read_text()) == chunk
