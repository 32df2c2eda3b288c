"""Shared base-model pools: K runs in one job over one base model (docs/pools.md).

`key` is light (the control plane imports it); the driver and the job import torch.
"""
