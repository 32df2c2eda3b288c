"""What the trainer (policy/) and the engines (rollout/) share about LoRA adapters, below
both: the base model with its adapter loaded alike on either side (lora.py, rows_lora.py),
adapter tensors packed for one transfer (packed.py), adapter versions as PEFT directories
for the engines that load them from a path (files.py), the update a trainer publishes and
the probe of the version handshake (update.py), and the left-padded prompts both prefill
(padding.py).

Importing this package is cheap on purpose: files.py and update.py must load without peft
(an engine's own environment may lack it).
"""
