"""Primus experiment YAMLs resolved as Primus resolves them, then handed to a backend adapter."""
