"""The output space: which logits a task's answers are scored over, and when an example is right.

One rule for training and for every analysis (patching, DAS, stitching, head ablation). A task
declares `output_ids` (`Task.output_ids`: token ids, or None for every token):

- the scored logits are the columns `output_ids`, in that order (`scored_logits`); the loss
  is the cross entropy of the softmax over them, each label mapped to its column
  (`target_columns`; a label outside the output vocabulary is left unscored);
- a position's prediction is the token id of the argmax among them (`predict`; a tie goes to
  the first column), never a token outside the output vocabulary, however large its logit;
- a position is right when its prediction equals its label; a position labelled IGNORE is
  unscored and counts as right (`positions_right`); an example is right when every position
  is (`rows_right`).

Exoo et al. (2026) score assign_add's 59 number logits only (`bexoo/assign-and-add`
train.py: `logits[:, -1, :MOD]`); a network whose unembedding covers the whole vocabulary
trains on those columns alone, and its other logits, which get no gradient, must not win an
analysis's argmax either.

The functions take logits and labels of any array library with numpy's indexing (numpy
arrays, torch tensors) and import none: `columns` is None (every token) or an integer index
array of the output ids of the same library, on the logits' device, made once by the caller
from `OutputSpace.ids` (and `index` from `OutputSpace.column_index()`). Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass

from study.core.labels import IGNORE


@dataclass(frozen=True)
class OutputSpace:
    """A task's output vocabulary within a vocabulary of `vocab_size` tokens."""

    ids: tuple[int, ...] | None  # the scored token ids in column order; None: every token
    vocab_size: int

    @classmethod
    def of(cls, output_ids, vocab_size: int) -> "OutputSpace":
        """From a task's `output_ids` (None: every token); output ids equal to the whole
        vocabulary in order are stored as None. ValueError on an id outside the vocabulary."""
        if output_ids is None:
            return cls(None, int(vocab_size))
        ids = tuple(int(i) for i in output_ids)
        if not ids or min(ids) < 0 or max(ids) >= vocab_size:
            raise ValueError(f"output_ids must be token ids in 0..{vocab_size - 1}")
        if len(set(ids)) != len(ids):
            raise ValueError("output_ids must not repeat a token id")
        return cls(None if ids == tuple(range(vocab_size)) else ids, int(vocab_size))

    @classmethod
    def of_task(cls, task) -> "OutputSpace":
        """The output space of a task (`task.output_ids` within `task.vocab`; a task without
        `output_ids` scores every token, `Task.output_ids`'s default)."""
        return cls.of(getattr(task, "output_ids", None), len(task.vocab))

    @property
    def whole(self) -> bool:
        """Whether every token is scored (the argmax over all logits)."""
        return self.ids is None

    def column_index(self) -> tuple[int, ...]:
        """(vocab_size + 1,) each token id's column among the scored logits, IGNORE for a
        token outside the output vocabulary, and IGNORE once more in the last entry, where a
        label IGNORE (-1) indexes: `target_columns(labels, index)` is then one lookup."""
        index = list(range(self.vocab_size)) if self.ids is None else [IGNORE] * self.vocab_size
        if self.ids is not None:
            for col, tok in enumerate(self.ids):
                index[tok] = col
        return tuple(index) + (IGNORE,)


def scored_logits(logits, columns):
    """(..., V) -> (..., n_out): the logits of the output ids (all of them for None)."""
    return logits if columns is None else logits[..., columns]


def target_columns(labels, index):
    """(...) token ids or IGNORE -> (...) their columns among the scored logits, or IGNORE
    (unscored, also for a token outside the output vocabulary). `index`: `column_index()` as
    an array of the labels' library and device."""
    return index[labels]


def predict(logits, columns):
    """(..., V) -> (...) the token id of the argmax among the output ids."""
    if columns is None:
        return logits.argmax(-1)
    return columns[logits[..., columns].argmax(-1)]


def positions_right(logits, labels, columns):
    """(..., V), (...) -> (...) bool: the prediction equals the label, or the label is IGNORE
    (unscored)."""
    return (predict(logits, columns) == labels) | (labels == IGNORE)


def rows_right(logits, labels, columns):
    """(n, pos, V), (n, pos) -> (n,) bool: every position of the row is right (a row with no
    scored position counts as right)."""
    return positions_right(logits, labels, columns).all(-1)
