"""The progress bar of a training run: steps, and at each log row the training loss, the
newest evaluation's accuracy and tokens per second."""
from __future__ import annotations

from tqdm.auto import tqdm


class Progress:
    def __init__(self, total: int, initial: int, task: str, model: str):
        # disable=None: silent when stderr is not a terminal (logs, CI)
        self.bar = tqdm(total=total, initial=initial, disable=None, desc=f"{task}/{model}",
                        unit="step", dynamic_ncols=True, smoothing=0.05)

    def show(self, step: int, loss: float, acc: dict[str, float], tokens_per_s: float) -> None:
        self.bar.update(step - self.bar.n)
        self.bar.set_postfix(loss=f"{loss:.4f}", acc=_fmt_acc(acc), tok_s=f"{tokens_per_s:.3g}")

    def close(self) -> None:
        self.bar.close()


def _fmt_acc(acc: dict[str, float]) -> str:
    """The validation accuracy, else the first split's; "-" before any evaluation."""
    if not acc:
        return "-"
    key = "val" if "val" in acc else next(iter(acc))
    return f"{acc[key]:.3f}"
