"""Our SentencePiece model as a transformers tokenizer (for the TRL side only).

Runs in the TRL environment (experiments/benchmarks/setup_baselines.sh),
never in the library's. Encoding equals `rl_post.data.batching.prompt_ids`
(BOS + SentencePiece ids of the text) and decoding skips the specials like
`SentencePieceTokenizer.decode`, so both trainers see the same token ids and
the same completion text.
"""

from transformers.tokenization_utils_sentencepiece import SentencePieceBackend


class OurSentencePiece(SentencePieceBackend):
  """transformers' SentencePiece backend without its Llama conventions."""

  def __init__(self, model_file: str, **kwargs):
    import sentencepiece as spm  # noqa: PLC0415
    sp = spm.SentencePieceProcessor(model_file=model_file)
    specials = dict(pad_token=sp.id_to_piece(sp.pad_id()), unk_token=sp.id_to_piece(sp.unk_id()),
                    bos_token=sp.id_to_piece(sp.bos_id()), eos_token=sp.id_to_piece(sp.eos_id()))
    super().__init__(vocab_file=model_file, legacy=True, special_tokens_pattern="bos",
                     add_bos_token=True, add_eos_token=False, **specials, **kwargs)

  def convert_tokens_to_string(self, tokens: list[str]) -> str:
    return self.sp_model.decode_pieces(list(tokens))  # exact: no space stripping
