"""Local model helpers: the built-in tiny model and its character tokenizer."""

from .tiny import paddock_home, recipe_hash, tiny_model_dir
from .tokenizer import build_char_tokenizer

__all__ = ["build_char_tokenizer", "paddock_home", "recipe_hash", "tiny_model_dir"]
