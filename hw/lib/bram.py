"""Block RAM with a registered read: an ECP5 ``DP16KD`` with its output register on the chip, a
model elsewhere."""

from amaranth import *
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hw.lib.mult18 import is_ecp5

__all__ = ["Bram", "BramPair", "BramReference", "BramTdp", "BramTdpPair", "BramTdpReference", "CONFIGS",
           "data_width_for", "initvals", "widest_data_width", "word_position"]

#: ``(DATA_WIDTH, words)`` of one DP16KD in true dual-port mode. The 36-bit configuration only
#: exists in pseudo-dual-port mode and is not offered here.
CONFIGS = ((1, 16384), (2, 8192), (4, 4096), (9, 2048), (18, 1024))
#: Rows of the block (18 bits each, 1,024 in all) per ``INITVAL_xx`` parameter, and the parameters.
ROWS_PER_INITVAL, INITVALS = 16, 64
#: Each row takes 20 bits of an ``INITVAL_xx``: 18 data bits, then 2 pad bits.
ROW_STRIDE = 20


def data_width_for(width: int, depth: int) -> int:
    """The narrowest DP16KD ``DATA_WIDTH`` that holds ``width``-bit words, if it holds ``depth``
    of them; :class:`ValueError` otherwise."""
    if not isinstance(width, int) or not 1 <= width <= 18:
        raise ValueError(f"Bram width must be an integer in 1..18, not {width!r}")
    if not isinstance(depth, int) or depth < 2:
        raise ValueError(f"Bram depth must be an integer of at least 2, not {depth!r}")
    dw, words = next((dw, words) for dw, words in CONFIGS if dw >= width)
    if (1 << ceil_log2(depth)) > words:
        raise ValueError(f"Bram of {width}-bit words holds at most {words} words in one DP16KD "
                         f"(DATA_WIDTH {dw}), not depth {depth!r}")
    return dw


def widest_data_width(depth: int) -> int | None:
    """The widest DP16KD ``DATA_WIDTH`` whose true dual-port configuration holds ``depth`` words
    (``None`` if none does): the fewest blocks side by side for a table of that depth."""
    return max((dw for dw, words in CONFIGS if words >= depth), default=None)


