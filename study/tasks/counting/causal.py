"""Symbolic algorithms (causal models) of the counting task and their interventions.

Three programs read a counting sequence token by token (`B`, demos, `T`, responses, `E`);
each has named variables, a state *after* each token, and a prediction of the next token:

- `UpDown` (variables `count`, `phase`): each demo adds 1, `T` sets the response phase,
  each response subtracts 1; it emits `E` once the count is back to 0 [paper].
- `UpUp` (`demo_count`, `resp_count`, `phase`): counts demos and responses separately and
  emits `E` once they are equal [paper]. After an intervention the response count can
  exceed the demo count; the program then ends the sequence with an *unscored* `E`, as the
  authors' `CountUpUp.get_token` does (`grantsrb/mas/causal_models.py`: resp_count >
  demo_count returns the EOS with task mask 0), so no output is asked of the model there.
- `CtxDistr` (`count`): the anti-Markovian solution [paper, operationalisation ours]. Its
  `count` after token t is recomputed from the whole prefix as a ±1 sum (+1 per demo token
  before `T`, -1 per response token after it) and `phase` is whether `T` occurred; neither
  is carried from one step to the next. Interchanging `count` at a position therefore
  changes only the prediction made at that position; every later position recomputes it
  from the tokens actually present (which include the token that prediction emitted).

Phases are coded 0 (demonstration) and 1 (response). `obj_count`, the number of demos the
base sequence has, only decides when the demo phase emits `T`; like the authors' code it is
never interchanged (`ignore_keys = {"obj_count"}` in `grantsrb/mas/causal_models.py`).

Interventions follow the authors' `make_counterfactual_seqs`: the base's state after its
token at `base_pos` has the named variables replaced by the source's values after its token
at `source_pos`; the program then runs on from that state and *generates* the rest of the
sequence (it is fed its own outputs, demo tokens drawn at random where several exist), so the
counterfactual sequence is `base[:base_pos + 1]` followed by that continuation up to `E`.
`variable_values` runs all three programs over token ids (the probe variables).
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from study.core.labels import IGNORE
from study.tasks.counting.vocab import ID, VOCAB, Alphabet

DEMO = "<demo>"  # prediction "some demonstration token" (which one is not determined)


def _tally(a: Alphabet, state: dict, tok: str, demo_key: str, resp_key: str) -> dict:
    """A copy of `state` after `tok`: the trigger sets the phase; demo tokens before it add
    to `demo_key`, response tokens after it to `resp_key`."""
    s = dict(state)
    if s["phase"] == 0:
        if tok == a.trig:
            s["phase"] = 1
        elif tok in a.demo:
            s[demo_key] += 1
    elif tok == a.resp:
        s[resp_key] += 1
    return s


class CausalModel(ABC):
    """A program over tokens: `update` reads one token, `predict` names the next one."""

    name = ""
    variables: tuple[str, ...] = ()

    def __init__(self, alphabet: Alphabet):
        self.a = alphabet

    @abstractmethod
    def init(self, obj_count: int) -> dict:
        """The state before the first token, for a sequence of `obj_count` demo tokens."""

    @abstractmethod
    def update(self, state: dict, token: str) -> dict:
        """The state after reading `token`."""

    @abstractmethod
    def predict(self, state: dict) -> str:
        """The next token: `T`, the response token, `E`, or `DEMO` (any demo token)."""

    def scored(self, state: dict) -> bool:
        """Whether the prediction after this state is scored (the response phase)."""
        return state["phase"] == 1

    # --- runs ------------------------------------------------------------------------
    def run(self, tokens, obj_count: int | None = None):
        """States after each token and the predicted next tokens, unintervened.

        `obj_count` defaults to the number of demos before `T` in `tokens`."""
        if obj_count is None:
            obj_count = _demo_count(tokens, self.a)
        state, states, preds = self.init(obj_count), [], []
        for tok in tokens:
            state = self.update(state, tok)
            states.append(dict(state))
            preds.append(self.predict(state))
        return states, preds

    def intervene(self, base, base_pos: int, source, source_pos: int, variables,
                  rng: np.random.Generator | None = None):
        """Counterfactual run of `base` with `variables` copied from `source`.

        Returns (cf_tokens, cf_next, cf_scored): the counterfactual sequence (base up to
        `base_pos`, then the program's own continuation through `E`), the program's next
        token after each cf position (None after `E`) and whether that prediction is scored.
        Demo tokens of the continuation are drawn with `rng` (the first one when None)."""
        bad = [v for v in variables if v not in self.variables]
        if bad:
            raise ValueError(f"{self.name} has no variable {bad[0]!r}; it has {self.variables}")
        src_states, _ = self.run(source)
        swap = {v: src_states[source_pos][v] for v in variables}
        state = self.init(_demo_count(base, self.a))
        tokens = list(base[:base_pos + 1])
        nxt, scored = [], []
        for t, tok in enumerate(tokens):
            state = self.update(state, tok)
            if t == base_pos:
                state.update(swap)
            nxt.append(self.predict(state))
            scored.append(self.scored(state))
        while tokens[-1] != self.a.eos:  # terminates: each phase moves its counter monotonically
            tok = nxt[-1]
            if tok == DEMO:
                k = 0 if rng is None else int(rng.integers(len(self.a.demo)))
                tok = self.a.demo[k]
            tokens.append(tok)
            state = self.update(state, tok)
            nxt.append(self.predict(state) if tok != self.a.eos else None)
            scored.append(self.scored(state) and tok != self.a.eos)
        nxt[-1], scored[-1] = None, False
        return tokens, nxt, scored


def _demo_count(tokens, a: Alphabet) -> int:
    """Number of demonstration tokens before the trigger."""
    n = 0
    for tok in tokens:
        if tok == a.trig:
            break
        n += tok in a.demo
    return n


class UpDown(CausalModel):
    name = "up_down"
    variables = ("count", "phase")

    def init(self, obj_count):
        return {"obj_count": obj_count, "count": 0, "phase": 0}

    def update(self, state, tok):
        s = dict(state)
        if s["phase"] == 0:
            if tok == self.a.trig:
                s["phase"] = 1
            elif tok in self.a.demo:
                s["count"] += 1
        elif tok == self.a.resp:
            s["count"] -= 1
        return s

    def predict(self, s):
        if s["phase"] == 0:
            return self.a.trig if s["count"] >= s["obj_count"] else DEMO
        return self.a.eos if s["count"] <= 0 else self.a.resp


class UpUp(CausalModel):
    name = "up_up"
    variables = ("demo_count", "resp_count", "phase")

    def init(self, obj_count):
        return {"obj_count": obj_count, "demo_count": 0, "resp_count": 0, "phase": 0}

    def update(self, state, tok):
        return _tally(self.a, state, tok, "demo_count", "resp_count")

    def predict(self, s):
        if s["phase"] == 0:
            return self.a.trig if s["demo_count"] >= s["obj_count"] else DEMO
        return self.a.eos if s["resp_count"] >= s["demo_count"] else self.a.resp

    def scored(self, s):
        """Response phase, unless the responses already outnumber the demos: the authors'
        CountUpUp emits that `E` with task mask 0 (`grantsrb/mas/causal_models.py`)."""
        return s["phase"] == 1 and s["resp_count"] <= s["demo_count"]


class CtxDistr(CausalModel):
    """`count` and `phase` are recomputed from the prefix tallies `_demos`, `_resps`, `_trig`
    (the context, never interchanged); an interchanged `count` lives for one prediction."""

    name = "ctx_distr"
    variables = ("count",)

    def init(self, obj_count):
        return {"obj_count": obj_count, "count": 0, "phase": 0, "_demos": 0, "_resps": 0}

    def update(self, state, tok):
        s = _tally(self.a, state, tok, "_demos", "_resps")
        s["count"] = s["_demos"] - s["_resps"]  # recomputed: any interchanged value is dropped
        return s

    predict = UpDown.predict


MODELS = {m.name: m for m in (UpDown, UpUp, CtxDistr)}


def parse_kind(kind: str) -> tuple[str, tuple[str, ...]]:
    """"up_up:demo_count" -> ("up_up", ("demo_count",)); "<model>:full" -> every variable."""
    model, _, var = kind.partition(":")
    if model not in MODELS:
        raise ValueError(kind)
    variables = MODELS[model].variables if var == "full" else (var,)
    if any(v not in MODELS[model].variables for v in variables):
        raise ValueError(kind)
    return model, variables


def variable_values(ids: np.ndarray, alphabet: Alphabet, pad_id: int) -> dict[str, np.ndarray]:
    """Each causal variable's value after every token of unintervened sequences (n, seq_len)
    of one variant: "<model>:<variable>" -> (n, seq_len) int64, -1 at padding (for probes)."""
    out = {f"{m}:{v}": np.full(ids.shape, -1, dtype=np.int64)
           for m, model in MODELS.items() for v in model.variables}
    for i, row in enumerate(ids):
        toks = [VOCAB[t] for t in row.tolist() if t != pad_id]
        for name, model in MODELS.items():
            states, _ = model(alphabet).run(toks)
            for v in model.variables:
                out[f"{name}:{v}"][i, :len(toks)] = [s[v] for s in states]
    return out


def scored_predictions(ids: np.ndarray, alphabet: Alphabet, pad_id: int) -> np.ndarray:
    """(n, seq_len) int64: the Up-Down program's next token after each token of `ids` where
    it is scored, IGNORE elsewhere (and after the EOS)."""
    model = UpDown(alphabet)
    out = np.full(ids.shape, IGNORE, dtype=np.int64)
    for i, row in enumerate(ids):
        toks = [VOCAB[t] for t in row.tolist() if t != pad_id]
        states, preds = model.run(toks)
        for t, (state, tok) in enumerate(zip(states, toks)):
            if tok == alphabet.eos:
                break
            if model.scored(state) and preds[t] in ID:
                out[i, t] = ID[preds[t]]
    return out
