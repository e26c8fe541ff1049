"""Bit widths shared by the gateware (one definition, used by every block)."""

__all__ = ["index_bits"]


def index_bits(n: int) -> int:
    """Bits of an index into ``n`` items (at least 1, so a single item still has a field)."""
    return max(1, (n - 1).bit_length())
