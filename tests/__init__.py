"""The test suite, one room per package (tests/train holds train/'s tests, ...).

tests/ and each room are packages, so that test files in two rooms may share a name
(their modules are tests.sim.test_x and tests.eval.test_x); the shared helpers live in
tests/helpers/, which is on the path instead (pyproject.toml).
"""
