"""`python -m jaxtrain`: hands the command line to `jaxtrain.cli` (see there)."""

from jaxtrain.cli import main, run

__all__ = ["main", "run"]

if __name__ == "__main__":
    run()
