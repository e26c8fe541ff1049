"""Looking into elaborated designs: the hand-instantiated primitives a component makes on an ECP5,
and its memories."""

from amaranth.hdl import Instance
from amaranth.hdl._mem import MemoryInstance


class Ecp5Stub:
    """Enough of a platform for :func:`hw.lib.mult18.is_ecp5` to say yes."""
    family = "ecp5"


def instances(frag):
    """Every :class:`Instance` in ``frag`` and its subfragments."""
    if isinstance(frag, Instance):
        yield frag
    for sub, *_ in getattr(frag, "subfragments", []):
        yield from instances(sub)


def memories(frag, path=()):
    """``(path, memory)`` of every memory in ``frag`` and its subfragments."""
    if isinstance(frag, MemoryInstance):
        yield path, frag
    for sub, name, *_ in getattr(frag, "subfragments", []):
        yield from memories(sub, (*path, name))


def sync_read_memories(frag):
    return [path for path, mem in memories(frag) if any(p._domain != "comb" for p in mem._read_ports)]
