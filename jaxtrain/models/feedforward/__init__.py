"""Feed-forward sublayers: the gated and ungated MLPs and the mixture of experts."""
