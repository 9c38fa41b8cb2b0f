"""Primitives every block uses: dense projections, RMSNorm, embeddings, rotary positions, fp8
projections and the precision of products.
"""

from jaxtrain._moved import forward_old_names

__getattr__ = forward_old_names(__name__)
