"""Write the 1797 handwritten digits as a kpl-dataset of PNG images with `train` and `test` parts.

Runs offline with numpy and Pillow only: the 8x8 digits ship next to this script in
`digits.csv.gz` (the test set of the UCI "Optical Recognition of Handwritten Digits" data,
E. Alpaydin and C. Kaynak, CC BY 4.0, as scikit-learn bundles it: 64 pixel values 0-16
then the digit, one image a line). Each image is upscaled to a PNG and stored in the classification shape of the KPL user guide
(`path, contentType, content, class_name, class_id`); every fifth image of each class
goes to `test` (a deterministic, stratified split).

    python examples/datasets/make_digits.py data/digits [--size 32]
"""

from __future__ import annotations

import argparse
import gzip
import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from kpl_dataset import BasicType, WriteOnlyDataset

CLASS_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
RECORD_TYPE = {
    "path": BasicType.String,
    "contentType": BasicType.String,
    "content": BasicType.ByteArray,
    "class_name": BasicType.String,
    "class_id": BasicType.Int,
}
TEST_EVERY = 5
DIGITS = Path(__file__).with_name("digits.csv.gz")


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """Return the 8x8 images (values 0-16) and their digits."""
    with gzip.open(DIGITS, "rt") as lines:
        table = np.loadtxt(lines, delimiter=",", dtype=np.uint8)
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1]


def png_bytes(pixels: np.ndarray, size: int) -> bytes:
    """Encode one 8x8 digit (values 0-16) as a size x size grayscale PNG."""
    image = Image.fromarray(np.round(pixels * (255.0 / 16.0)).astype(np.uint8), mode="L")
    image = image.resize((size, size), Image.Resampling.BILINEAR)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def make_digits(out_dir: str | Path, size: int = 32) -> dict[str, int]:
    """Write the dataset into `out_dir`; return the record count of each part."""
    images, targets = load_digits()
    seen = [0] * len(CLASS_NAMES)
    writers = {part: WriteOnlyDataset(str(out_dir), part, RECORD_TYPE) for part in ("train", "test")}
    counts = dict.fromkeys(writers, 0)
    try:
        for index, (pixels, class_id) in enumerate(zip(images, targets, strict=True)):
            class_id = int(class_id)
            part = "test" if seen[class_id] % TEST_EVERY == 0 else "train"
            seen[class_id] += 1
            writers[part].write(
                {
                    "path": f"digits/{CLASS_NAMES[class_id]}/{index:04d}.png",
                    "contentType": "image/png",
                    "content": png_bytes(pixels, size),
                    "class_name": CLASS_NAMES[class_id],
                    "class_id": class_id,
                }
            )
            counts[part] += 1
    except BaseException:
        for writer in writers.values():  # never commit a half-written dataset
            writer.abort()
        raise
    for part, writer in writers.items():
        meta = writer.get_meta_db()
        (meta.update if meta.has("class_names") else meta.put)("class_names", list(CLASS_NAMES))
        writer.close()
        print(f"{part}: {counts[part]} records", file=sys.stderr)
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="the dataset folder to write")
    parser.add_argument("--size", type=int, default=32, help="side of the PNG images in pixels (default 32)")
    args = parser.parse_args(argv)
    make_digits(args.out_dir, args.size)


if __name__ == "__main__":
    main()
