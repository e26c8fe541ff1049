"""Looking into elaborated designs: the hand-instantiated primitives a component makes on an ECP5."""

from amaranth.hdl import Instance


class Ecp5Stub:
    """Enough of a platform for :func:`hw.lib.mult18.is_ecp5` to say yes."""
    family = "ecp5"


def instances(frag):
    """Every :class:`Instance` in ``frag`` and its subfragments."""
    if isinstance(frag, Instance):
        yield frag
    for sub, *_ in getattr(frag, "subfragments", []):
        yield from instances(sub)
