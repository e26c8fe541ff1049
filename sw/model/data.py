"""Procedural text-to-video data: one coloured sprite moving on a dark background.

Each clip shows one sprite (a shape in a colour) that moves in a straight line by a fixed step per
frame, and carries a four-word prompt that says what it shows::

    <colour> <shape> moves <direction>        e.g. "red square moves left"

Everything is pure numpy and deterministic from a seed. The design is meant to suit a small
auto-regressive model trained in minutes on a CPU, and to keep FastCar's premise (adjacent frames
are similar) true by construction:

* **Background**: one flat dark colour (:data:`BACKGROUND`), so background patches are a single
  VQ token that never changes between frames.
* **Sprite**: ``size // 4`` px (16 px at 64x64), hard edges, exact palette colours. With 8 px
  patches it covers 2x2 patches when aligned to the patch grid and 3x3 (partly) otherwise.
* **Motion**: ``size // 16`` px per frame (4 px at 64x64), so adjacent frames differ but overlap
  strongly. All positions are multiples of the step, so a sprite edge only ever sits at offset 0 or
  4 inside an 8 px patch; this keeps the number of distinct patches small (416), which is what lets
  the 512-entry VQ codebook reconstruct the frames exactly. The start is chosen so that the
  sprite stays fully inside the frame for the first 8 frames; longer clips wrap around the edges
  (the sprite leaves one side and comes back on the other), so the direction never changes.
* **Occlusion**: in a fraction :data:`OCCLUDER_PROB` of the clips a static grey bar
  (:data:`OCCLUDER`), aligned to the patch grid, lies across the sprite's path and is drawn in front
  of it. The occluder is not mentioned in the prompt.

Besides the dataset there is :func:`describe_clip`, which reads colour, shape and direction back
from frames (for example generated ones) so that prompt-following can be measured, and
:func:`save_grid_png` for previews. ``python -m sw.model.data --out DIR`` writes a preview grid.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np

from sw.atomic import atomic_file

# --------------------------------------------------------------------------------------------------
# Vocabulary and prompt grammar

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (230, 40, 40),
    "green": (40, 200, 60),
    "blue": (60, 100, 250),
    "yellow": (240, 220, 40),
    "white": (240, 240, 240),
    "magenta": (220, 50, 220),
}
SHAPES: tuple[str, ...] = ("square", "circle", "triangle", "cross")
# direction -> (dy, dx) unit step; image rows grow downwards.
DIRECTIONS: dict[str, tuple[int, int]] = {
    "left": (0, -1),
    "right": (0, 1),
    "up": (-1, 0),
    "down": (1, 0),
}
VERB = "moves"

BACKGROUND: tuple[int, int, int] = (20, 22, 34)
OCCLUDER: tuple[int, int, int] = (110, 110, 110)
OCCLUDER_PROB = 0.35

PAD = "<pad>"
TEXT_VOCAB: list[str] = [PAD, *COLOURS, *SHAPES, VERB, *DIRECTIONS]
PROMPT_LEN = 4
_WORD_ID = {w: i for i, w in enumerate(TEXT_VOCAB)}

DEFAULT_PROMPTS: list[str] = [
    "red square moves right",
    "green circle moves up",
    "blue triangle moves left",
    "yellow cross moves down",
]


def make_prompt(colour: str, shape: str, direction: str) -> str:
    """The prompt for one (colour, shape, direction) triple."""
    return f"{colour} {shape} {VERB} {direction}"


def parse_prompt(prompt: str) -> tuple[str, str, str]:
    """Split a prompt of the grammar into ``(colour, shape, direction)``; ValueError otherwise."""
    words = prompt.split()
    if (len(words) != 4 or words[0] not in COLOURS or words[1] not in SHAPES or words[2] != VERB
            or words[3] not in DIRECTIONS):
        raise ValueError(f"prompt {prompt!r} does not follow '<colour> <shape> {VERB} <direction>' "
                         f"with colour in {list(COLOURS)}, shape in {list(SHAPES)}, "
                         f"direction in {list(DIRECTIONS)}")
    return words[0], words[1], words[3]


def all_prompts() -> list[str]:
    """Every prompt the grammar allows (colour x shape x direction), in a fixed order."""
    return [make_prompt(c, s, d) for c, s, d in itertools.product(COLOURS, SHAPES, DIRECTIONS)]


#: Compositional held-out split: the (colour, shape, direction) triples whose indices into
#: :data:`COLOURS`, :data:`SHAPES` and :data:`DIRECTIONS` sum to 2 modulo 4. That is 24 of the 96
#: prompts, one direction of every (colour, shape) pair, so every word and every pair of words
#: is still seen in training but these 24 combinations never are. The default prompts are all
#: in the training split.
HELDOUT_RESIDUE = 2


def is_heldout(prompt: str) -> bool:
    """True for a prompt of the compositional held-out split (never seen in training)."""
    c, s, d = parse_prompt(prompt)
    return (list(COLOURS).index(c) + SHAPES.index(s) + list(DIRECTIONS).index(d)) % 4 == HELDOUT_RESIDUE


def heldout_prompts() -> list[str]:
    """The 24 prompts of the compositional held-out split, in :func:`all_prompts` order."""
    return [p for p in all_prompts() if is_heldout(p)]


def train_prompts() -> list[str]:
    """The 72 prompts the shipped model is trained on, in :func:`all_prompts` order."""
    return [p for p in all_prompts() if not is_heldout(p)]


def encode_prompt(prompt: str) -> list[int]:
    """Word ids of ``prompt``, right-padded with ``<pad>`` (id 0) to :data:`PROMPT_LEN`.

    Any word of :data:`TEXT_VOCAB` is accepted (the all-``<pad>`` prompt is the natural
    unconditional prompt for classifier-free guidance). Raises ValueError on an unknown word or a
    prompt longer than :data:`PROMPT_LEN` words.
    """
    words = prompt.split()
    for w in words:
        if w not in _WORD_ID:
            raise ValueError(f"unknown word {w!r} in prompt {prompt!r}; vocabulary: {TEXT_VOCAB}")
    if len(words) > PROMPT_LEN:
        raise ValueError(f"prompt {prompt!r} has {len(words)} words, more than PROMPT_LEN={PROMPT_LEN}")
    return [_WORD_ID[w] for w in words] + [_WORD_ID[PAD]] * (PROMPT_LEN - len(words))


def decode_prompt(ids) -> str:
    """The prompt string of word ids; ``<pad>`` ids are dropped."""
    out = []
    for i in np.asarray(ids).reshape(-1).tolist():
        if not 0 <= i < len(TEXT_VOCAB):
            raise ValueError(f"word id {i} outside the vocabulary of {len(TEXT_VOCAB)} words")
        if TEXT_VOCAB[i] != PAD:
            out.append(TEXT_VOCAB[i])
    return " ".join(out)


# --------------------------------------------------------------------------------------------------
# Rendering


def _geometry(size: int) -> tuple[int, int]:
    """(sprite side, step per frame) in px for a square frame of side ``size``."""
    if size < 32 or size % 16:
        raise ValueError(f"frame size must be a multiple of 16 and at least 32, not {size}")
    return size // 4, size // 16


def shape_mask(shape: str, side: int) -> np.ndarray:
    """Boolean mask [side, side] of one shape."""
    c = (side - 1) / 2
    y, x = np.mgrid[0:side, 0:side].astype(np.float64)
    if shape == "square":
        m = np.ones((side, side), bool)
    elif shape == "circle":
        m = (y - c) ** 2 + (x - c) ** 2 <= (side / 2) ** 2
    elif shape == "triangle":  # apex at the top, base on the bottom row
        m = np.abs(x - c) <= (y + 1) / 2
    elif shape == "cross":  # a plus sign with arms 3/8 of the side thick
        t = round(side * 3 / 8)
        lo = (side - t) // 2
        band = (np.arange(side) >= lo) & (np.arange(side) < lo + t)
        m = band[:, None] | band[None, :]
    else:
        raise ValueError(f"unknown shape {shape!r}; shapes: {SHAPES}")
    return m


_MASKS: dict[tuple[str, int], np.ndarray] = {}


def _mask(shape: str, side: int) -> np.ndarray:
    key = (shape, side)
    if key not in _MASKS:
        _MASKS[key] = shape_mask(shape, side)
    return _MASKS[key]


def render_clip(colour: str, shape: str, direction: str, y0: int, x0: int, frames: int = 8,
                size: int = 64, occluder: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """Render one clip: uint8 [frames, size, size, 3].

    The sprite's top-left corner is at ``(y0, x0)`` in frame 0 and moves by one step per frame in
    ``direction``, wrapping around the frame edges. ``occluder`` is ``(y, x, h, w)`` of a static bar
    drawn in front of the sprite, or None.
    """
    side, step = _geometry(size)
    m = _mask(shape, side)
    dy, dx = DIRECTIONS[direction]
    col = np.array(COLOURS[colour], np.uint8)
    out = np.empty((frames, size, size, 3), np.uint8)
    out[:] = np.array(BACKGROUND, np.uint8)
    ar = np.arange(side)
    for t in range(frames):
        ys = (y0 + dy * step * t + ar) % size
        xs = (x0 + dx * step * t + ar) % size
        view = out[t][np.ix_(ys, xs)]  # advanced indexing: a copy, written back below
        view[m] = col
        out[t][np.ix_(ys, xs)] = view
    if occluder is not None:
        oy, ox, oh, ow = occluder
        out[:, oy:oy + oh, ox:ox + ow] = np.array(OCCLUDER, np.uint8)
    return out


def _sample_layout(rng: np.random.Generator, direction: str, size: int, occluded: bool):
    """Start position on the step grid that keeps the sprite inside for 8 frames, and an occluder."""
    side, step = _geometry(size)
    travel = step * 7  # displacement over the first 8 frames
    free = np.arange(0, size - side + 1, step)  # any position on the step grid
    moving = np.arange(travel, size - side + 1, step)  # start far enough from the edge it heads to
    dy, dx = DIRECTIONS[direction]
    # For a move towards +x the start is mirrored: x0 in [0, size - side - travel].
    y0 = int(rng.choice(free if dy == 0 else (moving if dy < 0 else size - side - moving)))
    x0 = int(rng.choice(free if dx == 0 else (moving if dx < 0 else size - side - moving)))
    occ = None
    if occluded:
        patch = 8  # the tokenizer's patch: the bar covers whole patches
        thick, length = patch, min(size, 5 * patch)
        # Across the path, between the sprite's first and eighth positions, on the patch grid.
        along, across = (x0, y0) if dx != 0 else (y0, x0)
        d = dx if dx != 0 else dy
        c0, c1 = sorted((along + side // 2, along + d * travel + side // 2))
        cands = [p for p in range(0, size - thick + 1, patch) if c0 <= p + thick // 2 <= c1]
        a = int(rng.choice(cands))
        # Along the bar: cover the sprite's band entirely.
        lo = max(0, across + side - length)
        hi = min(across, size - length)
        b_cands = [p for p in range(0, size - length + 1, patch) if lo <= p <= hi] or [
            min(max(0, across - (length - side) // 2) // patch * patch, size - length)]
        b = int(rng.choice(b_cands))
        occ = (b, a, length, thick) if dx != 0 else (a, b, thick, length)
    return y0, x0, occ


def make_clip(rng: np.random.Generator, frames: int = 8, size: int = 64, *, prompt: str | None = None,
              occluder: bool | None = None) -> tuple[np.ndarray, str]:
    """One random clip and its prompt: (uint8 [frames, size, size, 3], prompt).

    ``prompt`` forces the content (otherwise colour, shape and direction are drawn uniformly);
    ``occluder`` forces the occluding bar on or off (otherwise on with probability
    :data:`OCCLUDER_PROB`). The start position (and the bar) are always drawn from ``rng``.
    """
    if frames < 1:
        raise ValueError(f"frames must be at least 1, not {frames}")
    if prompt is None:
        colour = list(COLOURS)[rng.integers(len(COLOURS))]
        shape = SHAPES[rng.integers(len(SHAPES))]
        direction = list(DIRECTIONS)[rng.integers(len(DIRECTIONS))]
    else:
        colour, shape, direction = parse_prompt(prompt)
    occluded = bool(rng.random() < OCCLUDER_PROB) if occluder is None else bool(occluder)
    y0, x0, occ = _sample_layout(rng, direction, size, occluded)
    clip = render_clip(colour, shape, direction, y0, x0, frames=frames, size=size, occluder=occ)
    return clip, make_prompt(colour, shape, direction)


def make_dataset(n: int, seed: int = 0, frames: int = 8, size: int = 64,
                 progress: bool = True, prompts: list[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """``n`` clips and prompts: (uint8 [n, frames, size, size, 3], list of n prompts).

    Clip ``i`` depends only on ``(seed, i)``, so a smaller dataset is a prefix of a larger one with
    the same seed. Use different seeds for training and held-out data. ``prompts`` restricts the
    content to those prompts (each clip draws one uniformly), e.g. :func:`train_prompts`.
    """
    from tqdm import tqdm

    if prompts is not None:
        if not prompts:
            raise ValueError("make_dataset: the prompt list is empty")
        for p in prompts:
            parse_prompt(p)
    videos = np.empty((n, frames, size, size, 3), np.uint8)
    out: list[str] = []
    for i in tqdm(range(n), desc="clips", disable=not progress, leave=False):
        rng = np.random.default_rng([seed, i])
        forced = None if prompts is None else prompts[int(rng.integers(len(prompts)))]
        videos[i], p = make_clip(rng, frames=frames, size=size, prompt=forced)
        out.append(p)
    prompts = out
    return videos, prompts


# --------------------------------------------------------------------------------------------------
# Reading a clip back (prompt-following check for generated videos)


def _colour_masks(frames: np.ndarray, tol: int = 60) -> np.ndarray:
    """bool [C, T, H, W]: pixel within ``tol`` (L-inf) of palette colour c."""
    pal = np.array(list(COLOURS.values()), np.int16)  # [C, 3]
    f = frames.astype(np.int16)
    return (np.abs(f[None] - pal[:, None, None, None, :]).max(-1) <= tol)


def describe_clip(frames: np.ndarray, min_pixels: int = 12) -> dict:
    """Read colour, shape and direction back from frames uint8 [T, H, W, 3].

    Returns a dict with ``colour``, ``shape``, ``direction`` (each None when it cannot be told:
    fewer than ``min_pixels`` sprite pixels, or no net motion), ``prompt`` (None unless all three
    are known) and ``centroids`` (float [T, 2] of (y, x), NaN where the sprite is not seen).

    Colour: the palette colour with the most matching pixels. Direction: the sign of the dominant
    axis of the summed frame-to-frame centroid displacement (taken modulo the frame size, so a
    wrap-around does not count as a jump). Shape: the best intersection-over-union of the
    shape templates placed over the sprite in the frame where most of it is visible.
    """
    frames = np.asarray(frames)
    t_len, size = frames.shape[0], frames.shape[1]
    res = {"colour": None, "shape": None, "direction": None, "prompt": None,
           "centroids": np.full((t_len, 2), np.nan)}
    masks = _colour_masks(frames)
    counts = masks.reshape(len(COLOURS), -1).sum(1)
    ci = int(counts.argmax())
    if counts[ci] < min_pixels:
        return res
    colour = list(COLOURS)[ci]
    res["colour"] = colour
    m = masks[ci]  # [T, H, W]
    ar = np.arange(size, dtype=np.float64)
    # Circular mean per axis: robust to a sprite split by the wrap-around.
    for t in range(t_len):
        if m[t].sum() < min_pixels:
            continue
        ang = 2 * np.pi * ar / size
        for ax, prof in ((0, m[t].sum(1)), (1, m[t].sum(0))):
            s, c = (prof * np.sin(ang)).sum(), (prof * np.cos(ang)).sum()
            res["centroids"][t, ax] = (np.arctan2(s, c) * size / (2 * np.pi)) % size
    cen = res["centroids"]
    d = np.diff(cen, axis=0)
    d = (d + size / 2) % size - size / 2
    d = d[~np.isnan(d).any(1)]
    if len(d):
        tot = d.sum(0)
        ax = int(np.abs(tot).argmax())
        if abs(tot[ax]) >= 1.0:
            for name, (dy, dx) in DIRECTIONS.items():
                if (dy, dx)[ax] == np.sign(tot[ax]):
                    res["direction"] = name
    # Shape from the frame with the most visible pixels.
    best_t = int(m.reshape(t_len, -1).sum(1).argmax())
    side, _ = _geometry(size)
    mt = m[best_t]
    ys, xs = np.nonzero(mt)
    # Unwrap around the centroid so a sprite split by an edge is contiguous.
    cy, cx = res["centroids"][best_t]
    ys = (ys - cy + size / 2) % size
    xs = (xs - cx + size / 2) % size
    crop = np.zeros((size, size), bool)
    crop[ys.astype(int), xs.astype(int)] = True
    y_lo, y_hi, x_lo, x_hi = ys.min(), ys.max(), xs.min(), xs.max()
    best, best_iou = None, -1.0
    for shape in SHAPES:
        tm = _mask(shape, side)
        for oy in range(int(max(0, y_hi - side + 1)), int(min(size - side, y_lo)) + 1):
            for ox in range(int(max(0, x_hi - side + 1)), int(min(size - side, x_lo)) + 1):
                win = crop[oy:oy + side, ox:ox + side]
                inter = (win & tm).sum()
                union = crop.sum() - win.sum() + tm.sum()
                iou = inter / union
                if iou > best_iou:
                    best, best_iou = shape, iou
    res["shape"] = best
    if res["direction"] is not None:
        res["prompt"] = make_prompt(colour, best, res["direction"])
    return res


# --------------------------------------------------------------------------------------------------
# Preview grid


def save_grid_png(frames_list, prompts, path, scale: float = 1.0, col_labels=None) -> Path:
    """Write a PNG grid: one row per clip (labelled with its prompt), one column per frame.

    ``frames_list`` is a sequence (or array) of uint8 clips [T, H, W, 3]; ``prompts`` the row
    labels. The file is written to a temporary name and moved into place, so a reader never sees
    a partial PNG. ``col_labels`` overrides the column titles (default ``t=0``, ``t=1``, ...).
    Returns the path.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    clips = [np.asarray(c) for c in frames_list]
    prompts = list(prompts)
    if len(clips) != len(prompts):
        raise ValueError(f"{len(clips)} clips but {len(prompts)} prompts")
    if not clips:
        raise ValueError("no clips to draw")
    rows, cols = len(clips), max(c.shape[0] for c in clips)
    fig = Figure(figsize=(scale * (1.2 * cols + 2.2), scale * 1.3 * rows), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    for r, (clip, prompt) in enumerate(zip(clips, prompts, strict=True)):
        for c in range(cols):
            ax = axes[r, c]
            ax.set_xticks([])
            ax.set_yticks([])
            if c < clip.shape[0]:
                ax.imshow(clip[c], interpolation="nearest")
            else:
                ax.axis("off")
            if r == 0:
                ax.set_title(f"t={c}" if col_labels is None else str(col_labels[c]), fontsize=8)
        axes[r, 0].set_ylabel(prompt, fontsize=8, rotation=0, ha="right", va="center")
    fig.subplots_adjust(left=2.0 / (1.2 * cols + 2.2), right=0.99, top=0.93, bottom=0.02,
                        wspace=0.05, hspace=0.08)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png")
    return path


def preview_clips(seed: int = 0, frames: int = 8, size: int = 64) -> tuple[np.ndarray, list[str]]:
    """One clip for each of :data:`DEFAULT_PROMPTS`, the second and fourth with the occluder."""
    clips = []
    for i, p in enumerate(DEFAULT_PROMPTS):
        clip, _ = make_clip(np.random.default_rng([seed, 10_000 + i]), frames, size, prompt=p,
                            occluder=bool(i % 2))
        clips.append(clip)
    return np.stack(clips), list(DEFAULT_PROMPTS)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m sw.model.data",
                                 description="Write a preview grid of dataset clips.")
    ap.add_argument("--out", default="build/data_preview", help="output directory")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--frames", type=int, default=8)
    args = ap.parse_args(argv)
    clips, prompts = preview_clips(args.seed, args.frames)
    print(save_grid_png(clips, prompts, Path(args.out) / "clips.png"))


if __name__ == "__main__":
    main()
