"""Blocks put together into a model: the scanned decoder, hybrid stacks from a block pattern,
and the pipeline-parallel split of a stack into stages.
"""
