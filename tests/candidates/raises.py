import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        scale = {"a": 1.0}
        return torch.relu(x) * scale["b"]
