"""The procedural text-to-video dataset (sw.model.data) and the patch VQ tokenizer (sw.model.tokenizer)."""

import numpy as np
import pytest

from sw.model import data
from sw.model.tokenizer import VQTokenizer, psnr

#: Module-scoped fixtures: with pytest-xdist (--dist loadgroup) these tests share one worker.
pytestmark = pytest.mark.xdist_group("test_data_tokenizer")


@pytest.fixture(scope="module")
def train_set():
    return data.make_dataset(96, seed=1, progress=False)


@pytest.fixture(scope="module")
def held_set():
    return data.make_dataset(48, seed=2, progress=False)


def sprite_mask(clip, prompt):
    colour, _, _ = data.parse_prompt(prompt)
    return (clip == np.array(data.COLOURS[colour], np.uint8)).all(-1)  # [T, H, W]


def centroids(mask):
    out = []
    for m in mask:
        ys, xs = np.nonzero(m)
        out.append((ys.mean(), xs.mean()))
    return np.array(out)


# --- prompts ---------------------------------------------------------------------------------------


def test_vocabulary_and_grammar():
    assert data.TEXT_VOCAB[0] == "<pad>"
    assert len(set(data.TEXT_VOCAB)) == len(data.TEXT_VOCAB)
    prompts = data.all_prompts()
    assert len(prompts) == len(set(prompts)) == len(data.COLOURS) * len(data.SHAPES) * len(data.DIRECTIONS)
    assert set(data.DEFAULT_PROMPTS) <= set(prompts) and len(data.DEFAULT_PROMPTS) == 4
    # The demo prompts cover four different colours, shapes and directions.
    parts = [data.parse_prompt(p) for p in data.DEFAULT_PROMPTS]
    for i in range(3):
        assert len({p[i] for p in parts}) == 4


def test_prompt_round_trip():
    for p in data.all_prompts():
        ids = data.encode_prompt(p)
        assert len(ids) == data.PROMPT_LEN
        assert all(0 <= i < len(data.TEXT_VOCAB) for i in ids)
        assert data.decode_prompt(ids) == p
        assert data.decode_prompt(np.array(ids)) == p
    assert data.encode_prompt("red square") == [data.TEXT_VOCAB.index("red"), data.TEXT_VOCAB.index("square"),
                                                0, 0]
    assert data.encode_prompt("") == [0] * data.PROMPT_LEN  # unconditional prompt
    assert data.decode_prompt([0] * data.PROMPT_LEN) == ""


def test_prompt_errors():
    with pytest.raises(ValueError, match="'purple'"):
        data.encode_prompt("purple square moves left")
    with pytest.raises(ValueError, match="more than PROMPT_LEN"):
        data.encode_prompt("red square moves left left")
    with pytest.raises(ValueError):
        data.decode_prompt([len(data.TEXT_VOCAB)])
    with pytest.raises(ValueError):
        data.parse_prompt("square red moves left")


# --- clips -----------------------------------------------------------------------------------------


def test_shapes_dtypes_and_prompts(train_set):
    videos, prompts = train_set
    assert videos.shape == (96, 8, 64, 64, 3) and videos.dtype == np.uint8
    assert len(prompts) == 96 and set(prompts) <= set(data.all_prompts())
    clip, p = data.make_clip(np.random.default_rng(0), frames=5, size=32)
    assert clip.shape == (5, 32, 32, 3) and clip.dtype == np.uint8 and p in data.all_prompts()


def test_determinism(train_set):
    videos, prompts = train_set
    v2, p2 = data.make_dataset(96, seed=1, progress=False)
    assert np.array_equal(videos, v2) and prompts == p2
    v3, p3 = data.make_dataset(10, seed=1, progress=False)  # prefix property
    assert np.array_equal(videos[:10], v3) and prompts[:10] == p3
    v4, _ = data.make_dataset(10, seed=5, progress=False)
    assert not np.array_equal(videos[:10], v4)
    a, pa = data.make_clip(np.random.default_rng(123))
    b, pb = data.make_clip(np.random.default_rng(123))
    assert np.array_equal(a, b) and pa == pb


def test_adjacent_frames_similar_not_identical(train_set):
    videos, _ = train_set
    diff = (videos[:, 1:] != videos[:, :-1]).any(-1).mean(axis=(2, 3))  # [n, T-1] changed pixel share
    assert (diff > 0).all(), "every frame must differ from the previous one"
    assert diff.max() < 0.12, "adjacent frames must be mostly the same"


def test_sprite_moves_as_prompted():
    rng = np.random.default_rng(7)
    for p in data.all_prompts():
        clip, got = data.make_clip(rng, prompt=p, occluder=False)
        assert got == p
        m = sprite_mask(clip, p)
        counts = m.sum(axis=(1, 2))
        assert counts.min() == counts.max() > 100, "the whole sprite is visible in every frame"
        c = centroids(m)
        step = np.diff(c, axis=0)
        dy, dx = data.DIRECTIONS[data.parse_prompt(p)[2]]
        np.testing.assert_allclose(step, np.tile([4 * dy, 4 * dx], (7, 1)), atol=1e-9)


