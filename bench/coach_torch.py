"""Coach models in PyTorch, for the benchmarks and checks under bench/ (never for the build or the
tests): a Coach model section (a job spec's `model:` or a saved model's `coach.model` metadata)
as the torch.nn.Sequential whose state_dict names Coach's .safetensors files use, and the IDX
reader the scripts share.
"""
import gzip
import struct

import numpy as np
import torch


def read_idx(path):
    """An IDX file (gzipped or not) as a numpy array of its declared shape."""
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def read_fashion(root, samples=None):
    """Fashion-MNIST as Coach's IDX loader gives it: float32 N x 1 x 28 x 28 in [0, 1]."""
    x = read_idx(f"{root}/train-images-idx3-ubyte.gz")
    y = read_idx(f"{root}/train-labels-idx1-ubyte.gz")
    if samples:
        x, y = x[:samples], y[:samples]
    tx = read_idx(f"{root}/t10k-images-idx3-ubyte.gz")
    ty = read_idx(f"{root}/t10k-labels-idx1-ubyte.gz")

    def images(a):
        return torch.tensor(a, dtype=torch.float32).reshape(-1, 1, a.shape[1], a.shape[2]) / 255.0

    return (images(x), torch.tensor(y, dtype=torch.int64), images(tx),
            torch.tensor(ty, dtype=torch.int64))


def _layers_of(model):
    """The layer list of a model section, with the `type: mlp` shorthand expanded."""
    if model.get("type", "layers" if "layers" in model else "mlp") == "mlp":
        out = []
        for h in model.get("hidden", [256, 128]):
            out += [{"type": "dense", "units": int(h)}, {"type": "relu"}]
        return out + [{"type": "dense"}]
    return [layer if isinstance(layer, dict) else {"type": layer} for layer in model["layers"]]


def build(model, input_shape, classes):
    """torch.nn.Sequential of a Coach model section over inputs of `input_shape` (C, H, W)."""
    c, h, w = input_shape
    flat = h == 1 and w == 1  # CSV rows come in as F x 1 x 1
    mods = []
    layers = _layers_of(model)
    # A dense layer takes a C x H x W input as it lies in memory (Coach has no implicit flatten
    # module): the caller flattens such inputs first (inputs_for).
    flat_input = layers[0]["type"] == "dense"
    for i, layer in enumerate(layers):
        kind = layer["type"]
        if kind == "dense":
            units = layer.get("units", classes if i + 1 == len(layers) else None)
            mods.append(torch.nn.Linear(c * h * w, int(units)))
            c, h, w, flat = int(units), 1, 1, True
        elif kind == "conv2d":
            k, s, p = layer["kernel"], layer.get("stride", 1), layer.get("padding", 0)
            mods.append(torch.nn.Conv2d(c, layer["channels"], k, stride=s, padding=p))
            c = layer["channels"]
            h, w = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        elif kind in ("max_pool2d", "avg_pool2d"):
            k, p = layer["kernel"], layer.get("padding", 0)
            s = layer.get("stride", k)
            pool = torch.nn.MaxPool2d if kind == "max_pool2d" else torch.nn.AvgPool2d
            mods.append(pool(k, stride=s, padding=p))
            h, w = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        elif kind == "flatten":
            mods.append(torch.nn.Flatten())
            c, h, w, flat = c * h * w, 1, 1, True
        elif kind == "dropout":
            mods.append(torch.nn.Dropout(layer.get("p", 0.5)))
        elif kind == "batch_norm":
            norm = torch.nn.BatchNorm1d if flat else torch.nn.BatchNorm2d
            mods.append(norm(c, eps=layer.get("epsilon", 1e-5), momentum=layer.get("momentum", 0.1)))
        elif kind == "relu":
            mods.append(torch.nn.ReLU())
        elif kind == "tanh":
            mods.append(torch.nn.Tanh())
        elif kind == "sigmoid":
            mods.append(torch.nn.Sigmoid())
        elif kind == "gelu":
            mods.append(torch.nn.GELU(approximate="tanh"))
        else:
            raise SystemExit(f"coach_torch: layer {i}: unknown type '{kind}'")
    if mods and not flat:
        raise SystemExit("coach_torch: the model does not end in a dense layer")
    net = torch.nn.Sequential(*mods)
    net.coach_flat_input = flat_input
    return net


def inputs_for(net, x):
    """x (N x C x H x W) as `net` takes it."""
    return x.reshape(x.shape[0], -1) if net.coach_flat_input else x
