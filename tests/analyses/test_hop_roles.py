"""Binding's hop-role attention targets (`hop<h>`, `hop<h>_at_query`) on hand-written programs,
and the circuits analysis finding the hop head of a hand-built transformer: its hop score
picks the head out, and ablating it costs two-hop programs, not one-hop ones."""
import math

import numpy as np
import torch

from study.analyses.common.context import AnalysisContext
from study.core import registry
from study.tasks.binding.vocab import COLON, DIGIT0, EQ, LETTER0


def _task(**overrides):
    e = registry.get("task", "binding")
    return e.obj(e.make_config("smoke", overrides))


def _encode(task, programs: list[str]) -> np.ndarray:
    """Programs as text, one line each (`"a=1\\nb=a\\n#b:"`), to (n, width) ids padded right."""
    rows = [task.encode(text) for text in programs]
    width = max(len(r) for r in rows)
    return np.array([r + [task.pad_id] * (width - len(r)) for r in rows], np.int64)


def _where(target, i: int) -> tuple[set, set]:
    """(query positions, key positions) of program i under one target."""
    query, keys = target
    return set(np.flatnonzero(query[i]).tolist()), set(np.flatnonzero(keys[i]).tolist())


def _line(k: int) -> set:
    return set(range(4 * k, 4 * k + 4))


PROGRAMS = [
    # depth 2: b copies a (line 0); line 2 a distractor
    ("a=1\nb=a\nc=3\n#b:", {"hop1": ({13, 14}, _line(1)), "hop2": ({6, 7}, _line(0)),
                            "hop2_at_query": ({14}, _line(0))}),
    # reassignment: c reads a's binding in force (line 2), not its first one (line 0)
    ("a=1\nb=a\na=2\nc=a\n#c:", {"hop1": ({17, 18}, _line(3)), "hop2": ({14, 15}, _line(2)),
                                 "hop2_at_query": ({18}, _line(2))}),
    # the queried letter reassigned: the query reads its last assignment (line 2)
    ("b=5\na=1\nb=a\n#b:", {"hop1": ({13, 14}, _line(2)), "hop2": ({10, 11}, _line(1)),
                            "hop2_at_query": ({14}, _line(1))}),
    # depth 3
    ("x=7\ny=x\nz=y\nw=4\n#z:", {"hop1": ({17, 18}, _line(2)), "hop2": ({10, 11}, _line(1)),
                                 "hop2_at_query": ({18}, _line(1)), "hop3": ({6, 7}, _line(0)),
                                 "hop3_at_query": ({18}, _line(0))}),
    # depth 1
    ("a=4\nb=6\n#a:", {"hop1": ({9, 10}, _line(0))}),
]


def test_hop_targets_select_the_reading_positions_and_the_defining_lines():
    task = _task()  # max_depth 4
    ids = _encode(task, [text for text, _ in PROGRAMS])
    targets = task.attention_targets(ids)
    hops = {f"hop{h}" for h in range(1, 5)} | {f"hop{h}_at_query" for h in range(2, 5)}
    assert hops | {"chain", "root", "query_line"} == set(targets)
    for i, (text, expected) in enumerate(PROGRAMS):
        for name in hops:
            query, keys = _where(targets[name], i)
            if name in expected:
                assert (query, keys) == expected[name], (text, name)
            else:  # a program shallower than the hop has no query rows for it
                assert query == set(), (text, name)
        # the first hop reads the line `query_line` reads, from the query's letter too
        assert _where(targets["query_line"], i)[1] == expected["hop1"][1]


def test_hop_keys_tile_the_query_chain_of_generated_programs():
    """Reassignment included: hops 1..depth take each chain line once, and nothing else."""
    from study.tasks.binding.causal import interpret

    task = _task()
    ids = task.split("test").ids[:200].astype(np.int64)
    depth = interpret(ids)["depth"]
    targets = task.attention_targets(ids)
    hops = [targets[f"hop{h}"] for h in range(1, task.config.max_depth + 1)]
    assert (sum(keys.astype(int) for _, keys in hops) == targets["chain"][1]).all()
    for h, (query, keys) in enumerate(hops, start=1):
        assert (query.sum(1) == 2 * (depth >= h)).all() and (keys.sum(1) == 4 * (depth >= h)).all()


def test_hop_names_run_to_the_task_depth_or_the_deepest_chain():
    task = _task(max_depth=2)

    def hops(programs):
        return {n for n in task.attention_targets(_encode(task, programs)) if n.startswith("hop")}

    assert hops(["a=4\nb=6\n#a:"]) == {"hop1", "hop2", "hop2_at_query"}
    assert hops(["a=4\nb=6\n#a:", "x=7\ny=x\nz=y\n#z:"]) == {
        "hop1", "hop2", "hop2_at_query", "hop3", "hop3_at_query"}


# --- a hand-built transformer with one hop head ---------------------------------------------

