"""core: the ground floor every stage's commands stand on; it imports neither mujoco nor torch.

- ``core.options``: command-line options from config dataclasses, and their checks.
- ``core.errors``: one-line errors and warnings, and the tests' crash points.
- ``core.progress``: progress bars.
- ``core.files``: the code version, repository-relative paths, atomic JSON writes.
- ``core.cluster``: the dask client of a scheduler or of a local cluster.
"""
