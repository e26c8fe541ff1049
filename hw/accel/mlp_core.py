"""MLP core: one hidden-channel chunk of the int8 SwiGLU MLP, on systolic GEMM tiles."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.gemm_tile import GemmTile
from hw.accel.swiglu_gate import SwigluGate, h_params_layout, lut_load_layout
from hw.lib.widths import index_bits, mul_const
from sw.config import TileConfig
from sw.golden import quant

__all__ = ["MlpCore", "job_layout", "partial_layout", "chunk_tiles"]


def chunk_tiles(d_model, d_ff, chunks, rows, cols):
    """The tile shapes of one chunk: gate/up ``d_model x d_ff/chunks``, down ``d_ff/chunks x d_model``."""
    if d_ff % chunks:
        raise ValueError(f"MlpCore: d_ff={d_ff} is not a multiple of chunks={chunks}")
    f = d_ff // chunks
    return (TileConfig(rows=rows, cols=cols, k_dim=d_model, n_dim=f),
            TileConfig(rows=rows, cols=cols, k_dim=f, n_dim=d_model))


def job_layout(d_model, layers, chunks, tag_bits):
    """One unit of work: the MLP input row ``x``, its layer, the hidden chunk and a tag."""
    return data.StructLayout({
        "x": data.ArrayLayout(signed(8), d_model),
        "layer": index_bits(layers),
        "chunk": index_bits(chunks),
        "tag": tag_bits,
    })


def partial_layout(cols, n_tiles, layers, tag_bits):
    """One slice of a chunk's partial down projection: ``cols`` int32 sums of output channels
    ``nt*cols ...``, ``last`` on the chunk's final slice, with the job's layer and tag."""
    return data.StructLayout({
        "acc": data.ArrayLayout(signed(quant.ACC_BITS), cols),
        "nt": index_bits(n_tiles),
        "last": 1,
        "layer": index_bits(layers),
        "tag": tag_bits,
    })


class MlpCore(wiring.Component):
    """``cores`` MLP cores sharing one copy of the weights; each computes hidden chunks.

    Chunk ``j`` of the SwiGLU MLP is the hidden channels ``j*F .. (j+1)*F`` with
    ``F = d_ff / chunks``::

        gate_j = requant(x @ wg[:, j])     up_j = requant(x @ wu[:, j])        (int8)
        h_j    = requant(lut[gate_j + 128] * up_j)                             (int8)
        z_j    = h_j @ wd[j, :]                                                (int32, d_model)

    and ``y = requant(sum_j z_j)`` is bit for bit :func:`sw.golden.quant.swiglu_int8`, because the sum
    of the int32 partial sums over the chunks is the full sum (integer addition, no rounding in
    between). The core returns ``z_j`` as int32 slices; :class:`hw.accel.reducer.Reducer` adds them
    up and requantises. Cutting a row into chunks is what lets one row keep several cores busy.

    Each core is a gate and an up :class:`hw.accel.gemm_tile.GemmTile` side by side, a
    :class:`hw.accel.swiglu_gate.SwigluGate` and a raw down tile. The tiles hold ``layers * chunks``
    weight banks, and the cores are lanes of the same tiles, so every PE memory is shared by all
    cores (two cores: the two ports of one block RAM). Any core can therefore run any chunk of any
    layer, which is what the dispatcher needs. The down tile of chunk ``j`` runs while the gate and
    up tiles work on chunk ``j + 1``; both take ``d_model * F / (rows * cols)`` cycles a chunk.

    Parameters
    ----------
    d_model, d_ff : int
    layers : int
        Layers whose weights are held.
    chunks : int
        Hidden chunks per row.
    rows, cols : int
        Systolic array geometry of each tile.
    cores : int
        Cores; ``i`` and ``o`` are arrays of streams when ``cores > 1``.
    gate_lanes : int
        Elements per cycle of the gating stage.
    tag_bits : int
        Width of the tag that travels with a job.

    Members
    -------
    i : In(stream.Signature(job_layout(...)))
    o : Out(stream.Signature(partial_layout(...)))
    wg, wu, wd, rqg, rqu : weight and requantisation loads of the tiles (bank = layer * chunks + j)
    lut : SiLU table loads; ``h`` : the gated product's ``(mult, shift)`` per layer
    """

    def __init__(self, d_model, d_ff, *, layers=1, chunks=1, rows=4, cols=4, cores=1,
                 gate_lanes=2, tag_bits=2):
        t_in, t_dn = chunk_tiles(d_model, d_ff, chunks, rows, cols)
        self._d, self._f = d_model, d_ff // chunks
        self._layers, self._chunks, self._cores, self._tag_bits = layers, chunks, cores, tag_bits
        if self._f % gate_lanes:
            raise ValueError(f"MlpCore: the chunk width {self._f} is not a multiple of "
                             f"gate_lanes={gate_lanes}")
        self._gate_lanes = gate_lanes
        banks = layers * chunks
        self._banks = banks
        self._t_in, self._t_dn = t_in, t_dn
        self._gate = GemmTile(t_in, lanes=cores, banks=banks)
        self._up = GemmTile(t_in, lanes=cores, banks=banks)
        self._down = GemmTile(t_dn, lanes=cores, banks=banks, raw=True)
        i = In(stream.Signature(job_layout(d_model, layers, chunks, tag_bits)))
        o = Out(stream.Signature(partial_layout(cols, t_dn.n_tiles, layers, tag_bits)))
        members = {
            "i": i if cores == 1 else i.array(cores),
            "o": o if cores == 1 else o.array(cores),
            "lut": In(stream.Signature(lut_load_layout(layers), always_ready=True)),
            "h": In(data.ArrayLayout(h_params_layout(), layers)),
        }
        for name, tile in (("g", self._gate), ("u", self._up), ("d", self._down)):
            members[f"w{name}"] = In(tile.signature.members["w"].signature.flip())
            if name != "d":
                members[f"rq{name}"] = In(tile.signature.members["rq"].signature.flip())
        super().__init__(members)

    @property
    def tiles(self):
        """``(gate/up tile, down tile)`` shapes of one chunk."""
        return self._t_in, self._t_dn

    @property
    def banks(self):
        return self._banks

    @property
    def chunk_cycles(self):
        """Issue cycles of one chunk in each of the two tile stages."""
        return self._t_in.cycles(1)

    def _port(self, name, c):
        port = getattr(self, name)
        return port if self._cores == 1 else port[c]

    def elaborate(self, platform):
        m = Module()
        m.submodules.gate = gate = self._gate
        m.submodules.up = up = self._up
        m.submodules.down = down = self._down
        for name, tile in (("g", gate), ("u", up), ("d", down)):
            wiring.connect(m, wiring.flipped(getattr(self, f"w{name}")), tile.w)
            if name != "d":
                wiring.connect(m, wiring.flipped(getattr(self, f"rq{name}")), tile.rq)
        for c in range(self._cores):
            self._core(m, c, gate, up, down)
        return m

    def _core(self, m, c, gate, up, down):
        def pick(port):
            return port if self._cores == 1 else port[c]

        i, o = self._port("i", c), self._port("o", c)
        bank_bits = index_bits(self._banks)
        act = SwigluGate(self._f, self._gate_lanes, layers=self._layers, tag_bits=bank_bits)
        m.submodules[f"act_{c}"] = act
        if c == 0:
            wiring.connect(m, wiring.flipped(self.lut), act.lut)
        else:
            m.d.comb += [act.lut.valid.eq(self.lut.valid), act.lut.p.eq(self.lut.p)]
        m.d.comb += act.params.eq(self.h)

        # Job fields wait in two small queues: (layer, bank) for the gating stage and the down
        # tile, (layer, tag) for the output. Jobs go through the core in order.
        lb = data.StructLayout({"layer": index_bits(self._layers), "bank": bank_bits})
        lt = data.StructLayout({"layer": index_bits(self._layers), "tag": self._tag_bits})
        m.submodules[f"q_act_{c}"] = q_act = fifo.SyncFIFOBuffered(width=lb.size, depth=16)
        m.submodules[f"q_out_{c}"] = q_out = fifo.SyncFIFOBuffered(width=lt.size, depth=16)

        g_i, u_i = pick(gate.i), pick(up.i)
        bank = Signal(bank_bits, name=f"bank_{c}")
        m.d.comb += bank.eq(mul_const(i.p.layer, self._chunks) + i.p.chunk)
        take = Signal(name=f"take_{c}")
        m.d.comb += [
            i.ready.eq(g_i.ready & u_i.ready & q_act.w_rdy & q_out.w_rdy),
            take.eq(i.valid & i.ready),
            g_i.p.x.eq(i.p.x), g_i.p.bank.eq(bank), u_i.p.x.eq(i.p.x), u_i.p.bank.eq(bank),
            g_i.valid.eq(take), u_i.valid.eq(take),
            q_act.w_en.eq(take), q_act.w_data.eq(Cat(i.p.layer, bank)),
            q_out.w_en.eq(take), q_out.w_data.eq(Cat(i.p.layer, i.p.tag)),
        ]
        # Gate and up rows leave their tiles in the same order; take them as a pair.
        g_o, u_o = pick(gate.o), pick(up.o)
        meta_a = Signal(lb, name=f"meta_a_{c}")
        m.d.comb += meta_a.eq(q_act.r_data)
        pair = Signal(name=f"pair_{c}")
        m.d.comb += [
            pair.eq(g_o.valid & u_o.valid & q_act.r_rdy),
            act.i.p.gate.eq(g_o.p), act.i.p.up.eq(u_o.p),
            act.i.p.layer.eq(meta_a.layer), act.i.p.tag.eq(meta_a.bank),
            act.i.valid.eq(pair),
            g_o.ready.eq(pair & act.i.ready), u_o.ready.eq(pair & act.i.ready),
            q_act.r_en.eq(pair & act.i.ready),
        ]
        d_i = pick(down.i)
        m.d.comb += [
            d_i.p.x.eq(act.o.p.h), d_i.p.bank.eq(act.o.p.tag),
            d_i.valid.eq(act.o.valid), act.o.ready.eq(d_i.ready),
        ]
        d_o = pick(down.o)
        meta_o = Signal(lt, name=f"meta_o_{c}")
        m.d.comb += [
            meta_o.eq(q_out.r_data),
            o.p.acc.eq(d_o.p.acc), o.p.nt.eq(d_o.p.nt), o.p.last.eq(d_o.p.last),
            o.p.layer.eq(meta_o.layer), o.p.tag.eq(meta_o.tag),
            o.valid.eq(d_o.valid), d_o.ready.eq(o.ready),
            q_out.r_en.eq(o.valid & o.ready & d_o.p.last),
        ]