def _planted_hop_network(task):
    """attn2, 3 layers x 2 heads, weights set by hand; exact on binding programs of depth <= 2
    without reassignment. Residual: one-hot token | one-hot position | 1 | G | R | Dv | O.
    - layer 0 head 0 writes G, the line's letter: a right-hand side reads its own line's
      left letter (2 back), `:` the query letter, every other position itself;
    - layer 0 head 1 writes R, the letter a position reads: a right-hand side itself, a
      newline the right-hand side before it (`#`, never a letter, for the query letter);
    - layer 1 head 0, THE HOP HEAD: a position reading letter y (R = y) attends to the
      right-hand side of the line assigning y (G = y) and writes its digit into Dv; a position
      reading no letter rests on the `=` tokens (no value);
    - layer 2 head 0, the output head: `:` (and the query letter; G = q) attends to the
      right-hand side of q's line and copies its digit, or the digit the hop head resolved
      there, into O; W_U reads O, and answers PAD (wrong) where O holds no digit, so that
      the softmax's leak onto other lines' digits never passes for an answer.
    Heads 1 of layers 1 and 2 are empty (uniform attention, no output); no MLP."""
    V, S = len(task.vocab), task.seq_len
    sizes = dict(tok=V, pos=S, one=1, G=26, R=26, Dv=10, O=10)
    at, d = {}, 0
    for name, size in sizes.items():
        at[name], d = d, d + size

    def tok(t):
        return at["tok"] + t

    def pos(p):
        return at["pos"] + p

    letters = [LETTER0 + i for i in range(26)]
    digits = [DIGIT0 + i for i in range(10)]
    me = registry.get("model", "attn2")
    cfg = me.make_config("smoke", {"n_layers": "3", "n_heads": "2", "d_model": str(d),
                                   "d_head": str(d), "d_mlp": "1"})
    net = me.obj(cfg, V, S).eval()
    A = 20.0
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        for t in range(V):
            net.W_E[t, tok(t)] = 1
            net.W_E[t, at["one"]] = 1
        for p in range(S):
            net.W_pos[p, pos(p)] = 1
        qk = torch.zeros(3, 2, d, d)  # score(query x, key y) = x @ qk @ y
        ov = torch.zeros(3, 2, d, d)
        for p in range(S):  # layer 0: where each position gathers from
            qk[0, 0, pos(p), pos(p - 2 if p % 4 == 2 else p)] = A
            qk[0, 1, pos(p), pos(p - 1 if p % 4 in (1, 3) else p)] = A
        for p in range(S):  # `:` reads the query letter: a letter at a position 1 mod 4
            qk[0, 0, tok(COLON), pos(p)] = 2 * A * (p % 4 == 1)
        for i, t in enumerate(letters):
            qk[0, 0, tok(COLON), tok(t)] = 2 * A
            ov[0, 0, tok(t), at["G"] + i] = 1
            ov[0, 1, tok(t), at["R"] + i] = 1
            qk[1, 0, at["R"] + i, at["G"] + i] = A  # hop: letter read -> its line
            qk[2, 0, at["G"] + i, at["G"] + i] = A  # output: query letter -> its line
        for p in range(S):
            if p % 4 == 2:  # keys on right-hand sides
                qk[1, 0, at["one"], pos(p)] = A
                qk[2, 0, at["one"], pos(p)] = A
        qk[1, 0, at["one"], tok(EQ)] = 1.5 * A  # rest on `=` when reading no letter
        qk[2, 0, at["one"], tok(COLON)] = -2 * A  # `:` holds G = q but is no line
        for i, t in enumerate(digits):
            ov[1, 0, tok(t), at["Dv"] + i] = 1
            ov[2, 0, tok(t), at["O"] + i] = 1
            ov[2, 0, at["Dv"] + i, at["O"] + i] = 1
            net.W_U[at["O"] + i, t] = 10
        net.W_U[at["one"], task.pad_id] = 1  # no digit in O: no answer (not a leaked digit)
        for layer, block in enumerate(net.blocks):
            eye = torch.eye(d).expand(2, d, d)
            block.attn.W_Q.copy_(qk[layer] * math.sqrt(d))  # attention scales by d_head**-0.5
            block.attn.W_K.copy_(eye)
            block.attn.W_V.copy_(ov[layer])
            block.attn.W_O.copy_(eye)
    for p in net.parameters():
        p.requires_grad_(False)
    return net


def test_circuits_finds_the_planted_hop_head_and_its_cost_is_on_deep_programs(tmp_path):
    task = _task(n_lines=4, n_letters=8, max_depth=2, depth_exponent=0, p_reassign=0,
                 gen_max_lines=4, gen_max_hops=2, n_train=200, n_val=50, n_test=200,
                 n_gen_per_value=5, n_gen_heldout=20)
    net = _planted_hop_network(task)
    cfg = registry.get("analysis", "circuits").make_config(
        "smoke", {"n_examples": "150", "ablation": "zero",
                  "n_induction": "4"})
    ctx = AnalysisContext(net, task, cfg, "attn2", 0, torch.device("cpu"), tmp_path, 0)
    out = registry.get("analysis", "circuits").obj(ctx)
    circ = out["circuits"]
    score = {(r.layer, r.head, r.score): r.value for r in circ.itertuples() if r.head >= 0}

    def best(name):
        return max(((l, h) for l, h, s in score if s == name), key=lambda k: score[(*k, name)])

    assert {"attn_to_hop1", "attn_to_hop2", "attn_to_hop2_at_query"} <= set(circ.score)
    assert best("attn_to_hop2") == (1, 0) and score[(1, 0, "attn_to_hop2")] > 0.95
    assert best("attn_to_hop1") == (2, 0) and score[(2, 0, "attn_to_hop1")] > 0.95
    # the hop head resolves at the line, not lazily at `:`
    assert score[(1, 0, "attn_to_hop2_at_query")] < 0.5

    abl = out["ablation"]
    acc = {(r.layer, r.head, r.stratum): r.accuracy for r in abl.itertuples()}
    assert acc[(-1, -1, "depth=1")] == 1.0 and acc[(-1, -1, "depth=2")] == 1.0
    assert acc[(1, 0, "depth=1")] == 1.0  # one-hop programs never need the hop head
    assert acc[(1, 0, "depth=2")] == 0.0
    assert acc[(1, 1, "depth=2")] == 1.0  # an empty head costs nothing

