"""Cannot be checked here: the reference imports a package that is not installed (as level 4 imports
`transformers`). A reason, not a flag."""

import kb_agent_test_package_that_does_not_exist  # noqa: F401
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return [torch.rand(4, 4)]


def get_init_inputs():
    return []
