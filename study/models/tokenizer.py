"""A task's vocabulary as text: prompts of space-separated tokens, and a `transformers`
tokenizer of the same vocabulary.

A prompt is the task's tokens joined by single spaces, e.g. counting's "B D0 D1 T R R E" or
assign_add's "a 3 b a + 16 =". Only the space separates (runs of spaces count as one), so
binding's newline token is written as itself between spaces: "g = 5 \\n # g :". Every token
is a whole word of the vocabulary; nothing is split further or merged.

`prompt_ids` turns prompts (strings, or lists of tokens) into id rows, with a one-line
`UsageError` naming a token the vocabulary lacks; `task_tokenizer` builds the matching
`transformers.PreTrainedTokenizerFast` (a `tokenizers` WordLevel model over the vocabulary
with a split on spaces), so that `tokenizer(prompt).input_ids == prompt_ids([prompt])[0]`.

Special tokens [ours]: the tokenizer adds no token of its own, so every id it gives is one the
network was trained on and no special token shares an id with an ordinary task token. Its
pad token is the task's `PAD` (padding goes on the right, as the tasks pad); bos and eos are
the task's own sequence delimiters where it has them (counting's `B` and `E`) and None
otherwise; nothing is added around a prompt. The unknown token is `PAD` too: the network has
no id for one, and tools that probe a tokenizer with arbitrary text (TransformerLens encodes
"a" when it boots) need one; `prompt_ids` (and so `Run.cache`) refuses an unknown token.

Torch-free; `tokenizers` and `transformers` are imported only by `task_tokenizer`.
"""
from __future__ import annotations

from typing import Sequence

from study.core.errors import UsageError

SEPARATOR = " "


def shown(vocab: Sequence[str]) -> str:
    """The vocabulary on one line, each token escaped ("\\n" for binding's newline)."""
    return ", ".join(t.encode("unicode_escape").decode("ascii") for t in vocab)


def prompt_tokens(text: str) -> list[str]:
    """The tokens of one prompt: `text` split on spaces."""
    return [t for t in text.split(SEPARATOR) if t]


def prompt_ids(prompts, vocab: Sequence[str], what: str = "prompt") -> list[list[int]]:
    """Id rows of `prompts`: a string (one prompt), or a list whose items are each a string
    (a prompt) or a list of tokens. A token outside `vocab` or an empty prompt is a one-line
    `UsageError` starting with `what`."""
    if isinstance(prompts, str):
        prompts = [prompts]
    index = {t: i for i, t in enumerate(vocab)}
    rows = []
    for prompt in prompts:
        tokens = prompt_tokens(prompt) if isinstance(prompt, str) else list(prompt)
        if not tokens:
            raise UsageError(f"{what}: an empty prompt; give at least one token of: "
                             f"{shown(vocab)}")
        for t in tokens:
            if not isinstance(t, str) or t not in index:
                raise UsageError(f"{what}: token {t!r} is not in the vocabulary; tokens "
                                 f"(separated by spaces in a prompt string): {shown(vocab)}")
        rows.append([index[t] for t in tokens])
    if not rows:
        raise UsageError(f"{what}: no prompts given")
    return rows


def task_tokenizer(vocab: Sequence[str], pad: str, bos: str | None = None,
                   eos: str | None = None):
    """A `transformers.PreTrainedTokenizerFast` over `vocab` (id = position in `vocab`):
    prompts split on spaces, `pad` (a token of `vocab`) as the pad token, padding on the
    right, `bos` / `eos` (tokens of `vocab`, or None) as given, `pad` as the unknown token,
    nothing added around a prompt. `save_pretrained(dir)` writes it; `AutoTokenizer` loads it back."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    for role, token in (("pad", pad), ("bos", bos), ("eos", eos)):
        if token is not None and token not in vocab:
            raise ValueError(f"the {role} token {token!r} is not in the vocabulary")
    backend = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token=pad))
    backend.pre_tokenizer = pre_tokenizers.Split(SEPARATOR, behavior="removed")
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=pad, bos_token=bos,
                                   eos_token=eos, unk_token=pad, padding_side="right")