def test_occluder_hides_part_of_the_sprite():
    rng = np.random.default_rng(11)
    hidden = 0
    for _ in range(40):
        clip, p = data.make_clip(rng, occluder=True)
        grey = (clip == np.array(data.OCCLUDER, np.uint8)).all(-1)
        assert grey.any(), "the occluder is drawn"
        assert (grey == grey[0]).all(), "the occluder is static"
        counts = sprite_mask(clip, p).sum(axis=(1, 2))
        hidden += counts.min() < counts.max()
    assert hidden >= 30, f"the occluder hides the sprite in only {hidden}/40 clips"
    share = np.mean([(data.make_dataset(200, seed=3, progress=False)[0][:, 0]
                      == np.array(data.OCCLUDER, np.uint8)).all(-1).any(axis=(1, 2))])
    assert 0.2 < share < 0.5


def test_long_clips_wrap_and_keep_direction():
    rng = np.random.default_rng(5)
    for p in data.DEFAULT_PROMPTS:
        clip, _ = data.make_clip(rng, frames=32, prompt=p, occluder=False)
        counts = sprite_mask(clip, p).sum(axis=(1, 2))
        assert counts.min() == counts.max(), "the sprite wraps around, it never leaves"
        assert data.describe_clip(clip)["prompt"] == p


def test_describe_clip_reads_prompt_back(train_set):
    videos, prompts = train_set
    hits = sum(data.describe_clip(v)["prompt"] == p for v, p in zip(videos, prompts, strict=True))
    assert hits >= 0.95 * len(prompts)
    blank = np.broadcast_to(np.array(data.BACKGROUND, np.uint8), (8, 64, 64, 3))
    d = data.describe_clip(blank)
    assert d["colour"] is None and d["prompt"] is None
    still = np.repeat(videos[:1, :1], 8, axis=1)[0]
    assert data.describe_clip(still)["direction"] is None


def test_save_grid_png(tmp_path, train_set):
    videos, prompts = train_set
    out = data.save_grid_png(videos[:2, :4], prompts[:2], tmp_path / "sub" / "g.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [f.name for f in out.parent.iterdir()] == ["g.png"], "no temporary file left behind"
    with pytest.raises(ValueError):
        data.save_grid_png(videos[:2], prompts[:1], tmp_path / "x.png")


# --- tokenizer -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tok(train_set):
    return VQTokenizer.fit(train_set[0], seed=0, progress=False)


def test_tokenizer_shapes_and_raster_order(tok, train_set):
    videos, _ = train_set
    assert tok.vocab_size == 512 and tok.codebook.dtype.is_floating_point
    assert tuple(tok.codebook.shape) == (512, 8 * 8 * 3)
    t = tok.encode(videos[:3])
    assert t.shape == (3, 8, 64) and t.dtype == np.int64
    assert tok.encode(videos[0, 0]).shape == (64,)
    assert tok.decode(t).shape == (3, 8, 64, 64, 3) and tok.decode(t).dtype == np.uint8
    # Token 0 is the background; one painted patch at (row 2, column 5) is token 2*8+5.
    frame = np.broadcast_to(np.array(data.BACKGROUND, np.uint8), (64, 64, 3)).copy()
    frame[16:24, 40:48] = data.COLOURS["red"]
    ft = tok.encode(frame)
    assert set(np.nonzero(ft)[0].tolist()) == {2 * 8 + 5}
    assert np.array_equal(tok.decode(ft), frame)


def test_tokenizer_reconstruction(tok, train_set, held_set):
    videos, _ = train_set
    held, _ = held_set
    assert np.array_equal(tok.decode(tok.encode(videos)), videos), "exact on the patches it was fit on"
    assert psnr(held, tok.decode(tok.encode(held))) > 30.0
    small = VQTokenizer.fit(videos[:, ::2], k=64, seed=0, iters=15, progress=False)  # the k-means path
    assert small.vocab_size == 64
    assert psnr(held, small.decode(small.encode(held))) > 24.0
    again = VQTokenizer.fit(videos[:, ::2], k=64, seed=0, iters=15, progress=False)
    assert np.array_equal(small.codebook.numpy(), again.codebook.numpy()), "fit is deterministic"


def test_tokenizer_save_load(tmp_path, tok, held_set):
    held, _ = held_set
    path = tok.save(tmp_path / "vq.safetensors")
    back = VQTokenizer.load(path)
    assert back.vocab_size == tok.vocab_size and back.patch == 8 and back.frame_size == (64, 64)
    assert np.array_equal(back.codebook.numpy(), tok.codebook.numpy())
    assert np.array_equal(back.encode(held[:4]), tok.encode(held[:4]))
    from safetensors.torch import save_file

    save_file({"codebook": tok.codebook}, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ValueError, match="not a"):
        VQTokenizer.load(tmp_path / "bad.safetensors")


def test_tokenizer_errors(tok):
    with pytest.raises(ValueError):
        tok.decode(np.full((64,), tok.vocab_size))
    with pytest.raises(ValueError):
        tok.encode(np.zeros((64, 64, 3), np.float32))
    with pytest.raises(ValueError):
        tok.encode(np.zeros((32, 32, 3), np.uint8))
