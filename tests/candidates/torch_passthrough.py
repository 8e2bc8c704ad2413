import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Calls PyTorch directly: used to check that a reference evaluates, not as a kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.nn.functional.cross_entropy(predictions, targets)
