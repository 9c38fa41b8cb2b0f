"""Evaluation beyond validation loss: EleutherAI's lm-evaluation-harness on jaxtrain parameters,
during training (`during_training`) and after it (`python -m jaxtrain eval`)."""
