"""Fashion-MNIST for the PyTorch examples, read with NumPy alone from the gzipped IDX files
(Debian's dataset-fashion-mnist puts them in /usr/share/datasets/fashion-mnist):
images as float32 tensors N x 1 x 28 x 28 scaled to [0, 1], labels as int64 tensors.
"""
import gzip
import os
import struct

import numpy as np
import torch

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def read_idx(path, limit=0):
    """An IDX file (gzipped) as a uint8 numpy array of its declared shape; its first `limit`
    rows when limit > 0."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    if magic >> 8 != 0x08:  # 0x08: unsigned bytes
        raise SystemExit(f"{path}: not an IDX file of unsigned bytes (magic {magic:#010x})")
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    array = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
    return array[:limit] if limit > 0 else array


def load_fashion(data=DEFAULT_DATA, train_limit=0, test_limit=0):
    """(x_train, y_train, x_test, y_test); the first train_limit / test_limit rows when > 0."""
    missing = [name for name in FILES if not os.path.isfile(os.path.join(data, name))]
    if missing:
        raise SystemExit(f"fashion_data: {', '.join(missing)} missing in {data} "
                         "(apt-get install dataset-fashion-mnist, or --data FOLDER)")
    arrays = []
    for name, limit in zip(FILES, (train_limit, train_limit, test_limit, test_limit)):
        array = read_idx(os.path.join(data, name), limit)
        if array.ndim == 3:  # images: N x 28 x 28 bytes -> N x 1 x 28 x 28 in [0, 1]
            arrays.append(torch.from_numpy(array.astype(np.float32) / 255.0).unsqueeze(1))
        else:
            arrays.append(torch.from_numpy(array.astype(np.int64)))
    return tuple(arrays)
