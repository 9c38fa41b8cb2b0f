"""A Hugging Face `config.json` (or a model folder's) as the model of a run."""
