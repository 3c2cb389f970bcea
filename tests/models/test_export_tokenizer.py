"""The exported tokenizer and model: the tokenizer's ids are the task's, its special tokens
never take an ordinary token's id, the exported config carries the same ids (not GPT-NeoX's
defaults), and tokenizer -> exported model (saved and loaded back) gives our logits and, with
eager attention, our attention patterns."""
from __future__ import annotations

import pytest
import torch

import study
from study.run.handle import special_tokens
from study.core.errors import UsageError
from study.models.nets.gpt_neox import to_gpt_neox
from study.models.sites.cache import run_with_cache
from study.models.tokenizer import prompt_ids, task_tokenizer
from tests.conftest import frozen_smoke_model, project_entries

TASKS = sorted(project_entries("task"))


def tokenizer_of(task):
    return task_tokenizer(task.vocab, **special_tokens(task))


@pytest.mark.parametrize("name", TASKS)
def test_special_tokens_never_take_an_ordinary_tokens_id(name):
    task, _, _ = frozen_smoke_model(name, "rope2")
    tok = tokenizer_of(task)
    assert len(tok) == len(task.vocab)  # nothing added: every id is one the network knows
    assert tok.pad_token_id == task.pad_id and tok.unk_token_id == task.pad_id
    delimiters = {"counting": ("B", "E")}.get(name, (None, None))  # [paper] counting's B ... E
    assert (tok.bos_token, tok.eos_token) == delimiters
    ids = task.split("test").ids
    for role in ("bos", "eos"):
        token_id = getattr(tok, f"{role}_token_id")
        if token_id is not None:  # a real delimiter: it opens / closes every sequence
            column = ids[:, 0] if role == "bos" else [r[r != task.pad_id][-1] for r in ids]
            assert set(map(int, column)) == {token_id}, role
    assert set(tok.all_special_ids) <= {task.pad_id, tok.bos_token_id, tok.eos_token_id}


@pytest.mark.parametrize("name", TASKS)
def test_the_tokenizer_gives_the_tasks_ids_and_decodes_back(name):
    task, _, _ = frozen_smoke_model(name, "rope2")
    tok = tokenizer_of(task)
    for row in task.split("test").ids[:5]:
        row = [int(i) for i in row if i != task.pad_id]
        prompt = " ".join(task.vocab[i] for i in row)  # binding's newline is a token here
        assert tok(prompt).input_ids == row == prompt_ids(prompt, task.vocab)[0]
        assert tok.decode(row) == prompt
    batch = tok([prompt, prompt.split(" ")[0]], padding=True).input_ids
    assert batch[1][1:] == [task.pad_id] * (len(row) - 1)  # padded on the right with PAD


def test_tokenizer_to_exported_model_gives_our_logits_and_patterns(trained_runs, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run = study.open_run(trained_runs("rope2"))  # trained on first use: outside no_grad
    with torch.no_grad():
        exported_matches(run, tmp_path)


def exported_matches(run, tmp_path):
    """Save the run's export, load it back with transformers' Auto classes, compare."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = run.to_transformers()
    assert (hf.config.pad_token_id, hf.config.bos_token_id, hf.config.eos_token_id) == (0, 1, 2)
    hf.save_pretrained(tmp_path / "hf")
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert model.config._attn_implementation == "eager"  # kept through config.json
    prompts = ["B D0 D1 D2 T R R R E", "B D1 T R E"]
    batch = tok(prompts, return_tensors="pt", padding=True)
    logits, acts = run.cache(prompts)
    out = model(**batch, output_attentions=True)
    live = batch.attention_mask.bool()  # (batch, pos): padding is no prompt's output
    torch.testing.assert_close(out.logits[live], logits[live], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model(input_ids=batch.input_ids).logits, run.model()(
        batch.input_ids), atol=1e-5, rtol=1e-5)
    for layer, pattern in enumerate(out.attentions):
        torch.testing.assert_close(pattern[0], acts[f"pattern[{layer}]"][0], atol=1e-5,
                                   rtol=1e-5)
    fused = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", attn_implementation="sdpa")
    assert fused.config._attn_implementation == "sdpa"  # the loader's choice still wins


@torch.no_grad()
def test_binding_prompts_reach_the_exported_model_through_its_tokenizer(tmp_path):
    """gpt12 on binding (newline tokens; no bos/eos), random weights, saved and reloaded."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    task, net, _ = frozen_smoke_model("binding", "gpt12")
    for p in net.parameters():
        p.normal_(0.0, 0.2)
    hf = to_gpt_neox(net, tokenizer_of(task))
    assert (hf.config.bos_token_id, hf.config.eos_token_id) == (None, None)  # not 0 and 2
    hf.save_pretrained(tmp_path / "hf")
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    row = [int(i) for i in task.split("test").ids[0] if i != task.pad_id]
    ids = tok(" ".join(task.vocab[i] for i in row), return_tensors="pt").input_ids
    assert ids[0].tolist() == row
    ours, acts = run_with_cache(net, ids, ["pattern[1]"])
    out = model(input_ids=ids, output_attentions=True)
    torch.testing.assert_close(out.logits, ours, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.attentions[1], acts["pattern[1]"], atol=1e-5, rtol=1e-5)


def test_an_attention_implementation_other_than_eager_or_sdpa_is_refused():
    task, net, _ = frozen_smoke_model("counting", "rope2")
    assert to_gpt_neox(net, attn_implementation="sdpa").config._attn_implementation == "sdpa"
    with pytest.raises(UsageError, match="choose from eager, sdpa"):
        to_gpt_neox(net, attn_implementation="flash_attention_2")
