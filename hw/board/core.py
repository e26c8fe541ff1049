"""The board's logic without its clock: UART receiver, command bridge, transmitter and accelerator.

:class:`BoardCore` is what the board runs once the PLL has made the ``sync`` clock
(:class:`hw.board.top.BoardTop` adds the PLL and the pins), and what the board testbench
(``tb/board/``) simulates. :func:`link_format` describes its byte protocol for the host
(``hw/board/run.py``); ``docs/board.md`` documents it.
"""


import dataclasses
from dataclasses import dataclass

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.accel.accelerator import COUNTER_BITS, Accelerator
from hw.board.uart_bridge import Framing, UartBridge, assign_opcodes, framing
from hw.board.uart_rx import UartRx, check_clocks_per_bit
from hw.board.uart_tx import UartTx
from hw.lib.global_buffer import global_buffer
from hw.lib.skid import SkidBuffer
from sw.config import AccelConfig

__all__ = ["BoardCore", "LinkFormat", "link_format", "counter_names", "info_bytes", "parse_info",
           "INFO_MAGIC", "INFO_VERSION", "LED_NAMES"]

INFO_MAGIC = b"FCAR"
INFO_VERSION = 2
WRITES = ("cfg", "x")
READS = ("y",)
#: What each of the eight LEDs shows, LED 0 first.
LED_NAMES = ("heartbeat", "receiving", "sending", "command", "configured", "group in flight",
             "groups (bit 0)", "error")


def counter_names(cfg: AccelConfig) -> list[str]:
    """The accelerator's counters in the order of the status word, lowest bits first."""
    return (["group_cycles", "total_cycles", "groups", "rows_replayed", "rows_computed"]
            + [f"core_busy_{p}" for p in range(cfg.cores)])


def info_bytes(cfg: AccelConfig) -> bytes:
    """The ``INFO`` answer: :data:`INFO_MAGIC`, :data:`INFO_VERSION`, the number of
    :class:`AccelConfig` fields and each field as a 16-bit little-endian number, in field order."""
    values = [getattr(cfg, f.name) for f in dataclasses.fields(cfg)]
    if any(v > 0xFFFF for v in values):
        raise ValueError(f"accelerator config {cfg!r} has a field above 65535")
    return (INFO_MAGIC + bytes([INFO_VERSION, len(values)])
            + b"".join(v.to_bytes(2, "little") for v in values))


def parse_info(raw: bytes) -> AccelConfig:
    """The :class:`AccelConfig` of an ``INFO`` answer; :class:`ValueError` if it is not one."""
    raw = bytes(raw)
    if raw[:4] != INFO_MAGIC:
        raise ValueError(f"not a FastCar board: INFO begins {raw[:4]!r}, not {INFO_MAGIC!r}")
    if len(raw) < 6 or raw[4] != INFO_VERSION:
        raise ValueError(f"protocol version {raw[4] if len(raw) > 4 else None}, expected {INFO_VERSION}")
    names = [f.name for f in dataclasses.fields(AccelConfig)]
    if raw[5] != len(names) or len(raw) != 6 + 2 * len(names):
        raise ValueError(f"INFO describes {raw[5]} config fields in {len(raw)} bytes; this host knows "
                         f"{len(names)} ({names})")
    return AccelConfig(**{n: int.from_bytes(raw[6 + 2 * k:8 + 2 * k], "little") for k, n in enumerate(names)})


