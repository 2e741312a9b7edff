"""One-line errors: each reaches stderr as one whole write, so the ranks of a torchrun job that fail
together never splice their lines (each rank's line must stay greppable on its own)."""

import io

import pytest

from core.errors import Failure, fail, warn


class Writes(io.StringIO):
    """A stderr that remembers each write apart."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return super().write(text)


def test_an_error_and_a_warning_are_each_one_write_with_their_newline(monkeypatch):
    stderr = Writes()
    monkeypatch.setattr("sys.stderr", stderr)
    warn("the store is old")
    with pytest.raises(Failure) as raised:
        fail("batch size 100000 is larger than this rank's 134 samples")
    assert stderr.calls == ["warning: the store is old\n",
                            "error: batch size 100000 is larger than this rank's 134 samples\n"]
    assert raised.value.code == 2 and raised.value.message.startswith("batch size 100000")
