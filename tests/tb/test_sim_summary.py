"""The session summary of the accelerator runs (conftest.py): its table, and the mode comparison
that fails the session when DRS does not beat static and dense."""

from conftest import accelerator_summary


def runs(drs, static, dense):
    common = {"trace": "golden/t", "groups": "first:8", "seed": None, "stall": 0.0, "n_groups": 2,
              "rows_replayed": 6, "rows_computed": 2, "rows_checked": 8, "sim_cycles": 1000,
              "wall_s": 0.5, "cpu_s": 0.5}
    out = [dict(common, mode=m, total_cycles=c)
           for m, c in (("drs", drs), ("static", static), ("dense", dense))]
    out.append(dict(common, mode="drs", seed=3, stall=0.3, total_cycles=drs + 5))
    return out


def test_summary_table_and_speedup():
    lines, failure = accelerator_summary(runs(100, 125, 400), wall_s=2.0)
    assert failure is None
    text = "\n".join(lines)
    assert lines[0].split()[:2] == ["trace", "run"]
    assert lines[1].split()[:4] == ["t", "stalls", "seed", "3"] and lines[2].split()[:2] == ["t", "dense"]
    assert "stalls seed 3" in text and "static 125 (+25.0%)" in text and "speed-up 4.00x" in text
    assert "(ideal rows / computed rows 4.00x)" in text and "32 rows checked bit-exact in 4 runs" in text


def test_summary_fails_when_drs_loses():
    _, failure = accelerator_summary(runs(130, 125, 400), wall_s=2.0)
    assert failure and "DRS is not faster than static assignment (130 cycles against 125)" in failure
    _, failure = accelerator_summary(runs(400, 420, 400), wall_s=2.0)
    assert failure and "replay saved no cycles" in failure


def test_summary_coverage_to_reach_and_to_stay_zero():
    from hw.accel.accelerator import NEVER_EVENTS

    def with_coverage(refused, peak):
        out = runs(100, 125, 400)
        out[-1]["coverage"] = {"cov_rob_full": 3, "cov_tas_queue_peak": peak, NEVER_EVENTS[0]: refused}
        return out

    # Every event reached and the invariant held: no failure; the must-stay-0 counter is not "missed".
    _, failure = accelerator_summary(with_coverage(0, 1), wall_s=2.0)
    assert failure is None
    _, failure = accelerator_summary(with_coverage(0, 0), wall_s=2.0)
    assert failure and "never reached cov_tas_queue_peak" in failure and NEVER_EVENTS[0] not in failure
    # A result refused by the reorder buffer fails the session, whatever else was missed.
    _, failure = accelerator_summary(with_coverage(2, 0), wall_s=2.0)
    assert failure and f"{NEVER_EVENTS[0]} must stay 0 and did not" in failure


def test_summary_drained_mid_group_is_asked_of_the_starved_run():
    from hw.accel.accelerator import STARVED_EVENTS

    def with_drained(drained, starved):
        out = runs(100, 125, 400)
        out[-1]["coverage"] = {"cov_rob_full": 3, STARVED_EVENTS[0]: 0}
        extra = dict(out[-1], seed=1, starved=starved, stall=0.3, x_stall=0.9 if starved else 0.3,
                     coverage={"cov_rob_full": 0, STARVED_EVENTS[0]: drained})
        return [*out, extra]

    # The stall runs alone never drain mid-group: not asked of them.
    _, failure = accelerator_summary(runs(100, 125, 400)[:3] + with_drained(0, False)[3:], wall_s=2.0)
    assert failure is None
    # A starved-input run that drained: no failure, and its own row in the table.
    lines, failure = accelerator_summary(with_drained(7, True), wall_s=2.0)
    assert failure is None
    assert any(line.split()[:4] == ["t", "starved", "seed", "1"] for line in lines)
    assert "drained_mid_group 7" in "\n".join(lines)
    assert "(stall seeds 3; starved-input seed 1)" in lines[-1]
    # One that never drained fails the session, naming the counter.
    _, failure = accelerator_summary(with_drained(0, True), wall_s=2.0)
    assert failure and f"never reached {STARVED_EVENTS[0]}" in failure


def test_summary_starved_run_alone_is_not_asked_the_stall_runs_events():
    from hw.accel.accelerator import STARVED_EVENTS

    common = runs(100, 125, 400)[0]
    starved = dict(common, mode="mixed", seed=1, stall=0.3, x_stall=0.9, starved=True,
                   coverage={"cov_finish_together": 0, STARVED_EVENTS[0]: 4})
    _, failure = accelerator_summary([starved], wall_s=1.0)
    assert failure is None
