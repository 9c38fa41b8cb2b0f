"""jaxtrain's configs: `base.py` holds every setting with its default, each other file one preset
or run (`get_config()` returns an ml_collections ConfigDict).

The folder sits at the top of the repository and is installed as the `jaxtrain.configs` package,
so `python -m jaxtrain --config llama2_7b.py` finds a preset from any folder and a config file of
your own starts from the defaults with `from jaxtrain.configs import base`.
"""
