#!/usr/bin/env python3
"""The image task's data: scikit-learn's digits (1,797 images of 8 x 8 pixels, 10 classes, shipped inside
the package: nothing is downloaded), upscaled to --size x --size by bilinear interpolation, as 8-bit
pixel tokens in raster order, split by --seed into train / validation / test (70% / 10% / 20%), and
written as a linattn dataset file (docs/datasets.md) for `linattn train --task image --data FILE`.

    build/venv/bin/python scripts/applications/make_image_data.py --size 64 --out digits64.ds
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dataset_file import write_dataset  # noqa: E402

SIZES = (16, 32, 64, 128, 256)
FRACTIONS = (0.7, 0.1)  # train, validation; the test split is the rest


def upscale(images: np.ndarray, size: int) -> np.ndarray:
    """[n, h, w] -> [n, size, size], bilinear, the corner pixels' centres kept on the corners."""
    n, h, w = images.shape

    def axis(source: int):
        at = np.linspace(0.0, source - 1.0, size)
        low = np.floor(at).astype(int)
        high = np.minimum(low + 1, source - 1)
        return low, high, at - low

    y0, y1, fy = axis(h)
    x0, x1, fx = axis(w)
    fy, fx = fy[None, :, None], fx[None, None, :]
    top = images[:, y0][:, :, x0] * (1 - fx) + images[:, y0][:, :, x1] * fx
    bottom = images[:, y1][:, :, x0] * (1 - fx) + images[:, y1][:, :, x1] * fx
    return top * (1 - fy) + bottom * fy


def digits_splits(size: int, seed: int) -> dict:
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = upscale(digits.images.astype(np.float64) / 16.0, size)  # digits' values run 0..16
    tokens = np.clip(np.rint(pixels * 255.0), 0, 255).astype(np.uint8).reshape(len(pixels), size * size)
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_train = int(round(FRACTIONS[0] * len(order)))
    n_val = int(round(FRACTIONS[1] * len(order)))
    parts = {"train": order[:n_train], "validation": order[n_train:n_train + n_val], "test": order[n_train + n_val:]}
    return {name: (tokens[idx], labels[idx]) for name, idx in parts.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=64, choices=SIZES,
                        help="image side after upscaling (64: 4,096 pixels a sequence)")
    parser.add_argument("--seed", type=int, default=1, help="the seed that fixes the split")
    parser.add_argument("--out", required=True, help="the dataset file to write (atomically)")
    args = parser.parse_args(argv)
    splits = digits_splits(args.size, args.seed)
    crc = write_dataset(args.out, "image", splits, vocab=256, class_names=[str(d) for d in range(10)])
    counts = ", ".join(f"{name} {len(splits[name][1])}" for name in ("train", "validation", "test"))
    print(f"{args.out}: scikit-learn digits at {args.size} x {args.size} ({args.size * args.size} pixels a "
          f"sequence), 10 classes, {counts}; CRC-32 {crc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
