"""VQ tokenizer over image patches: k-means codebook, nearest-entry encoding, no downloads.

A frame of H x W pixels is cut into P x P patches (P = 8), read in raster order, and each patch
(P*P*3 values, in (row, column, channel) order) is replaced by the index of the nearest codebook
entry (squared Euclidean distance in 0..255 pixel units). A 64x64 frame becomes 64 tokens.

Choice of K = 512 (:data:`DEFAULT_K`): the frames of :mod:`sw.model.data` are a flat background, a
patch-aligned grey occluder and hard-edged sprites in six exact colours whose edges sit at offset 0
or 4 inside a patch, so the whole dataset has only about 416 distinct 8x8 patches (the same 416 in
every seed and clip length tried). With K >= that number the codebook simply holds every distinct
patch and encode -> decode is lossless, so any artefact in a generated video is the model's, not
the tokenizer's (useful when FastCar's replay drift is measured in pixels). K = 256 would force
merges of real edge patches: ~26 dB on sprite pixels, with visibly ragged edges and colour bleeding.
512 is the next power of two; the ~100 spare entries are copies of the background entry (id 0)
that :meth:`VQTokenizer.encode` never emits, and a larger output layer costs a small model little.

Entries are sorted by how often they occur in the fitting sample, so token 0 is the background
and the low ids are the solid sprite and occluder patches.

Fitting runs k-means (k-means++ initialisation, Lloyd iterations, both in torch) on the *distinct*
patches of a sample, each weighted by the square root of how often it occurs. Deduplication keeps
the flat background (about 80 % of all patches) from swamping the sample; the square-root weight
still lets frequent patches pull their centroid harder than one-off ones.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from sw.atomic import atomic_file

FORMAT = "fastcar-vq-v1"
DEFAULT_K = 512


def _patchify(frames: np.ndarray, p: int) -> np.ndarray:
    """[..., H, W, 3] -> [..., (H/p)*(W/p), p*p*3], raster order of patches."""
    *lead, h, w, c = frames.shape
    if h % p or w % p or c != 3:
        raise ValueError(f"frames of shape {frames.shape}: need [..., H, W, 3] with H, W multiples of {p}")
    x = frames.reshape(*lead, h // p, p, w // p, p, c)
    n = len(lead)
    x = x.transpose(*range(n), n, n + 2, n + 1, n + 3, n + 4)
    return x.reshape(*lead, (h // p) * (w // p), p * p * c)


def _unpatchify(patches: np.ndarray, p: int, h: int, w: int) -> np.ndarray:
    """[..., (H/p)*(W/p), p*p*3] -> [..., H, W, 3]."""
    *lead, _, _ = patches.shape
    n = len(lead)
    x = patches.reshape(*lead, h // p, w // p, p, p, 3)
    x = x.transpose(*range(n), n, n + 2, n + 1, n + 3, n + 4)
    return x.reshape(*lead, h, w, 3)


_HASH_MULT = np.random.default_rng(0x5EED).integers(1, 2**63, size=64, dtype=np.uint64) | np.uint64(1)


def _unique_rows(rows: np.ndarray, chunk: int = 1 << 18) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct rows of a uint8 matrix: (unique rows, counts, inverse index), exactly.

    Rows are hashed to 64 bits (a fast path that avoids sorting long byte strings); the result is
    checked against the input and, on a hash collision, recomputed with a byte-wise np.unique.
    """
    rows = np.ascontiguousarray(rows)
    n, d = rows.shape
    if d % 8 == 0 and d // 8 <= len(_HASH_MULT):
        words = rows.view(np.uint64)
        h = np.zeros(n, np.uint64)
        for j in range(d // 8):
            h += words[:, j] * _HASH_MULT[j]  # wraps modulo 2**64
        _, first, inv, counts = np.unique(h, return_index=True, return_inverse=True, return_counts=True)
        uniq = rows[first]
        if all(np.array_equal(uniq[inv[i:i + chunk]], rows[i:i + chunk]) for i in range(0, n, chunk)):
            return uniq, counts, inv.reshape(-1)
    u, inv, counts = np.unique(rows.view(np.dtype((np.void, d))).ravel(), return_inverse=True,
                               return_counts=True)
    return np.frombuffer(u.tobytes(), np.uint8).reshape(-1, d), counts, inv.reshape(-1)


def _nearest(x: torch.Tensor, codebook: torch.Tensor, c2: torch.Tensor, chunk: int = 65536) -> torch.Tensor:
    """Index of the nearest codebook row for each row of x (float32), in chunks."""
    out = torch.empty(x.shape[0], dtype=torch.int64)
    for i in range(0, x.shape[0], chunk):
        xb = x[i:i + chunk]
        # ||x||^2 is the same for every entry, so argmin(||c||^2 - 2 x.c) is the nearest entry.
        d = c2[None, :] - 2.0 * (xb @ codebook.T)
        out[i:i + chunk] = d.argmin(1)
    return out


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of two uint8 arrays (peak 255) over all elements."""
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0 ** 2 / mse))


class VQTokenizer:
    """Patch VQ tokenizer.

    Parameters
    ----------
    codebook : float32 [K, P*P*3]
        Codebook entries in pixel units (0..255), each a patch in (row, column, channel) order.
    patch : int
        Patch side P.
    frame_size : (int, int)
        (H, W) of the frames the tokenizer is meant for; :meth:`decode` rebuilds frames of this size.
    """

    def __init__(self, codebook, patch: int = 8, frame_size: tuple[int, int] = (64, 64)):
        cb = torch.as_tensor(np.asarray(codebook, np.float32)).contiguous()
        if cb.ndim != 2 or cb.shape[1] != patch * patch * 3:
            raise ValueError(f"codebook shape {tuple(cb.shape)} does not match patch {patch} "
                             f"(need [K, {patch * patch * 3}])")
        h, w = (int(v) for v in frame_size)
        if h % patch or w % patch:
            raise ValueError(f"frame size {h}x{w} is not a multiple of the patch {patch}")
        self.codebook = cb
        self.patch = int(patch)
        self.frame_size = (h, w)
        self._c2 = (cb * cb).sum(1)

    @property
    def vocab_size(self) -> int:
        """Number of codebook entries K (token ids are 0..K-1)."""
        return int(self.codebook.shape[0])

    @property
    def tokens_per_frame(self) -> int:
        h, w = self.frame_size
        return (h // self.patch) * (w // self.patch)

    @property
    def grid(self) -> tuple[int, int]:
        """(rows, columns) of the token grid of one frame."""
        h, w = self.frame_size
        return h // self.patch, w // self.patch

    def encode(self, frames) -> np.ndarray:
        """uint8 frames [..., H, W, 3] -> int64 tokens [..., (H/P)*(W/P)] in raster order."""
        frames = np.asarray(frames)
        if frames.dtype != np.uint8:
            raise ValueError(f"frames must be uint8, not {frames.dtype}")
        if tuple(frames.shape[-3:-1]) != self.frame_size:
            raise ValueError(f"frames of size {frames.shape[-3:-1]} but the tokenizer is for "
                             f"{self.frame_size}")
        pt = _patchify(frames, self.patch)
        lead = pt.shape[:-1]
        # The distinct patches are few (a flat background, exact colours): search only those.
        uniq, _, inv = _unique_rows(pt.reshape(-1, pt.shape[-1]))
        ids = _nearest(torch.from_numpy(uniq).float(), self.codebook, self._c2).numpy()
        return ids[inv].reshape(lead)

    def decode(self, tokens) -> np.ndarray:
        """int tokens [..., (H/P)*(W/P)] -> uint8 frames [..., H, W, 3]."""
        tok = np.asarray(tokens, np.int64)
        if tok.shape[-1] != self.tokens_per_frame:
            raise ValueError(f"last axis has {tok.shape[-1]} tokens, a frame has {self.tokens_per_frame}")
        if tok.size and (tok.min() < 0 or tok.max() >= self.vocab_size):
            raise ValueError(f"token ids outside 0..{self.vocab_size - 1}")
        cb = np.clip(np.rint(self.codebook.numpy()), 0, 255).astype(np.uint8)
        return _unpatchify(cb[tok], self.patch, *self.frame_size)

    # ----------------------------------------------------------------------------------------------

    @classmethod
    def fit(cls, frames, k: int = DEFAULT_K, seed: int = 0, iters: int = 40, progress: bool = True,
            patch: int = 8, max_patches: int = 400_000) -> VQTokenizer:
        """Fit a K-entry codebook by k-means on patches of ``frames`` (uint8 [..., H, W, 3]).

        At most ``max_patches`` patches (a random sample, fixed by ``seed``) are used; they are
        deduplicated and weighted by sqrt(count). k-means++ initialisation, then ``iters`` Lloyd
        iterations; an entry that loses all its patches is moved to the patch that is worst
        represented. If the sample has no more than K distinct patches, they all become entries
        (the rest of the codebook repeats entry 0) and reconstruction of those is exact. Entries are
        sorted by descending weight (count of the distinct patches they hold), ties by content.
        """
        from tqdm import tqdm

        frames = np.asarray(frames)
        if frames.dtype != np.uint8:
            raise ValueError(f"frames must be uint8, not {frames.dtype}")
        h, w = frames.shape[-3:-1]
        pt = _patchify(frames, patch)
        pt = pt.reshape(-1, pt.shape[-1])
        rng = np.random.default_rng(seed)
        if pt.shape[0] > max_patches:
            pt = pt[np.sort(rng.choice(pt.shape[0], max_patches, replace=False))]
        uniq, counts, _ = _unique_rows(pt)
        x = torch.from_numpy(uniq.astype(np.float32))
        wts = torch.from_numpy(np.sqrt(counts).astype(np.float32))
        n = x.shape[0]
        gen = torch.Generator().manual_seed(seed)
        if n <= k:
            order = np.lexsort((*uniq.T[::-1], -counts))  # by count, ties by content
            cb = uniq[order].astype(np.float32)
            cb = np.concatenate([cb, np.repeat(cb[:1], k - n, axis=0)])
            if progress:
                print(f"vq fit: {n} distinct patches <= K={k}, codebook is exact")
            return cls(cb, patch=patch, frame_size=(h, w))

        x2 = (x * x).sum(1)

        def sqdist(c: torch.Tensor) -> torch.Tensor:  # [n, len(c)]
            return (x2[:, None] - 2.0 * (x @ c.T) + (c * c).sum(1)[None, :]).clamp_min_(0)

        # k-means++ (weighted)
        first = int(torch.multinomial(wts, 1, generator=gen))
        cent = [x[first]]
        best = sqdist(x[first:first + 1])[:, 0]
        bar = tqdm(total=k + iters, desc="vq fit", disable=not progress, leave=False)
        bar.update(1)
        for _ in range(1, k):
            p = best * wts
            if float(p.sum()) <= 0:
                idx = int(torch.randint(n, (1,), generator=gen))
            else:
                idx = int(torch.multinomial(p, 1, generator=gen))
            cent.append(x[idx])
            best = torch.minimum(best, sqdist(x[idx:idx + 1])[:, 0])
            bar.update(1)
        c = torch.stack(cent)
        # Lloyd
        for _ in range(iters):
            d = sqdist(c)
            dmin, a = d.min(1)
            sums = torch.zeros_like(c).index_add_(0, a, x * wts[:, None])
            mass = torch.zeros(k).index_add_(0, a, wts)
            new = c.clone()
            live = mass > 0
            new[live] = sums[live] / mass[live, None]
            dead = torch.nonzero(~live).flatten()
            if len(dead):
                worst = torch.argsort(dmin * wts, descending=True)[:len(dead)]
                new[dead] = x[worst]
            moved = float((new - c).abs().max())
            c = new
            bar.update(1)
            if moved == 0.0 and not len(dead):
                break
        bar.close()
        a = sqdist(c).argmin(1)
        mass = torch.zeros(k).index_add_(0, a, wts).numpy()
        order = np.argsort(-mass, kind="stable")
        return cls(c.numpy()[order], patch=patch, frame_size=(h, w))

    # ----------------------------------------------------------------------------------------------

    def save(self, path) -> Path:
        """Write the codebook and its geometry to a safetensors file (atomically)."""
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"format": FORMAT, "patch": str(self.patch), "frame_h": str(self.frame_size[0]),
                "frame_w": str(self.frame_size[1]), "vocab_size": str(self.vocab_size)}
        with atomic_file(path) as tmp:
            save_file({"codebook": self.codebook.contiguous()}, tmp, metadata=meta)
        return path

    @classmethod
    def load(cls, path) -> VQTokenizer:
        """Read a tokenizer written by :meth:`save`."""
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("format") != FORMAT:
                raise ValueError(f"{path}: not a {FORMAT} tokenizer file (format={meta.get('format')!r})")
            cb = f.get_tensor("codebook")
        return cls(cb.numpy(), patch=int(meta["patch"]),
                   frame_size=(int(meta["frame_h"]), int(meta["frame_w"])))


def main(argv=None) -> None:
    from sw.model import data

    ap = argparse.ArgumentParser(prog="python -m sw.model.tokenizer",
                                 description="Fit the VQ tokenizer on sw.model.data clips and report PSNR.")
    ap.add_argument("--clips", type=int, default=2000, help="training clips to fit on")
    ap.add_argument("--k", type=int, default=DEFAULT_K)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="build/tokenizer/vq.safetensors", help="codebook file")
    ap.add_argument("--preview", default="build/data_preview", help="directory for PNG grids")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    train, _ = data.make_dataset(args.clips, seed=args.seed)
    t1 = time.perf_counter()
    tok = VQTokenizer.fit(train, k=args.k, seed=args.seed)
    t2 = time.perf_counter()
    tok.save(args.out)
    held, held_prompts = data.make_dataset(500, seed=args.seed + 1_000_003)
    rec = tok.decode(tok.encode(held))
    t3 = time.perf_counter()
    fg = (held != np.array(data.BACKGROUND, np.uint8)).any(-1)  # non-background pixels
    print(f"dataset: {args.clips} clips in {t1 - t0:.1f} s; fit K={args.k}: {t2 - t1:.1f} s; "
          f"encode+decode 500 clips: {t3 - t2:.1f} s")
    print(f"held-out PSNR: {psnr(held, rec):.2f} dB overall, {psnr(held[fg], rec[fg]):.2f} dB on "
          f"non-background pixels; codebook entries used: {len(np.unique(tok.encode(held)))}")
    print(f"wrote {args.out}")
    clips, prompts = data.preview_clips(args.seed)
    pdir = Path(args.preview)
    print(data.save_grid_png(clips, prompts, pdir / "clips.png"))
    print(data.save_grid_png(tok.decode(tok.encode(clips)), [f"{p} (VQ)" for p in prompts],
                             pdir / "clips_vq.png"))


if __name__ == "__main__":
    main()
