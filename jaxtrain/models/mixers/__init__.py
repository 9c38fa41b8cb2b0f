"""Token mixers: attention (grouped-query, blockwise, multi-head latent), Mamba-1/2 and the
delta-rule mixers (Gated DeltaNet, Kimi delta attention).
"""
