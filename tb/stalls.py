"""Idle and backpressure patterns for cocotbext-axi ``set_pause_generator`` (one definition for
every testbench)."""

import random

__all__ = ["random_pauses"]


def random_pauses(seed, p, bursts=None):
    """Endless seeded pause pattern: each cycle pauses with probability ``p``.

    ``bursts = (q, lengths)`` adds long pauses: with probability ``q`` a cycle starts a pause of a
    length drawn from ``lengths`` (e.g. the gaps that line two cores' passes up exactly)."""
    rng = random.Random(seed)
    while True:
        if bursts is not None and rng.random() < bursts[0]:
            for _ in range(rng.choice(bursts[1])):
                yield True
        yield rng.random() < p
