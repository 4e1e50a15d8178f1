"""Activation patching: KL Repair per layer and set-level deletion harm."""