def word_position(addr: int, data_width: int) -> tuple[int, int]:
    """``(row, bit offset)`` of word ``addr`` in the block's 1,024 rows of 18 bits.

    A row is two 9-bit halves (the lower address in the lower half); in the 1-, 2- and 4-bit
    configurations each half holds 8 data bits (8, 4 or 2 words), lower addresses in lower bits,
    and its ninth bit is unused. This is the layout Yosys's own ECP5 block-RAM mapping
    writes (``share/lattice/brams_map_16kd.v`` with the word rule of ``passes/memory/memlib.md``),
    and ``tests/hw/lib/test_bram.py`` compares our ``INITVAL`` parameters with those Yosys infers.
    """
    per_row = 18 // data_width if data_width >= 9 else 2 * (8 // data_width)
    row, k = divmod(addr, per_row)
    if per_row == 1:
        return row, 0
    half = per_row // 2
    return row, (k // half) * 9 + (k % half) * data_width


def initvals(init, data_width: int) -> list[int]:
    """The 64 ``INITVAL_00`` .. ``INITVAL_3F`` values (320 bits each) for words ``init``."""
    rows = [0] * (ROWS_PER_INITVAL * INITVALS)
    for addr, value in enumerate(init):
        row, offset = word_position(addr, data_width)
        rows[row] |= value << offset
    return [sum(rows[i * ROWS_PER_INITVAL + j] << (j * ROW_STRIDE) for j in range(ROWS_PER_INITVAL))
            for i in range(INITVALS)]


class _OneBlock:
    """What :class:`Bram` and :class:`BramTdp` share: one DP16KD's shape, checked once."""

    def _setup(self, width: int, depth: int, init, primitive) -> None:
        name = type(self).__name__
        self._dw = data_width_for(width, depth)
        init = list(init)
        if len(init) > depth:
            raise ValueError(f"{name} init has {len(init)} words, more than depth {depth}")
        for addr, v in enumerate(init):
            if not isinstance(v, int) or not 0 <= v < (1 << width):
                raise ValueError(f"{name} init word {addr} must be an integer in 0..{(1 << width) - 1}, "
                                 f"not {v!r}")
        if primitive not in (None, True, False):
            raise TypeError(f"{name} primitive must be None, True or False, not {primitive!r}")
        self._width, self._depth, self._init, self._primitive_choice = width, depth, init, primitive
        self._abits = ceil_log2(depth)

    @property
    def width(self) -> int:
        return self._width

    @property
    def depth(self) -> int:
        return self._depth

    @property
    def data_width(self) -> int:
        """The ``DATA_WIDTH_A/B`` of the DP16KD."""
        return self._dw

    @property
    def init(self) -> list[int]:
        return list(self._init)

    def _instance(self, m, *, ada, adb, dia, dob, we_a, oce_a, ce_b, oce_b, doa=None) -> None:
        """The ``DP16KD`` instance: both ports on ``sync``, both read registers in ``OUTREG``, port
        B never writing; ``doa`` (port A's read data) only where port A reads."""
        ports = {}
        for i in range(14):
            ports[f"i_ADA{i}"] = ada[i]
            ports[f"i_ADB{i}"] = adb[i]
        for i in range(18):
            ports[f"i_DIA{i}"] = dia[i]
            ports[f"i_DIB{i}"] = Const(0)
            if doa is not None:
                ports[f"o_DOA{i}"] = doa[i]
            ports[f"o_DOB{i}"] = dob[i]
        for i in range(3):
            ports[f"i_CSA{i}"] = Const(0)
            ports[f"i_CSB{i}"] = Const(0)
        params = {f"p_INITVAL_{i:02X}": Const(v, 320)
                  for i, v in enumerate(initvals(self._init, self._dw))}
        m.submodules.ebr = Instance(
            "DP16KD",
            p_DATA_WIDTH_A=self._dw, p_DATA_WIDTH_B=self._dw,
            p_REGMODE_A="OUTREG", p_REGMODE_B="OUTREG",
            p_WRITEMODE_A="NORMAL", p_WRITEMODE_B="NORMAL",
            p_CSDECODE_A="0b000", p_CSDECODE_B="0b000",
            p_RESETMODE="SYNC", p_ASYNC_RESET_RELEASE="SYNC", p_GSR="DISABLED",
            i_CLKA=ClockSignal("sync"), i_CEA=Const(1), i_OCEA=oce_a, i_WEA=we_a, i_RSTA=Const(0),
            i_CLKB=ClockSignal("sync"), i_CEB=ce_b, i_OCEB=oce_b, i_WEB=Const(0), i_RSTB=Const(0),
            **params, **ports,
        )


class Bram(_OneBlock, wiring.Component):
    """Simple dual-port block RAM: write on port A, read on port B, read data registered twice.

    On an ECP5 platform this is one hand-instantiated ``DP16KD`` with ``REGMODE_B = "OUTREG"``,
    so that the read data leave through the block's output register: 0.92 ns clock-to-out
    instead of the 5.83 ns of ``NOREG``, the only mode Yosys's memory mapping emits (nor does
    Yosys move a fabric register after the read into the block). Everywhere else (simulation,
    Verilog for cocotb) it is the behavioural model below, cycle for cycle the same:
    ``tests/hw/lib/test_bram.py`` checks the model against a reference and ``tb/bram`` the two against
    each other.

    One component is one DP16KD: ``width`` and ``depth`` must fit one of its true dual-port
    configurations (:data:`CONFIGS`: 16384 x 1, 8192 x 2, 4096 x 4, 2048 x 9, 1024 x 18); the
    narrowest ``DATA_WIDTH`` of at least ``width`` bits is used. Wider or deeper memories take
    several components side by side (no cascading here).

    Timing: ``r_addr`` presented in cycle t with ``r_en`` high is captured by the block's address
    register at the end of t; the word is in the output register at the end of t + 1 if
    ``r_ce_out`` is high in t + 1, so ``r_data`` holds it in cycle t + 2 (``latency = 2``). With
    ``r_en`` low the read stage keeps its word; with ``r_ce_out`` low ``r_data`` holds, so a
    stalled pipeline lowers both. A write (``w_en`` high in cycle t) is visible to reads whose
    address is captured from cycle t + 1 on.

    Reading the word being written in the same cycle (``w_en`` and ``r_en`` high, ``w_addr ==
    r_addr``) is undefined on the DP16KD (a port collision); the model returns the old word.
    Do not rely on either.

    No resets: ``RSTA``/``RSTB`` are tied low and ``GSR`` is disabled. Both read registers start
    at 0 in the model; on the chip, do not use ``r_data`` before the first read has reached it.
    The model holds ``2 ** ceil_log2(depth)`` words, every address ``r_addr``/``w_addr`` can
    express, as the primitive does.

    Parameters
    ----------
    width : int
        Word width, 1 to 18.
    depth : int
        Number of words, at least 2 and at most what one DP16KD holds at that width.
    init : list of int
        Initial contents from address 0 (at most ``depth`` words, each ``0 <= v < 2 ** width``);
        the rest is 0. On the chip they are the ``INITVAL_xx`` parameters (:func:`initvals`).
    primitive : bool or None
        ``True`` forces the ``DP16KD`` instance, ``False`` the model; ``None`` (default) picks
        the instance exactly when the platform is an ECP5.

    Members
    -------
    w_addr : In(ceil_log2(depth))
    w_data : In(width)
    w_en : In(1)
        Writes ``w_data`` to ``w_addr`` at the end of the cycle.
    r_addr : In(ceil_log2(depth))
    r_en : In(1, init=1)
        Clock enable of the read stage (address register and array read).
    r_ce_out : In(1, init=1)
        Clock enable of the output register.
    r_data : Out(width)
    """

    latency = 2

    def __init__(self, width: int, depth: int, *, init=(), primitive: bool | None = None):
        self._setup(width, depth, init, primitive)
        super().__init__({
            "w_addr": In(self._abits), "w_data": In(width), "w_en": In(1),
            "r_addr": In(self._abits), "r_en": In(1, init=1), "r_ce_out": In(1, init=1),
            "r_data": Out(width),
        })

    def elaborate(self, platform):
        m = Module()
        use = is_ecp5(platform) if self._primitive_choice is None else self._primitive_choice
        if use:
            self._primitive(m)
        else:
            m.submodules.mem = mem = memory.Memory(shape=unsigned(self._width), depth=1 << self._abits,
                                                   init=self._init)
            wr = mem.write_port()
            # The read stage as an asynchronous read into a register of our own: the same as a
            # synchronous read port that returns old data, but with an initial value of 0 in the
            # exported Verilog too (a read port's data register has none there).
            rd = mem.read_port(domain="comb")
            stage = Signal(self._width, reset_less=True)
            out = Signal(self._width, reset_less=True)
            m.d.comb += [
                wr.addr.eq(self.w_addr), wr.data.eq(self.w_data), wr.en.eq(self.w_en),
                rd.addr.eq(self.r_addr),
                self.r_data.eq(out),
            ]
            with m.If(self.r_en):
                m.d.sync += stage.eq(rd.data)
            with m.If(self.r_ce_out):
                m.d.sync += out.eq(stage)
        return m

    def _primitive(self, m):
        # Word address in the high address bits; the low bits are 0, except ADA1..0, the byte
        # enables of an 18-bit write, which are both on.
        shift = {1: 0, 2: 1, 4: 2, 9: 3, 18: 4}[self._dw]
        ada, adb = Signal(14), Signal(14)
        dia, dob = Signal(18), Signal(18)
        m.d.comb += [
            ada.eq((self.w_addr << shift) | (0b11 if self._dw == 18 else 0)),
            adb.eq(self.r_addr << shift),
            dia.eq(self.w_data),
            self.r_data.eq(dob[:self._width]),
        ]
        self._instance(m, ada=ada, adb=adb, dia=dia, dob=dob, we_a=self.w_en, oce_a=Const(0),
                       ce_b=self.r_en, oce_b=self.r_ce_out)


class BramReference:
    """:class:`Bram`'s behaviour in Python, one clock edge at a time (for the tests of the model and
    of the ``DP16KD`` instance).

    ``r_data`` is what the port shows before the next edge; :meth:`edge` applies one rising edge
    with the inputs held during the cycle: the output register takes the read stage's word (when
    ``r_ce_out``), the read stage reads old data (when ``r_en``), then the write. Both registers
    start at 0.
    """

    def __init__(self, width, depth, init=()):
        words = 1 << (depth - 1).bit_length()
        self.mem = list(init) + [0] * (words - len(init))
        self.stage = 0
        self.r_data = 0

    def edge(self, w_en, w_addr, w_data, r_en, r_addr, r_ce_out):
        if r_ce_out:
            self.r_data = self.stage
        if r_en:
            self.stage = self.mem[r_addr]
        if w_en:
            self.mem[w_addr] = w_data


class BramPair(wiring.Component):
    """The model and the ``DP16KD`` instance side by side on the same inputs (for the equivalence
    test; the primitive needs a simulation model of ``DP16KD``)."""

    def __init__(self, width: int, depth: int, *, init=()):
        self._args = (width, depth)
        self._init = list(init)
        abits = ceil_log2(depth)
        data_width_for(width, depth)
        super().__init__({
            "w_addr": In(abits), "w_data": In(width), "w_en": In(1),
            "r_addr": In(abits), "r_en": In(1), "r_ce_out": In(1),
            "r_data_model": Out(width), "r_data_ebr": Out(width),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.model = model = Bram(*self._args, init=self._init, primitive=False)
        m.submodules.ebr = ebr = Bram(*self._args, init=self._init, primitive=True)
        for side in (model, ebr):
            m.d.comb += [side.w_addr.eq(self.w_addr), side.w_data.eq(self.w_data),
                         side.w_en.eq(self.w_en), side.r_addr.eq(self.r_addr),
                         side.r_en.eq(self.r_en), side.r_ce_out.eq(self.r_ce_out)]
        m.d.comb += [self.r_data_model.eq(model.r_data), self.r_data_ebr.eq(ebr.r_data)]
        return m


class BramTdp(_OneBlock, wiring.Component):
    """True dual-port block RAM: port A reads or writes, port B reads; both reads registered twice.

    On an ECP5 platform this is one hand-instantiated ``DP16KD`` in true dual-port mode with
    ``REGMODE_A = REGMODE_B = "OUTREG"`` and ``WRITEMODE_A = "NORMAL"``; everywhere else the
    behavioural model below, cycle for cycle the same (``tests/hw/lib/test_bram.py`` checks the model
    against :class:`BramTdpReference`, ``tb/bram`` the model against the instance). Both ports run
    on the ``sync`` clock and read on every cycle (no clock enables: the pipelines it serves never
    stall). Width and depth as for :class:`Bram`: one DP16KD, the narrowest ``DATA_WIDTH`` of at
    least ``width`` bits.

    Timing, per port: the address presented in cycle t is captured by the block at the end of t;
    the word is in the output register at the end of t + 1 and on ``a_rdata`` / ``b_rdata`` in
    cycle t + 2 (``latency = 2``). A write (``a_we`` high in cycle t) stores ``a_wdata`` at
    ``a_addr`` at the end of t; reads whose address is captured from cycle t + 1 on see it.

    Port A on a write cycle (``WRITEMODE_A = "NORMAL"``): the port does not read. Its read stage
    keeps the word of its last read, so ``a_rdata`` in cycle t + 2 repeats the word it showed in
    t + 1 (or the word of the last read before it, over several writes in a row).

    Port B reading the word port A writes in the same cycle is undefined on the DP16KD (a
    collision); the model returns the old word. Do not rely on either.

    No resets (``RSTA``/``RSTB`` low, ``GSR`` disabled); the model's read registers start at 0.

    Parameters
    ----------
    width : int
        Word width, 1 to 18.
    depth : int
        Number of words, at least 2 and at most what one DP16KD holds at that width (1,024 at
        18 bits).
    init : list of int
        Initial contents from address 0, as for :class:`Bram`.
    primitive : bool or None
        ``True`` forces the ``DP16KD`` instance, ``False`` the model; ``None`` (default) picks
        the instance exactly when the platform is an ECP5.

    Members
    -------
    a_addr : In(ceil_log2(depth))
    a_wdata : In(width)
    a_we : In(1)
        Writes ``a_wdata`` to ``a_addr`` at the end of the cycle (instead of reading it).
    a_rdata : Out(width)
    b_addr : In(ceil_log2(depth))
    b_rdata : Out(width)
    """

    latency = 2

    def __init__(self, width: int, depth: int, *, init=(), primitive: bool | None = None):
        self._setup(width, depth, init, primitive)
        super().__init__({
            "a_addr": In(self._abits), "a_wdata": In(width), "a_we": In(1), "a_rdata": Out(width),
            "b_addr": In(self._abits), "b_rdata": Out(width),
        })

    def elaborate(self, platform):
        m = Module()
        use = is_ecp5(platform) if self._primitive_choice is None else self._primitive_choice
        if use:
            self._primitive(m)
            return m
        m.submodules.mem = mem = memory.Memory(shape=unsigned(self._width), depth=1 << self._abits,
                                               init=self._init)
        wr = mem.write_port()
        # Asynchronous reads into registers of our own (see Bram): old data on a collision, and
        # port A's read stage holds on a write (WRITEMODE NORMAL).
        rd_a, rd_b = mem.read_port(domain="comb"), mem.read_port(domain="comb")
        stage_a = Signal(self._width, reset_less=True)
        stage_b = Signal(self._width, reset_less=True)
        out_a = Signal(self._width, reset_less=True)
        out_b = Signal(self._width, reset_less=True)
        m.d.comb += [
            wr.addr.eq(self.a_addr), wr.data.eq(self.a_wdata), wr.en.eq(self.a_we),
            rd_a.addr.eq(self.a_addr), rd_b.addr.eq(self.b_addr),
            self.a_rdata.eq(out_a), self.b_rdata.eq(out_b),
        ]
        with m.If(~self.a_we):
            m.d.sync += stage_a.eq(rd_a.data)
        m.d.sync += [stage_b.eq(rd_b.data), out_a.eq(stage_a), out_b.eq(stage_b)]
        return m

    def _primitive(self, m):
        # Word address in the high address bits; at 18 bits ADA1..0 are the byte enables of a
        # write (both on; ignored by a read).
        shift = {1: 0, 2: 1, 4: 2, 9: 3, 18: 4}[self._dw]
        ada, adb = Signal(14), Signal(14)
        dia, doa, dob = Signal(18), Signal(18), Signal(18)
        m.d.comb += [
            ada.eq((self.a_addr << shift) | (0b11 if self._dw == 18 else 0)),
            adb.eq(self.b_addr << shift),
            dia.eq(self.a_wdata),
            self.a_rdata.eq(doa[:self._width]),
            self.b_rdata.eq(dob[:self._width]),
        ]
        self._instance(m, ada=ada, adb=adb, dia=dia, dob=dob, doa=doa, we_a=self.a_we, oce_a=Const(1),
                       ce_b=Const(1), oce_b=Const(1))


class BramTdpReference:
    """:class:`BramTdp`'s behaviour in Python, one clock edge at a time.

    ``a_rdata`` / ``b_rdata`` are what the ports show before the next edge; :meth:`edge` applies
    one rising edge with the inputs held during the cycle: the output registers take the read
    stages' words, the read stages read old data (port A's only when it does not write), then the
    write. All registers start at 0.
    """

    def __init__(self, width, depth, init=()):
        words = 1 << (depth - 1).bit_length()
        self.mem = list(init) + [0] * (words - len(init))
        self.stage_a = self.stage_b = 0
        self.a_rdata = self.b_rdata = 0

    def edge(self, a_we, a_addr, a_wdata, b_addr):
        self.a_rdata, self.b_rdata = self.stage_a, self.stage_b
        if not a_we:
            self.stage_a = self.mem[a_addr]
        self.stage_b = self.mem[b_addr]
        if a_we:
            self.mem[a_addr] = a_wdata


class BramTdpPair(wiring.Component):
    """:class:`BramTdp`'s model and ``DP16KD`` instance side by side on the same inputs (for the
    equivalence test)."""

    def __init__(self, width: int, depth: int, *, init=()):
        self._args = (width, depth)
        self._init = list(init)
        abits = ceil_log2(depth)
        data_width_for(width, depth)
        super().__init__({
            "a_addr": In(abits), "a_wdata": In(width), "a_we": In(1), "b_addr": In(abits),
            "a_rdata_model": Out(width), "a_rdata_ebr": Out(width),
            "b_rdata_model": Out(width), "b_rdata_ebr": Out(width),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.model = model = BramTdp(*self._args, init=self._init, primitive=False)
        m.submodules.ebr = ebr = BramTdp(*self._args, init=self._init, primitive=True)
        for side in (model, ebr):
            m.d.comb += [side.a_addr.eq(self.a_addr), side.a_wdata.eq(self.a_wdata),
                         side.a_we.eq(self.a_we), side.b_addr.eq(self.b_addr)]
        m.d.comb += [self.a_rdata_model.eq(model.a_rdata), self.a_rdata_ebr.eq(ebr.a_rdata),
                     self.b_rdata_model.eq(model.b_rdata), self.b_rdata_ebr.eq(ebr.b_rdata)]
        return m
