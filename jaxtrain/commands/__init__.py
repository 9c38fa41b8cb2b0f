"""One module per command of `python -m jaxtrain` beyond training: `config`, `runs`,
`checkpoints`, `export`, `convert`, `plot`, `bench` (cli.py holds the argument tree).
"""
