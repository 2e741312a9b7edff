"""Damaging files as real faults do, and checking that a command stops with one line."""

import pytest


def exit_code_of(main, arguments) -> int:
    """Run a command's ``main`` in this process; the code it exits with."""
    with pytest.raises(SystemExit) as exit_info:
        main([*map(str, arguments)])
    return exit_info.value.code


def truncate(path) -> None:
    """Cut a file to half its size, as a full disk or an interrupted copy leaves it."""
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2])


def flip_byte(path) -> None:
    """Invert the bits of the middle byte of a file, as a bad disk sector or memory error does."""
    content = bytearray(path.read_bytes())
    content[len(content) // 2] ^= 0xFF
    path.write_bytes(bytes(content))


def assert_one_line(stderr: str, *fragments: str) -> None:
    assert stderr.strip().count("\n") == 0, stderr
    for fragment in fragments:
        assert fragment in stderr, stderr


def file_tree(directory) -> dict[str, bytes | str]:
    """Every file under ``directory`` with its bytes (a symlink with its target): what a refused command must
    leave as it was."""
    return {str(path.relative_to(directory)): str(path.readlink()) if path.is_symlink() else path.read_bytes()
            for path in sorted(directory.rglob("*")) if path.is_symlink() or path.is_file()}
