"""Sizing each pool: the SLO autoscaling policy, the signals it reads from replicas and
the ingress, and its check against the planner's model."""
