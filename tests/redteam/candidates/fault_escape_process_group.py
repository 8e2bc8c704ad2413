"""Fault: fork a daemon that leaves the process group (setsid), then hang.

class: 10 faults
attack: forward double-forks a child that calls os.setsid() and lives on for 120 s, writing its pid to
  /tmp/kb_redteam_orphan.pid; the candidate then hangs. Killing the evaluation's process group does not
  reach a process in another session, so it survives the timeout (on a GPU machine it would keep GPU
  memory and compute). A trustworthy evaluator kills it too (cgroup, PR_SET_CHILD_SUBREAPER, or a PID
  namespace), or forbids fork.
problem: toy/relu
expected: timeout
accept: rejected, runtime_error
limits: correctness_s=3
pidfile: /tmp/kb_redteam_orphan.pid
device: cpu
"""
import os
import time

import torch.nn as nn


def _daemon():
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    with open("/tmp/kb_redteam_orphan.pid", "a") as f:
        f.write(f"{os.getpid()}\n")
    for fd in range(3, 256):
        try:
            os.close(fd)
        except OSError:
            pass
    time.sleep(120)
    os._exit(0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _daemon()
        while True:
            time.sleep(0.01)
