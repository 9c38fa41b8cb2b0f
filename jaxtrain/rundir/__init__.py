"""The layout of a run directory and what a run writes into it besides the checkpoints' arrays:
the lock held while a trainer is open (`lock`), the metric sinks (`metrics`), the full-disk report
(`disk_full`), object-store URLs and their TensorStore specs (`object_store`), and how checkpoint step folders are named and listed (`step_folders`, read by the
checkpoint manager and by the lost-process report alike).
"""
