"""Progress bars for long runs (tqdm on stderr), or a no-op when disabled."""

from __future__ import annotations


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(*, total: int, desc: str, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="req", leave=False, mininterval=0.5)
