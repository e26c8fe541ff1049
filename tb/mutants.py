"""Mutation check: plant small bugs one at a time and show that the fast tests catch each.

``python -m tb.mutants`` (``nox -s mutants``) copies the repository to a temporary directory
(never touching the working tree), runs the union of the mutants' tests there once unchanged
(they must pass), then, for each mutant, rewrites one file of the copy, runs that mutant's
tests (amaranth.sim unit tests, formal properties, golden-model tests) with ``pytest -x`` and
restores the file. A mutant is *caught* when a test fails. The table goes to the terminal and
``build/mutants/report.json``; the exit status is 1 if any mutant survived. The mutants are jobs
of :mod:`sw.jobs`: one after another by default, ``--jobs N`` side by side (each job in a copy of
its own, made from the unchanged one), or ``--scheduler tcp://HOST:PORT`` on the workers of a
running Dask scheduler that share this machine's files.

Usage::

    python -m tb.mutants [--only NAME ...] [--list] [--timeout S] [--keep] [--jobs N | --scheduler ADDRESS]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tb.mutation import Mutation, MutationError

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "build" / "mutants"

__all__ = ["Mutant", "MUTANTS", "by_name", "run", "main"]

_F = "tests/formal/test_properties.py::test_property"


@dataclass(frozen=True)
class Mutant:
    """A planted bug and the fast tests that must catch it.

    Attributes
    ----------
    name : str
        Short name (also used by the formal failing-twin tests).
    what : str
        The bug in one line.
    mutation : Mutation
        The change to one source file.
    tests : tuple of str
        pytest node ids or files; at least one must fail on the mutant.
    """

    name: str
    what: str
    mutation: Mutation
    tests: tuple


def _m(name, what, path, old, new, *tests):
    return Mutant(name, what, Mutation(path, old, new), tuple(tests))


MUTANTS = [
    _m("lane-saturate-127", "requantiser lane saturates negative values at -127 instead of -128",
       "hw/lib/requant_lane.py", "m.d.comb += y.eq(-(1 << (n - 1)))",
       "m.d.comb += y.eq(-(1 << (n - 1)) + 1)",
       "tests/hw/lib/test_requant_lane.py"),
    _m("golden-round-ties-odd", "golden model rounds ties to odd (sw/spec/quant.py only)",
       "sw/spec/quant.py", "((q & 1) == 1)", "((q & 1) == 0)",
       "tests/sw/test_quant.py"),
    _m("dispatcher-last-chunk", "DRS dispatcher off by one: a row ends after chunk S-2 (its last chunk is "
       "never dispatched)", "hw/accel/dispatcher.py", "chunk[h] == S - 1", "chunk[h] == S - 2",
       "tests/hw/accel/test_dispatcher_sim.py", f"{_F}[dispatcher_drs]", f"{_F}[dispatcher_static]"),
    _m("dispatcher-drs-no-copy", "DRS: a row goes to holder 0 only, so core 1 reads a stale tag",
       "hw/accel/dispatcher.py", "took & ((dest == h) | ~self.static)", "took & (dest == h)",
       "tests/hw/accel/test_dispatcher_sim.py", f"{_F}[dispatcher_drs]"),
    _m("dispatcher-drs-skips-last-core", "DRS never considers the highest-numbered core",
       "hw/accel/dispatcher.py", "for p in reversed(range(P)):", "for p in reversed(range(P - 1)):",
       "tests/hw/accel/test_dispatcher_sim.py", f"{_F}[dispatcher_drs]"),
    _m("dispatcher-static-wrong-core", "static mode sends row b to core (b + 1) mod P",
       "hw/accel/dispatcher.py", "self.i.p.tag % P, 0", "(self.i.p.tag + 1) % P, 0",
       "tests/hw/accel/test_dispatcher_sim.py", f"{_F}[dispatcher_static]"),
    _m("dispatcher-chunk-rr-wrong-core", "chunk round-robin sends chunk j to core (j + 1) mod P",
       "hw/accel/dispatcher.py", "target.eq(chunk[0] % P)", "target.eq((chunk[0] + 1) % P)",
       "tests/hw/accel/test_dispatcher_sim.py", f"{_F}[dispatcher_chunk_rr]"),
    _m("dispatcher-static-no-hold", "static mode counts a chunk as sent without ready (hold dropped)",
       "hw/accel/dispatcher.py", "sent[p].eq(busy[p] & o.ready)", "sent[p].eq(busy[p])",
       "tests/hw/accel/test_dispatcher_sim.py", f"{_F}[handshake_dispatcher]", f"{_F}[dispatcher_static]"),
    _m("writeback-skipped-computed", "computed rows are not written back to the replay cache",
       "hw/accel/accelerator.py", "cache.i.valid.eq(rob_from_mlp | (want_read & ~wb))",
       "cache.i.valid.eq(want_read & ~wb)",
       "tests/hw/accel/test_accelerator_sim.py"),
    _m("cache-write-disabled", "the replay cache ignores writes",
       "hw/accel/replay_cache.py", "bank.w_en.eq(w_go)", "bank.w_en.eq(0)",
       "tests/hw/accel/test_replay_cache_sim.py", f"{_F}[replay_cache_memory]"),
    _m("cache-address-alias", "replay-cache address uses N-1 positions per layer (entries alias)",
       "hw/accel/replay_cache.py", "mul_const(p.layer, self._n)", "mul_const(p.layer, self._n - 1)",
       "tests/hw/accel/test_replay_cache_sim.py", f"{_F}[replay_cache_memory]"),
    _m("cache-address-range", "replay-cache address uses N+1 positions per layer (runs past the end)",
       "hw/accel/replay_cache.py", "mul_const(p.layer, self._n)", "mul_const(p.layer, self._n + 1)",
       "tests/hw/accel/test_replay_cache_sim.py", f"{_F}[replay_cache_memory]"),
    _m("cache-position-low-bits", "replay-cache address drops the high bit of the in-frame position "
       "(positions N/2 apart share an entry)", "hw/accel/replay_cache.py", "mul_const(p.layer, self._n) + p.index,",
       "mul_const(p.layer, self._n) + p.index[:len(p.index) - 1],",
       f"{_F}[replay_cache_memory]"),
    _m("mlp-x-address-zero", "MLP engine: every core reads row 0's x from the row buffer",
       "hw/accel/mlp_engine.py", "self.x_addr[p].eq(job.p.tag)", "self.x_addr[p].eq(0)",
       "tests/hw/accel/test_mlp_engine.py"),
    _m("accel-x-port-shared", "accelerator: both row-buffer read ports at core 0's address (the "
       "cores' rows differ only in row-static mode)", "hw/accel/accelerator.py",
       "xr.addr.eq(mlp.x_addr[p])", "xr.addr.eq(mlp.x_addr[0])", "tests/hw/accel/test_accelerator_sim.py"),
    _m("cache-read-row-lost", "replay cache: a read comes back tagged with row 0",
       "hw/accel/replay_cache.py", "stage_row.eq(req_row)", "stage_row.eq(0)",
       "tests/hw/accel/test_replay_cache_sim.py"),
    _m("cache-read-no-hold", "replay-cache read data not held under backpressure",
       "hw/accel/replay_cache.py", "en.eq(~self.o.valid | self.o.ready)", "en.eq(1)",
       "tests/hw/accel/test_replay_cache_sim.py", f"{_F}[handshake_replay_cache]"),
    _m("output-byte-order", "host unpacks output rows big-endian (element 0 taken from the top byte)",
       "hw/board/host.py", '.to_bytes(d, "little")', '.to_bytes(d, "big")',
       "tests/hw/accel/test_accelerator_sim.py"),
    _m("silu-lut-address", "SiLU table addressed by the raw code bits (no +128 offset)",
       "hw/accel/layouts.py", "Cat(code[:7], ~code[7])", "Cat(code[:7], code[7])",
       "tests/hw/accel/test_mv_core.py::test_core_rows_are_the_integer_mlp"),
    _m("rob-head-skips", "reorder-buffer head pointer advances by 2",
       "hw/lib/reorder_buffer.py", "head_n.eq(self.head + 1)", "head_n.eq(self.head + 2)",
       f"{_F}[reorder_buffer_order]", "tests/hw/lib/test_reorder_buffer_sim.py"),
    _m("rob-overwrite", "reorder buffer accepts a result into an occupied slot (and loses it)",
       "hw/lib/reorder_buffer.py", "self.i.ready.eq(~full.bit_select(self.i.p.tag, 1))", "self.i.ready.eq(1)",
       "tests/hw/lib/test_reorder_buffer_sim.py"),
    _m("rob-slot-loads-when-full", "reorder buffer: a full slot still loads the input, so a row "
       "changes while it waits on o", "hw/lib/reorder_buffer.py", "with m.If(~full[n]):", "with m.If(1):",
       f"{_F}[handshake_reorder_buffer]", "tests/hw/lib/test_reorder_buffer_sim.py"),
    _m("sum-bits-no-sign", "accumulator widths without the sign bit (sw/spec/quant.py sum_bits)",
       "sw/spec/quant.py", "bit_length() + 1", "bit_length()",
       "tests/sw/test_config.py::test_mv_geometry_of_the_default", f"{_F}[mv_unit_width]"),
    _m("lane-saturate-no-carry", "requantiser lane: 127 + a rounding increment wraps to -128 (the carry into "
       "bit 7 not seen)", "hw/lib/requant_lane.py", "hi.eq(~sign & (~zero | (up & inc[-1])))",
       "hi.eq(~sign & ~zero)",
       "tests/hw/lib/test_requant_lane.py"),
    _m("lane-upper-mask-late", "requantiser lane: the upper-bits mask starts a bit late, so a value of "
       "128-255 after the shift is not saturated", "hw/lib/requant_lane.py",
       "mask[i].eq(shift <= i - k if i >= k else 0)",
       "mask[i].eq(shift <= i - k - 1 if i >= k else 0)", "tests/hw/lib/test_requant_lane.py"),
    _m("lane-round-half-up", "requantiser lane rounds ties up, not to even",
       "hw/lib/requant_lane.py", "up.eq(round4 & (sticky4 | q4[0]))", "up.eq(round4)",
       "tests/hw/lib/test_requant_lane.py"),
    _m("mv-core-acc-overwrites", "core: a D pass overwrites the row's accumulator instead of adding",
       "hw/accel/mv_core.py", "Mux(r_touched, r_old[n] + r_sum[n], r_sum[n])", "r_sum[n]",
       "tests/hw/accel/test_mv_core.py::test_core_rows_are_the_integer_mlp"),
    _m("mv-core-one-h-buffer", "core: consecutive GU passes write the same h buffer",
       "hw/accel/mv_core.py", "wslot.eq(~wslot)", "wslot.eq(wslot)",
       "tests/hw/accel/test_mv_core.py::test_core_rows_are_the_integer_mlp"),
    _m("row-out-drops-core", "output stage adds only core 0's part of a row",
       "hw/accel/row_out.py", "sum(parts[1:], parts[0])", "parts[0]",
       "tests/hw/accel/test_row_out.py::test_row_out_latency_and_sums"),
    _m("tas-group-no-threshold", "TAS: the decision compares the TAS with 0, not the threshold",
       "hw/accel/tas_group.py", "diff.eq(acc + thr_b)", "diff.eq(acc)",
       "tests/hw/accel/test_tas_group.py::test_threshold_edges_and_extremes"),
    _m("shared-table-one-port", "shared table: reader 1 gets reader 0's address",
       "hw/lib/shared_table.py", "ram.b_addr.eq(self.r_addr[1])", "ram.b_addr.eq(self.r_addr[0])",
       "tests/hw/lib/test_shared_table.py::test_two_readers"),
    _m("weight-store-write-bank", "weight store: a write goes to the bank of port A's read address",
       "hw/accel/weight_store.py", '"we": reg(Mux(write, w_bank, 0)', '"we": reg(Mux(write, onehot_bank(self.r_addr[0]), 0)',
       "tests/hw/accel/test_weight_store.py"),
    _m("weight-store-read-bank", "weight store: port B selects its word by port A's bank",
       "hw/accel/weight_store.py", "reg(onehot_bank(self.r_addr[p]),", "reg(onehot_bank(self.r_addr[0]),",
       "tests/hw/accel/test_weight_store.py"),
    _m("mv-unit-tree-narrow", "matrix-vector unit: every adder-tree stage one bit too narrow",
       "hw/lib/mv_unit.py", "width = 2 * OPERAND_BITS + level + 1", "width = 2 * OPERAND_BITS + level",
       "tests/hw/lib/test_mv_unit.py"),
    _m("mv-unit-first-ignored", "matrix-vector unit: a run's first beat adds to the previous run's sums",
       "hw/lib/mv_unit.py", "Mux(first, 0, acc_reg) + tree", "acc_reg + tree",
       "tests/hw/lib/test_mv_unit.py"),
    _m("mv-unit-weight-transposed", "matrix-vector unit: weight (n, k) taken from position (k, n)",
       "hw/lib/mv_unit.py", "self.i.payload.w[n * n_in + k]", "self.i.payload.w[(k * n_out + n) % (n_in * n_out)]",
       "tests/hw/lib/test_mv_unit.py"),
    _m("mv-core-first-beat", "core: a pass's accumulation starts at its second beat",
       "hw/accel/mv_core.py", "desc.first.eq(ib == 0)", "desc.first.eq(ib == 1)",
       "tests/hw/accel/test_mv_core.py::test_core_rows_are_the_integer_mlp"),
    _m("row-out-early-full", "output stage requantises a row after S-1 of its S chunks",
       "hw/accel/row_out.py", "full[b].eq(count_next == S)", "full[b].eq(count_next == S - 1)",
       "tests/hw/accel/test_row_out.py::test_row_out_latency_and_sums"),
    _m("row-out-one-finish-per-cycle", "output stage counts one finished chunk when both cores finish together",
       "hw/accel/row_out.py", "inc = sum(hits[1:], hits[0])", "inc = 1",
       "tests/hw/accel/test_row_out.py::test_row_out_latency_and_sums"),
    _m("row-out-drops-second-finish", "output stage counts only core 0's finish when both cores finish "
       "in the same cycle (the other core's chunk is lost)", "hw/accel/row_out.py",
       "hits = [self.done[p].valid & (self.done[p].p.tag == b) for p in range(P)]",
       "hits = [self.done[p].valid & ((p == 0) | ~self.done[0].valid) & (self.done[p].p.tag == b) "
       "for p in range(P)]",
       "tests/hw/accel/test_row_out.py::test_row_out_latency_and_sums", f"{_F}[row_out_rows]"),
    _m("row-out-untouched-core", "output stage adds a core's sums for a row that core never touched",
       "hw/accel/row_out.py", "Mux(self.acc_touched[p], self.acc_data[p][n], 0)", "self.acc_data[p][n]",
       "tests/hw/accel/test_row_out.py::test_row_out_latency_and_sums"),
    _m("tas-group-chain-no-reset", "TAS: a computed row does not reset its chain counter",
       "hw/accel/tas_group.py", "wr.data.eq(Mux(replay_b, cnt_inc, 0))", "wr.data.eq(cnt_inc)",
       "tests/hw/accel/test_tas_group.py"),
    _m("tas-group-chain-address-unguarded", "TAS: an engine's chain-counter address follows beats "
       "that were not taken", "hw/accel/tas_group.py", "with m.If(valid_pre & (row_pre == b)):",
       "with m.If(row_pre == b):", "tests/hw/accel/test_tas_group.py"),
    _m("mv-core-start-late", "MLP core: a job arriving at an idle core starts a cycle late (the "
       "next start decided on the held-job flag's old value)", "hw/accel/mv_core.py",
       "starts(decide_n, q_after_n, nxt_full_n,", "starts(decide_n, q_after_n, nxt_full,",
       "tests/sw/test_cycles.py"),
    _m("tas-group-refresh-period", "TAS: the refresh phase wraps one frame late",
       "hw/accel/tas_group.py", "Mux(phase >= every_m1, 0, phase + 1)", "Mux(phase > every_m1, 0, phase + 1)",
       "tests/hw/accel/test_tas_group.py"),
    _m("tas-group-plane-stuck", "TAS: an engine's k registers never shift (every step reads plane 7)",
       "hw/accel/tas_group.py", "else (kr[0][ln] << 1)[:8]", "else kr[0][ln]", "tests/hw/accel/test_tas_group.py"),
    _m("tas-group-no-double", "TAS: the accumulator does not double at a new bit plane",
       "hw/accel/tas_group.py", "Mux(dbl, acc << 1, acc)", "acc", "tests/hw/accel/test_tas_group.py"),
    _m("tas-group-sign-plane-added", "TAS: the sign plane's products are added, not subtracted",
       "hw/accel/tas_group.py", "Mux(neg, prev - partial, prev + partial)", "prev + partial", "tests/hw/accel/test_tas_group.py"),
    _m("tas-group-chunk-stuck", "TAS: with fewer lanes than dim, the q chunks do not rotate",
       "hw/accel/tas_group.py", "Mux(load, row_in.q[e], qr[(c + 1) % C][ln])", "Mux(load, row_in.q[e], qr[c][ln])",
       "tests/hw/accel/test_tas_group.py"),
    _m("tas-group-tas-of-row-0", "TAS: every row reports row 0's score",
       "hw/accel/tas_group.py", "dec.tas.eq(Array(tas_r)[row_o])", "dec.tas.eq(tas_r[0])",
       "tests/hw/accel/test_tas_group.py"),
    _m("tas-group-frame0-replays", "TAS: frame 0 may replay (the frame != 0 rule dropped)",
       "hw/accel/tas_group.py", "fz2.eq(row_in.frame == 0)", "fz2.eq(0)",
       "tests/hw/accel/test_tas_group.py"),
    _m("tas-group-queue-drops", "TAS: a decision that finds the output ready but the queue not "
       "empty is dropped instead of queued", "hw/accel/tas_group.py",
       "queue.w_en.eq(valid_q & ~(self.o.ready & ~queue.r_rdy))", "queue.w_en.eq(valid_q & ~self.o.ready)",
       "tests/hw/accel/test_tas_group.py", f"{_F}[tas_group_order]"),
    _m("accel-y-no-hold", "accelerator pops the reorder buffer without y.ready",
       "hw/accel/accelerator.py", "rob.o.ready.eq(self.y.ready)", "rob.o.ready.eq(1)",
       f"{_F}[handshake_accelerator]"),
    _m("accel-tlast-off-by-one", "tlast of a group's output on the row before the last",
       "hw/accel/accelerator.py", "rows_out + 1 == rows_in", "rows_out + 2 == rows_in",
       "tests/hw/accel/test_accelerator_sim.py"),
    _m("accel-tlast-drained", "tlast whenever every row taken of a group has left, its last row arrived or "
       "not (a group ends early when the input runs dry)", "hw/accel/accelerator.py",
       "out_last.eq(last_seen & (rows_out + 1 == rows_in))", "out_last.eq(rows_out + 1 == rows_in)",
       "tb/accelerator/test_accelerator.py::test_trace_starved_input"),
    _m("rob-head-copy-late", "reorder buffer: the copies of the head that select the output row "
       "lag it by a cycle", "hw/lib/reorder_buffer.py",
       'word_copies(m, platform, head_n, groups, "head_sel")',
       'word_copies(m, platform, self.head, groups, "head_sel")',
       "tests/hw/lib/test_reorder_buffer_sim.py"),
    _m("acc-write-address-early", "core accumulators: a column's write address copy takes the read "
       "address of the next sum", "hw/accel/mv_core.py",
       'word_copies(m, platform, r_idx, O, "w_idx")', 'word_copies(m, platform, a_idx, O, "w_idx")',
       "tests/hw/accel/test_mv_core.py::test_core_rows_are_the_integer_mlp"),
    _m("sampler-ties-last", "sampler: a tied score replaces the best, so ties go to the highest index",
       "hw/step/sampler.py", "m.d.comb += wins.eq(first | (score > best))",
       "m.d.comb += wins.eq(first | (score >= best))", "tests/hw/step/test_sampler.py"),
    _m("noise-lane-mantissa-off", "noise lane: the mantissa's 8 bits taken one place low",
       "hw/step/noise_lane.py", "m.d.comb += log2_rd.addr.eq(norm[R - K:R])",
       "m.d.comb += log2_rd.addr.eq(norm[R - K - 1:R - 1])", "tests/hw/step/test_noise_lane.py"),
    _m("rmsnorm-no-eps", "RMSNorm: eps left out of the sum of squares",
       "hw/step/rmsnorm.py", "D.eq((D + r * r + self.eps)[:D_BITS])", "D.eq((D + r * r)[:D_BITS])",
       "tests/hw/step/test_rmsnorm.py"),
    _m("softmax-floor-not-rne", "softmax: the normalisation truncates instead of rounding to even",
       "hw/step/softmax_av.py", "up = (r2 > den) | ((r2 == den) & q[0])", "up = 0",
       "tests/hw/step/test_softmax_av.py"),
    _m("rope-ties-up", "RoPE rounds ties up, not to even",
       "hw/step/rope.py", "up = (r > (1 << (F - 1))) | ((r == (1 << (F - 1))) & q[0])",
       "up = r >= (1 << (F - 1))", "tests/hw/step/test_rope.py"),
    _m("residual-wraps", "residual: the sum wraps at 32 bits instead of saturating",
       "hw/step/residual.py", "with m.If(total > hi):", "with m.If(0):", "tests/hw/step/test_residual.py"),
    _m("qk-score-v-early", "scores: v travels a stage short of the dot product, so each score leaves with "
       "the next position's v", "hw/step/qk_score.py", "for stage in range(mac.latency):",
       "for stage in range(mac.latency - 1):", "tests/hw/step/test_qk_score.py"),
    _m("projection-runs-chained", "projection: a run's first beat is not marked, so each block adds onto the "
       "previous one", "hw/step/projection.py", "m.d.sync += first.eq(self.i.p.last)",
       "m.d.sync += first.eq(0)", "tests/hw/step/test_projection.py"),
    _m("tas-tap-strict", "TAS tap: replays only above the threshold (the spec replays at it)",
       "hw/step/tas_tap.py", "(total >= self.threshold)", "(total > self.threshold)",
       "tests/hw/step/test_tas_tap.py"),
    _m("axi-reader-crosses-4k", "AXI managers: bursts cut at max_burst only, so one may cross a 4 KB "
       "boundary",
       "hw/lib/axi.py",
       "m.d.comb += to_boundary.eq(to_boundary_max - addr[size:ceil_log2(BOUNDARY_BYTES)])",
       "m.d.comb += to_boundary.eq(to_boundary_max)", "tests/hw/lib/test_axi_reader.py"),
    _m("axi-reader-no-credit", "AXI reader: a burst is asked for whatever the buffer holds, so the words "
       "requested may outgrow it", "hw/lib/axi_reader.py", "(owed + n <= D)", "(owed + n <= 2 * D)",
       "tests/hw/lib/test_axi_reader.py"),
    _m("row-runs-first-row", "row runs: every run of a group reads the group's first row (the token head's "
       "guidance compares a row with itself)", "hw/step/row_runs.py", "xr.addr.eq((g + G * t) * K + k)",
       "xr.addr.eq(g * K + k)", "tests/hw/step/test_row_runs.py", "tests/hw/step/test_token_head.py"),
    _m("accel-given-replay-dropped", "accelerator with decisions given: the replay bit is not passed on, so "
       "every row computes", "hw/accel/accelerator.py", "given.replay.eq(r.replay)", "given.replay.eq(0)",
       "tests/hw/accel/test_accelerator_sim.py"),
    _m("axi-writer-wlast-early", "AXI writer: wlast a word early, so each burst ends before its last word",
       "hw/lib/axi_writer.py", "w_last.eq(beat == lens.r_data - 1)", "w_last.eq(beat + 2 == lens.r_data)",
       "tests/hw/lib/test_axi_writer.py"),
    _m("qkv-k-not-rotated", "q/k/v front: the second RoPE pass rotates q again, so k leaves as a rotated q",
       "hw/step/qkv.py", "rope.i.p.x.eq(Mux(sent == 0, q, k))", "rope.i.p.x.eq(Mux(sent == 0, q, q))",
       "tests/hw/step/test_qkv.py"),
    _m("attention-layer-no-marks", "attention layer: the history's marks are dropped, so no row has a TAS",
       "hw/step/attention_layer.py", "a.data.tas.eq(~own & self.kv.p.tas)", "a.data.tas.eq(0)",
       "tests/hw/step/test_attention_layer.py"),
    _m("decoder-layer-replay-dropped", "decoder layer: rows go to the MLP without their replay bit, so "
       "every row computes", "hw/step/decoder_layer.py", "x.replay.eq(dec.data.replay)", "x.replay.eq(0)",
       "tests/hw/step/test_decoder_layer.py"),
    _m("step-memory-no-mark", "step memory: the position one frame back is never marked, so FastCar "
       "never scores it", "hw/step/step_memory.py", "kv_tas.eq(this_pos == k.mark)", "kv_tas.eq(0)",
       "tests/hw/step/test_step_memory.py"),
    _m("axi-reader-rready-early", "AXI read manager: rready before the burst's record is in its queue, so "
       "a prompt memory's answer takes the record of the burst before", "hw/lib/axi_reader.py",
       "bus.rready.eq(bursts.r_rdy)", "bus.rready.eq(1)", "tests/hw/step/test_step_memory.py"),
    _m("channel-join-stale", "channel join: a group's constants are not taken again, so every group "
       "gets the first's", "hw/step/channel_join.py", "m.d.sync += got.eq(0)", "m.d.sync += got.eq(got)",
       "tests/hw/step/test_step_memory.py"),
    _m("weight-stream-head-once", "weight stream: the LM head's blocks read for the first prompt only, so "
       "the second prompt's logits get no weights", "hw/step/weight_stream.py", "with m.If(pr == PR - 1):",
       "with m.If(pr == 0):", "tests/hw/step/test_weight_stream.py"),
    _m("axi-read-mux-one-id", "AXI read mux: every burst asked for with ID 0, so every answer goes to the "
       "first manager", "hw/lib/axi_read_mux.py", "m.d.comb += bus.arid.eq(g)", "m.d.comb += bus.arid.eq(0)",
       "tests/hw/lib/test_axi_read_mux.py"),
]


def by_name(name: str) -> Mutant:
    for mu in MUTANTS:
        if mu.name == name:
            return mu
    raise KeyError(f"no mutant {name!r}; known: {[mu.name for mu in MUTANTS]}")


_IGNORE = shutil.ignore_patterns(".git", ".nox", "build", ".hypothesis", ".pytest_cache", ".ruff_cache",
                                 "*.egg-info", "__pycache__", "sim_build", "*.vcd", "*.fst")


def _pytest(copy: Path, tests, timeout: float, log: Path) -> tuple[str, float, str]:
    """Run ``tests`` in the copy: ``(outcome, seconds, first failing test or message)`` with outcome
    ``pass``, ``fail``, ``timeout`` or ``error`` (collection or usage error); pytest's output goes
    to ``log``."""
    env = dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
    # Without the unraisable-exception hook: a simulation coroutine left hanging by a failed
    # test is finalised at exit, and the hook can turn that into a pytest internal error.
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "--no-header", "-o", "addopts=",
           "-p", "no:cacheprovider", "-p", "no:unraisableexception", *tests]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        log.write_text(f"{e.stdout or ''}{e.stderr or ''}\ntimeout after {timeout:.0f} s\n")
        return "timeout", time.monotonic() - start, f"no result after {timeout:.0f} s"
    secs = time.monotonic() - start
    out = proc.stdout + proc.stderr
    log.write_text(out)
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, re.M)
    detail = failed[0] if failed else ""
    if proc.returncode == 0:
        return "pass", secs, ""
    if proc.returncode == 1 or (failed and proc.returncode != 5):
        return "fail", secs, detail
    tail = " | ".join(line for line in out.strip().splitlines()[-3:])
    return "error", secs, detail or f"pytest exit {proc.returncode}: {tail}"


def _slot_copy(source: Path, slot: str) -> Path:
    """The copy of ``source`` (the unchanged copy of the repository) that the jobs in ``slot``
    (:func:`sw.jobs.worker_slot`) mutate, made on first use beside it, whole or not at all. A mutation
    that a job killed mid-way left in it is undone first (``.mutant`` names its file)."""
    if not source.is_dir():
        raise RuntimeError(f"{source}: no such directory on this worker (the workers must share the files "
                           "of the machine that runs python -m tb.mutants)")
    copy = source.parent / f"slot-{slot}"
    if not copy.is_dir():
        part = Path(tempfile.mkdtemp(prefix=f".slot-{slot}.", dir=source.parent))
        shutil.copytree(source, part / "repo", ignore=_IGNORE, symlinks=True)
        os.replace(part / "repo", copy)
        part.rmdir()
    marker = copy / ".mutant"
    if marker.exists():
        path = marker.read_text()
        shutil.copyfile(source / path, copy / path)
        marker.unlink()
    return copy


def run_mutant(mu: Mutant, *, source: Path, timeout: float, logs: Path = OUT) -> dict:
    """One mutant's row of the report: its file changed in a copy of ``source`` that no other job
    running at the same time uses (:func:`_slot_copy`), its tests run there (pytest's output in
    ``logs / <name>.log``), the file restored."""
    from sw.jobs import worker_slot

    Path(logs).mkdir(parents=True, exist_ok=True)
    with worker_slot() as slot:
        copy = _slot_copy(source, slot)
        (copy / ".mutant").write_text(mu.mutation.path)
        original = mu.mutation.apply(copy)
        try:
            outcome, secs, detail = _pytest(copy, list(mu.tests), timeout, Path(logs) / f"{mu.name}.log")
        finally:
            (copy / mu.mutation.path).write_text(original)
            (copy / ".mutant").unlink()
    status = {"fail": "caught", "timeout": "caught (timeout)", "pass": "SURVIVED"}.get(outcome, "ERROR")
    return {"name": mu.name, "what": mu.what, "file": mu.mutation.path,
            "old": mu.mutation.old, "new": mu.mutation.new, "tests": list(mu.tests),
            "status": status, "caught_by": detail, "seconds": round(secs, 1)}


def run(mutants, *, timeout: float = 300, keep: bool = False, progress=print, jobs: int = 1,
        scheduler: str | None = None) -> dict:
    """Run the mutation check; returns the report (also written to ``build/mutants/report.json``).

    The baseline runs here; the mutants are jobs of :mod:`sw.jobs`: one after another here
    (``jobs=1``), ``jobs`` at a time on a local Dask cluster, or on the workers of the Dask scheduler
    at ``scheduler`` (``tcp://HOST:PORT``; they must share this machine's files, since each job copies
    the unchanged repository from the temporary directory). The report lists the mutants in the
    order given, whichever finished first."""
    import functools

    from sw.atomic import atomic_file
    from sw.jobs import JobRunner

    start = time.monotonic()
    # On the scheduler's workers: an unreachable scheduler is named before the baseline runs.
    with JobRunner(scheduler=scheduler, workers=jobs) as runner:
        tmp = Path(tempfile.mkdtemp(prefix="fastcar-mutants-"))
        copy = tmp / "repo"
        try:
            shutil.copytree(REPO, copy, ignore=_IGNORE, symlinks=True)
            check = subprocess.run([sys.executable, "-c", "import hw; print(hw.__file__)"], cwd=copy,
                                   env=dict(os.environ, PYTHONPATH=str(copy)), capture_output=True, text=True)
            if not check.stdout.strip().startswith(str(copy)):
                raise RuntimeError(f"the copy's hw package is not the one imported: {check.stdout.strip()}")
            for mu in mutants:                          # every mutation must still apply
                mu.mutation.mutated_source(copy)
            tests = sorted({t for mu in mutants for t in mu.tests})
            progress(f"baseline: {len(tests)} test selections on the unchanged copy ...")
            OUT.mkdir(parents=True, exist_ok=True)
            outcome, baseline, detail = _pytest(copy, tests, timeout * 2, OUT / "baseline.log")
            if outcome != "pass":
                raise RuntimeError(f"the tests do not pass on the unchanged copy ({outcome}: {detail}); "
                                   f"a mutant can only be judged against a green baseline")
            progress(f"baseline: pass ({baseline:.0f} s)")
            finished = []

            def show(name, row):
                finished.append(name)
                progress(f"[{len(finished)}/{len(mutants)}] {name}: {row['status']} {row['caught_by']} "
                         f"({row['seconds']:.0f} s)")

            one = functools.partial(run_mutant, source=copy, timeout=timeout, logs=OUT)
            results = runner.run(one, {mu.name: mu for mu in mutants}, progress=False, desc="mutants",
                                 on_result=show)
            rows = list(results.values())
        finally:
            if keep:
                progress(f"copies kept in {tmp}: repo unchanged, slot-* where the mutants ran")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    caught = sum(r["status"].startswith("caught") for r in rows)
    report = {"mutants": len(rows), "caught": caught, "baseline_seconds": round(baseline, 1),
              "seconds": round(time.monotonic() - start, 1), "results": rows}
    with atomic_file(OUT / "report.json") as f:
        Path(f).write_text(json.dumps(report, indent=2) + "\n")
    return report


def table(report: dict) -> str:
    """The report as a Markdown table."""
    lines = ["| mutant | file | status | caught by | s |", "|---|---|---|---|---|"]
    for r in report["results"]:
        lines.append(f"| {r['name']} | {r['file']} | {r['status']} | {r['caught_by']} | {r['seconds']} |")
    lines.append(f"\n{report['caught']} of {report['mutants']} mutants caught in {report['seconds']:.0f} s "
                 f"(build/mutants/report.json)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tb.mutants", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutants")
    ap.add_argument("--list", action="store_true", help="list the mutants and their tests, and exit")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per mutant (default 300)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy of the repository")
    ap.add_argument("--jobs", type=int, default=1,
                    help="mutants side by side on this machine, each in its own copy (default 1)")
    ap.add_argument("--scheduler", metavar="ADDRESS", default=None,
                    help="run the mutants on the workers of the Dask scheduler at ADDRESS (tcp://HOST:PORT), "
                         "which share this machine's files")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs {args.jobs}: at least 1")
    try:
        chosen = [by_name(n) for n in args.only] if args.only else MUTANTS
    except KeyError as e:
        ap.error(e.args[0])
    if args.list:
        for mu in chosen:
            mt = mu.mutation
            print(f"{mu.name}: {mu.what}\n    {mt.path}: {mt.old!r} -> {mt.new!r}\n"
                  f"    tests: {', '.join(mu.tests)}")
        return 0
    # A terminated run still removes its copy of the repository.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from sw.jobs import SchedulerError

    try:
        report = run(chosen, timeout=args.timeout, keep=args.keep, jobs=args.jobs, scheduler=args.scheduler)
    except (RuntimeError, MutationError, SchedulerError) as e:
        print(f"mutants: {e}", file=sys.stderr)
        return 2
    print(table(report))
    return 0 if report["caught"] == report["mutants"] else 1


if __name__ == "__main__":
    sys.exit(main())
