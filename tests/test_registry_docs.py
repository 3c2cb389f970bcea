"""What `list` and `describe` say of an entry is a whole statement: the first paragraph of its
docstring, never its first line cut mid-sentence."""
import pytest

from study.core import registry


def test_summary_is_the_first_paragraph_on_one_line():
    doc = """Counterfactual activation patching per (layer x position),
    time step, and head.

    Details that `describe` does not need."""
    assert registry.summary(doc) == ("Counterfactual activation patching per (layer x position), "
                                     "time step, and head.")
    assert registry.summary(None) == ""


@pytest.mark.parametrize("kind", registry.KINDS)
def test_every_entry_of_the_project_says_what_it_is_in_whole_sentences(kind):
    for name, entry in registry.builtin(kind).items():
        assert entry.help, f"{kind} {name} has no description"
        assert entry.help.rstrip(")`").endswith("."), f"{kind} {name}: {entry.help!r} stops mid-sentence"
