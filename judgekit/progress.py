"""Progress bars of `judgekit eval`: one bar per sweep point (problems done, tokens/s, ETA) under an overall bar
(every (point, problem) pair of this rank, with the run's ETA). tqdm, on stderr; off when stderr is not a
terminal (logs, CI) unless forced, and off with --quiet."""

from __future__ import annotations

import sys
import time


class EvalProgress:
    def __init__(self, total: int, enabled: bool | None = None, stream=None) -> None:
        from tqdm.auto import tqdm

        self.stream = stream or sys.stderr
        self.enabled = bool(self.stream.isatty()) if enabled is None else enabled
        self._tqdm = tqdm
        self.overall = tqdm(total=total, desc="eval", unit="pair", position=0, file=self.stream,
                            disable=not self.enabled, dynamic_ncols=True)
        self.bar = None
        self._tokens, self._start = 0, time.perf_counter()

    def start_point(self, label: str, problems: int) -> None:
        self.close_point()
        self.bar = self._tqdm(total=problems, desc=label, unit="problem", position=1, leave=False,
                              file=self.stream, disable=not self.enabled, dynamic_ncols=True)
        self._tokens, self._start = 0, time.perf_counter()

    def problem_done(self, gen) -> None:
        """Called from the decoder's on_finish, once per finished problem."""
        self._tokens += gen.stats.new_tokens
        rate = self._tokens / max(time.perf_counter() - self._start, 1e-9)
        if self.bar is not None:
            self.bar.set_postfix_str(f"{rate:.1f} tok/s", refresh=False)
            self.bar.update(1)
        self.overall.update(1)

    def close_point(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def close(self) -> None:
        self.close_point()
        self.overall.close()
