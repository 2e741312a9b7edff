"""Fleet learning's parts (train/fleet_learn.py runs them): gates, operators and the supervisor, the deployment
round, the labels retraining reads, and the accounts."""
