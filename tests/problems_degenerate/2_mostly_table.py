"""Mostly input-independent: a learned table of 100 values per row, of which only the first 3 are
replaced by the input, so 97 % of the output is unchanged across seeds (METR's filter: more than 95 %)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, width: int, copied: int):
        super().__init__()
        self.table = nn.Parameter(torch.randn(width))
        self.copied = copied

    def forward(self, x):
        y = self.table.expand(x.shape[0], -1).clone()
        y[:, : self.copied] = x[:, : self.copied]
        return y


batch, width, copied = 64, 100, 3


def get_inputs():
    return [torch.rand(batch, width)]


def get_init_inputs():
    return [width, copied]
