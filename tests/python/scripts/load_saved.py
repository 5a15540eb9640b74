"""Loads a model that `coach train --save` wrote for examples/torch/fashion_cnn.py into the
script's own CNN with load_state_dict, as a user does, and prints its test accuracy on the first
N test images: `load_saved.py SAVED.safetensors N`."""
import os
import sys

import safetensors.torch
import torch

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
sys.path[:0] = [os.path.join(root, "examples", "torch"), os.path.join(root, "python")]
from fashion_cnn import CNN, evaluate  # noqa: E402
from fashion_data import DEFAULT_DATA, load_fashion  # noqa: E402

torch.set_num_threads(1)
model = CNN()
model.load_state_dict(safetensors.torch.load_file(sys.argv[1]))
_, _, x_test, y_test = load_fashion(DEFAULT_DATA, 1, int(sys.argv[2]))
loss, accuracy = evaluate(model.eval(), x_test, y_test)
print(f"accuracy {accuracy:.6f} loss {loss:.6f}")
