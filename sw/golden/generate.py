"""``python -m sw.golden.generate``: ``python -m sw.model.generate`` (same options) with the MLP and the
replay decision on the integer path, the golden model's, with the checkpoint's stored integer
constants (``int8.safetensors``; a checkpoint without them is calibrated first), as the frontier's
integer path and the accelerator run them."""

import sys


def install_integer_path(ckpt, args) -> None:
    """Install the checkpoint's integer path (stored constants, else calibrated) in its model."""
    import torch

    from sw.golden.calibrate import integer_constants

    ip, _ = integer_constants(ckpt, dtype=torch.float32)
    ip.install(ckpt.model)


def main(argv=None) -> int:
    from sw.model import generate

    return generate.main(argv, prog="python -m sw.golden.generate", integer=install_integer_path)


if __name__ == "__main__":
    sys.exit(main())
