"""What a run writes into its directory besides checkpoints: the lock held while a trainer is
open (`lock`), the metric sinks (`metrics`) and the full-disk report (`disk_full`).
"""
