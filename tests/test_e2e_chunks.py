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
