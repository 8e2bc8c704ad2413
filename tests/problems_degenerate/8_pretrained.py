"""Cannot be checked here: the reference fetches its config with `from_pretrained`, as level 4 does. The
stand-in below behaves like a Hugging Face class with nothing cached: in offline mode it raises OSError,
otherwise it would fetch them (here: RuntimeError, which a check that forgets offline mode reports as
reference_fails)."""

import os

import torch
import torch.nn as nn


class Config:
    @classmethod
    def from_pretrained(cls, name: str):
        if os.environ.get("HF_HUB_OFFLINE") != "1":
            raise RuntimeError(f"this stand-in was asked to fetch {name!r}")
        raise OSError(
            f"We couldn't connect to 'https://huggingface.co' to load the files of {name!r}, and "
            "couldn't find them in the cached files (offline mode)"
        )


config = Config.from_pretrained("gpt2")


class Model(nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return [torch.rand(4, 4)]


def get_init_inputs():
    return []
