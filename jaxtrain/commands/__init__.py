"""One module per command of `python -m jaxtrain`: `train`, `config`, `sample`, `runs`, `plot`,
`checkpoints`, `export`, `convert`, `bench`, `preflight`.

Each holds what its command does, its options (`add_arguments(parser)`) and its handler
(`handle(args) -> int`, the exit status); `options.py` holds the options several commands share.
`jaxtrain/cli.py` builds the argparse tree from them.
"""
