"""A progress bar for training: a budro callback drawn by :mod:`tqdm` (on stderr by default).

``BuDROClassifier(verbose=1)`` adds one for the duration of ``fit``; ``budro fit`` and ``budro
demo`` show it unless ``--quiet``.  The bar shows the round, the robust and plain loss of the
round, the time spent and tqdm's estimate of the time left::

    BuDRO:  37%|███▋      | 37/100 [00:02<00:03, 18.1round/s, robust=0.5124, plain=0.4871]
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """Callback: one :class:`tqdm.tqdm` bar per fit, advanced once per BuDRO round.

    Parameters
    ----------
    stream : file-like, optional
        Where to draw; default ``sys.stderr`` at draw time.
    desc : str, default "BuDRO"
        Text in front of the bar.
    disable : bool or None, default False
        As tqdm's ``disable``: True draws nothing, None draws only on a terminal.
    **tqdm_params :
        Further keyword arguments of :class:`tqdm.tqdm` (``mininterval``, ``ncols``, ...).

    The bar opens at a fit's first round and closes after its last round, or when :meth:`close`
    is called (a fit stopped early by another callback).  The callback pickles and deep-copies
    without its open bar or stream, so an estimator holding it stays clonable and savable.
    """

    def __init__(self, stream: TextIO | None = None, *, desc: str = "BuDRO", disable: bool | None = False,
                 **tqdm_params: Any):
        self.stream = stream
        self.desc = desc
        self.disable = disable
        self.tqdm_params = tqdm_params
        self._bar = None

    def __getstate__(self) -> dict:
        # A fitted estimator keeps its callbacks: never pickle an open bar or stream.
        state = dict(self.__dict__)
        state["_bar"] = None
        state["stream"] = None
        return state

    def __deepcopy__(self, memo: dict) -> "ProgressBar":
        # sklearn.base.clone deep-copies callbacks: the copy starts without a bar.
        return ProgressBar(None, desc=self.desc, disable=self.disable, **self.tqdm_params)

    def __call__(self, info: Any) -> None:
        from tqdm import tqdm

        step = info.record.step
        if self._bar is not None and step == 0:
            self.close()  # a new fit with the same callback
        if self._bar is None:
            params = dict(self.tqdm_params)
            stream = sys.stderr if self.stream is None else self.stream
            if not getattr(stream, "isatty", lambda: False)():
                params.setdefault("mininterval", 5.0)  # a log file: a line every 5 s, not every round
            self._bar = tqdm(total=max(int(info.n_steps), 1), initial=step, desc=self.desc, unit="round",
                             file=self.stream, disable=self.disable, dynamic_ncols=True, **params)
        self._bar.set_postfix({"robust": f"{info.record.robust_loss:.4f}", "plain": f"{info.record.plain_loss:.4f}"},
                              refresh=False)
        self._bar.update(step + 1 - self._bar.n)
        if step + 1 >= info.n_steps:
            self.close()

    def close(self) -> None:
        """Close the open bar, if any (safe to call twice)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
