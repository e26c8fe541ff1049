"""Pieces of the evidence report and the speed benchmark that can be checked without timing."""

import numpy as np
import pytest

from sw.evidence import bench_speed, report


def test_decoder_flops_arithmetic():
    # Replaying nothing changes nothing; replaying everything removes exactly the MLP FLOPs.
    f0, d0 = report.decoder_flops(8, 16, 2, 4, 3, 5, 0.0)
    assert f0 == d0
    f1, d1 = report.decoder_flops(8, 16, 2, 4, 3, 5, 1.0)
    assert d1 == d0 and d0 - f1 == 2 * (4 * 3) * 2 * 3 * 8 * 16
    # At VILA-U-7B sizes the MLP is about two thirds of the decoder: 80 % replay saves about half.
    v = report.VILA_U_7B
    f, d = report.decoder_flops(v["d_model"], v["d_ff"], v["n_layers"], v["tokens_per_frame"], v["frames"],
                                v["prompt_len"], 0.8)
    assert 0.45 < 1 - f / d < 0.55


def test_image_metrics():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (2, 3, 16, 16, 3), dtype=np.uint8)
    assert report.psnr(a, a) == float("inf")
    assert report.ssim(a, a) == pytest.approx(1.0)
    b = np.clip(a.astype(int) + 40, 0, 255).astype(np.uint8)
    assert report.psnr(a, b) < 30 and report.ssim(a, b) < 1.0


def test_bench_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "bench"
    out.mkdir()
    (out / "speed.json").write_text("{}")
    with pytest.raises(SystemExit):
        bench_speed.main(["--config", "shipped", "--out", str(out)])
    assert "already exists; pass --force" in capsys.readouterr().err
    assert (out / "speed.json").read_text() == "{}"


def test_report_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.md").write_text("mine")
    assert report.main(["--out", str(out)]) == 1
    assert "already exists; pass --force" in capsys.readouterr().err
    assert (out / "report.md").read_text() == "mine"
