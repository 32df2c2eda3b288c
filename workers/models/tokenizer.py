"""A character-level tokenizer saved as an ordinary `PreTrainedTokenizerFast` (tokenizer.json),
so transformers' AutoTokenizer and vLLM load it without custom code."""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<|endoftext|>", "<unk>"
CHARSET = "0123456789abcdefghijklmnopqrstuvwxyz+-*/=?.,:;()' "


def build_char_tokenizer(charset: str = CHARSET) -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate([PAD, EOS, UNK, *charset])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # Every character is its own pre-token; Fuse joins decoded tokens without spaces.
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    # Left padding (saved in tokenizer_config.json): generation pads prompts on the left.
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=UNK, padding_side="left"
    )
