"""Idle and backpressure patterns for cocotbext-axi ``set_pause_generator`` (one definition for
every testbench)."""

import random

__all__ = ["random_pauses"]


def random_pauses(seed, p):
    """Endless seeded pause pattern: each cycle pauses with probability ``p``."""
    rng = random.Random(seed)
    while True:
        yield rng.random() < p
