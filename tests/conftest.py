import sim  # noqa: F401  (first: selects headless MuJoCo rendering before any test imports mujoco)
