import torch
import torch.nn as nn


class Model(nn.Module):
    """A Linear, then a row softmax: a reference with parameters, whose forward records autograd wherever
    grad mode is on."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=1)


batch_size = 8
in_features = 16
out_features = 32


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
