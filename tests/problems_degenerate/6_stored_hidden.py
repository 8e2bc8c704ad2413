"""State carried between calls: an RNN cell that keeps its hidden state in a buffer and updates it on
every forward call, so each trial's output depends on the trials before it. Two instances called in step
agree; one instance called twice on the same inputs does not."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, batch: int, width: int):
        super().__init__()
        self.cell = nn.Linear(2 * width, width)
        self.register_buffer("hidden", torch.zeros(batch, width))

    def forward(self, x):
        self.hidden = torch.tanh(self.cell(torch.cat([x, self.hidden], dim=1)))
        return self.hidden


batch, width = 16, 32


def get_inputs():
    return [torch.rand(batch, width)]


def get_init_inputs():
    return [batch, width]