@dataclass(frozen=True)
class LinkFormat:
    """The byte protocol of a :class:`BoardCore` built for one :class:`AccelConfig`.

    Attributes
    ----------
    opcodes : dict of str to int
        ``info``, ``reset``, ``cfg``, ``x``, ``y`` and ``status`` (the counters).
    cfg, x, y : Framing
        How the beats of each stream travel (:class:`hw.board.uart_bridge.Framing`).
    counters : tuple of str
        Counter names in the order of the status word.
    counter_bits : int
        Width of each counter.
    """

    opcodes: dict
    cfg: Framing
    x: Framing
    y: Framing
    counters: tuple
    counter_bits: int

    @property
    def status_bytes(self) -> int:
        return -(-len(self.counters) * self.counter_bits // 8)

    def unpack_counters(self, raw: bytes) -> dict[str, int]:
        """Counter values by name from the bytes of a status answer."""
        word = int.from_bytes(raw, "little")
        mask = (1 << self.counter_bits) - 1
        return {name: (word >> (k * self.counter_bits)) & mask for k, name in enumerate(self.counters)}


def _streams(accel: Accelerator) -> dict:
    """The accelerator's stream signatures as seen from their producer, by name."""
    members = accel.signature.members
    return {name: (members[name].signature.flip() if members[name].flow == In else members[name].signature)
            for name in (*WRITES, *READS)}


def _accel_streams(cfg: AccelConfig) -> dict:
    accel = Accelerator(cfg)
    accel._MustUse__silence = True      # only its signature is wanted here, it is not elaborated
    return _streams(accel)


def link_format(cfg: AccelConfig) -> LinkFormat:
    """The :class:`LinkFormat` of the board built for ``cfg`` (the host's view of the protocol)."""
    streams = _accel_streams(cfg)
    names = counter_names(cfg)
    return LinkFormat(opcodes=assign_opcodes(WRITES, READS, True),
                      cfg=framing(streams["cfg"]), x=framing(streams["x"]), y=framing(streams["y"]),
                      counters=tuple(names), counter_bits=COUNTER_BITS)


class BoardCore(wiring.Component):
    """UART bridge and accelerator: everything of the board top except its clock and pins.

    :class:`hw.board.uart_rx.UartRx` -> :class:`hw.board.uart_bridge.UartBridge` ->
    :class:`hw.board.uart_tx.UartTx`,
    with the bridge driving the :class:`hw.accel.accelerator.Accelerator`'s ``cfg`` and ``x`` streams,
    taking its ``y`` stream and reading its counters (:func:`counter_names`). The bridge's
    ``RESET`` command resets the accelerator (its weight memories keep their contents).

    Parameters
    ----------
    cfg : AccelConfig
        The accelerator to build.
    clocks_per_bit : int
        ``sync`` cycles per UART bit (clock frequency / baud rate).
    timeout : int or None
        Cycles after which the bridge abandons a stalled command (None: never).
    hold_bits : int
        The activity LEDs stay on for ``2**hold_bits`` cycles after a byte, and the heartbeat
        LED toggles every ``2**hold_bits`` cycles.

    Members
    -------
    rx : In(1, init=1)
        UART line from the host.
    tx : Out(1, init=1)
        UART line to the host.
    leds : Out(8)
        Status, LED 0 first: :data:`LED_NAMES`.
    """

    rx: In(1, init=1)
    tx: Out(1, init=1)
    leds: Out(8)

    def __init__(self, cfg: AccelConfig, clocks_per_bit: int, *, timeout: int | None = None,
                 hold_bits: int = 22):
        if not isinstance(cfg, AccelConfig):
            raise TypeError(f"expected an AccelConfig, not {cfg!r}")
        if not isinstance(hold_bits, int) or hold_bits < 1:
            raise ValueError(f"hold_bits must be a positive integer, not {hold_bits!r}")
        self._cfg = cfg
        self._clocks_per_bit = check_clocks_per_bit(clocks_per_bit)
        self._timeout = timeout
        self._hold_bits = hold_bits
        super().__init__()

    @property
    def config(self) -> AccelConfig:
        return self._cfg

    @property
    def clocks_per_bit(self) -> int:
        return self._clocks_per_bit

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        accel = Accelerator(cfg)
        streams = _streams(accel)
        names = counter_names(cfg)
        m.submodules.rx = rx = UartRx(self._clocks_per_bit)
        m.submodules.tx = tx = UartTx(self._clocks_per_bit)
        m.submodules.bridge = bridge = UartBridge(
            {n: streams[n] for n in WRITES}, {n: streams[n] for n in READS},
            status_bits=len(names) * COUNTER_BITS, info=info_bytes(cfg), timeout=self._timeout)
        # The accelerator runs in its own domain on the same clock, whose only reset is one
        # flip-flop: set while ``sync`` is in reset and for one cycle, two cycles after the bridge's
        # ``soft_reset`` (a flop itself). Its ~25,000 loads (``python -m hw.flow.fanout``) then hang
        # off a single registered net on a global buffer, not off a LUT that ORs two resets.
        # Two flip-flops: the second has only the buffer as its load, so the placer can put it
        # beside the DCCA (one flop was placed 93 tiles from it, 8.7 ns in the estimate).
        accel_rst_0 = Signal(init=1)
        accel_rst = Signal(init=1)
        m.d.sync += [accel_rst_0.eq(bridge.soft_reset), accel_rst.eq(accel_rst_0)]
        m.domains.accel = cd_accel = ClockDomain("accel", local=True)
        m.d.comb += [cd_accel.clk.eq(ClockSignal("sync")),
                     cd_accel.rst.eq(global_buffer(m, platform, accel_rst, "accel_rst_buf"))]
        m.submodules.accel = DomainRenamer("accel")(accel)

        m.d.comb += [rx.rx.eq(self.rx), self.tx.eq(tx.tx), bridge.rx_error.eq(rx.frame_error | rx.overflow)]
        wiring.connect(m, rx.o, bridge.i)
        wiring.connect(m, bridge.o, tx.i)
        for name in WRITES:
            wiring.connect(m, getattr(bridge, name), getattr(accel, name))
        # The output rows reach the bridge through a register slice (in the accelerator's domain,
        # so a soft reset empties it): the reorder buffer's head select and the bridge's answer
        # shift register are then two paths from registers, not one across the die. It is
        # outside the accelerator, whose cycle counters end at its own ``y``.
        y_slice = m.submodules.y_slice = DomainRenamer("accel")(
            SkidBuffer(accel.y.p.shape(), mode="forward"))
        wiring.connect(m, accel.y, y_slice.i)
        wiring.connect(m, y_slice.o, bridge.y)
        counters = [accel.core_busy[int(n.rsplit("_", 1)[1])] if n.startswith("core_busy_")
                    else getattr(accel, n) for n in names]
        # The status word reaches the bridge through a register of its own (no enable), so that
        # the counters can sit beside the accelerator's events and the bridge's status shift
        # register beside the bridge: the snapshot is the counters of the cycle before.
        status_q = Signal(len(Cat(*counters)), name="status_q", reset_less=True)
        m.d.sync += status_q.eq(Cat(*counters))
        m.d.comb += bridge.status.eq(status_q)

        # --- status LEDs ------------------------------------------------------------------------
        hold = self._hold_bits
        beat = Signal(hold + 1)
        m.d.sync += beat.eq(beat + 1)

        def stretched(event, name):
            left = Signal(hold, name=f"{name}_hold")
            with m.If(event):
                m.d.sync += left.eq(-1)
            with m.Elif(left != 0):
                m.d.sync += left.eq(left - 1)
            return left != 0

        # The LEDs follow registered copies of the handshakes, so that no accelerator handshake
        # is routed across the die to them.
        configured, in_group, error = Signal(), Signal(), Signal()
        cfg_go, x_go, y_end = Signal(), Signal(), Signal()
        m.d.sync += [cfg_go.eq(accel.cfg.valid & accel.cfg.ready), x_go.eq(accel.x.valid & accel.x.ready),
                     y_end.eq(accel.y.valid & accel.y.ready & accel.y.p.last)]
        with m.If(cfg_go):
            m.d.sync += configured.eq(1)
        with m.If(x_go):
            m.d.sync += in_group.eq(1)
        with m.If(y_end):
            m.d.sync += in_group.eq(0)
        with m.If(bridge.flags != 0):
            m.d.sync += error.eq(1)
        with m.If(bridge.soft_reset):
            m.d.sync += [configured.eq(0), in_group.eq(0), error.eq(0)]
        m.d.comb += self.leds.eq(Cat(
            beat[-1],
            stretched(rx.o.valid & rx.o.ready, "rx"),
            stretched(tx.i.valid & tx.i.ready, "tx"),
            bridge.busy, configured, in_group, accel.groups[0], error))
        return m
