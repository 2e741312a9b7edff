"""The policies: the interface shared by training and evaluation, and its kinds.

``policy`` holds the ``Policy`` interface, ``PolicySpec``, ``Normalizer``, the state-based
``mlp`` policy and ``make_policy`` / ``policy_spec``, which build any kind; ``vision`` is
the ``cnn`` policy (camera encoders plus the MLP head); ``lerobot_policies`` puts
LeRobot's ACT and Diffusion Policy behind the same interface; ``options`` holds the options
a command line gives them (``PolicyOptions``, with each kind's own group). Nothing is imported here
(lerobot takes seconds to import): import the module you need.
"""
