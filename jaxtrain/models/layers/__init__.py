"""Primitives every block uses: dense projections, RMSNorm, embeddings, rotary positions, fp8
projections and the precision of products.
"""
