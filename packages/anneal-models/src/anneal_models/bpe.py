"""GPT-2's byte-level BPE, from its vocab.json and merges.txt, through Hugging Face `tokenizers`.

`tokenizers` loads exactly these two files (no conversion, no cache of its own) and encodes in Rust;
its ByteLevel pre-tokenizer is GPT-2's regex split. Decoding goes to **bytes**: every token is a string
over GPT-2's byte alphabet (each of the 256 bytes drawn as one printable character), mapped back byte by
byte, so a sequence that splits a UTF-8 character between tokens round-trips exactly (a str decode would
replace the halves). `<|endoftext|>` (50256) is the one special token, as in GPT-2.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

EOT = "<|endoftext|>"


@functools.cache
def byte_alphabet() -> dict[str, int]:
    """GPT-2's character for each byte -> the byte: printable Latin-1 bytes stand for themselves, the other 68
    (controls, space, soft hyphen, ...) for the characters from U+0100 on, in byte order."""
    keep = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    out = {chr(b): b for b in keep}
    n = 0
    for b in range(256):
        if b not in out.values():
            out[chr(256 + n)] = b
            n += 1
    return out


class BPE:
    """encode(text) -> ids; decode(ids) -> bytes; `eot` is <|endoftext|>'s id."""

    def __init__(self, vocab: Path, merges: Path) -> None:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        try:
            tok = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
        except Exception as exc:  # tokenizers raises its own Exception type for unreadable files
            raise ValueError(f"cannot read the BPE vocabulary {vocab} / merges {merges}: {exc}") from None
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([EOT])
        self._tok = tok
        eot = tok.token_to_id(EOT)
        if eot is None:
            raise ValueError(f"{vocab} has no {EOT} token: not GPT-2's vocabulary")
        self.eot = int(eot)
        self.vocab_size = int(tok.get_vocab_size())
        alphabet = byte_alphabet()
        self._bytes = [b""] * self.vocab_size
        for token, i in tok.get_vocab().items():
            self._bytes[i] = token.encode() if token == EOT else bytes(alphabet[c] for c in token)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [list(e.ids) for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> bytes:
        """The bytes the ids stand for (exactly; a split UTF-8 character stays split)."""
        out = []
        for i in ids:
            if not 0 <= int(i) < self.vocab_size:
                raise ValueError(f"token id {i} is out of range (the vocabulary has {self.vocab_size})")
            out.append(self._bytes[int(i)])
        return b"".join(out)

    def text(self, ids: Iterable[int]) -> str:
        """decode() as text, invalid UTF-8 replaced (for printing whole samples)."""
        return self.decode(ids).decode("utf-8", errors="replace")
