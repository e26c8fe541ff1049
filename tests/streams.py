"""Shared amaranth.sim helpers for ``amaranth.lib.stream`` ports (one place for the handshake)."""


async def stream_put(ctx, stream, bits: int):
    """Offer one beat (payload as raw bits) and wait until it is taken."""
    ctx.set(stream.valid, 1)
    ctx.set(stream.payload.as_value(), bits)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx, stream) -> int:
    """Take one beat and return its payload as raw bits."""
    ctx.set(stream.ready, 1)
    (bits,) = await ctx.tick().sample(stream.payload.as_value()).until(stream.valid)
    ctx.set(stream.ready, 0)
    return bits


async def load_words(ctx, stream, words):
    """Write configuration words into an always-ready stream, one per cycle."""
    for w in words:
        ctx.set(stream.valid, 1)
        ctx.set(stream.payload.as_value(), w)
        await ctx.tick()
    ctx.set(stream.valid, 0)
