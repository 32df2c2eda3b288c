"""Paddock data plane: asynchronous LoRA GRPO (never imports Django).

Importing this package is cheap on purpose: the control plane imports `workers.spec`, which
must not pull torch or an engine in through here.
"""
