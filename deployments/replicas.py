"""Which replicas a deployment of this application has, as the warm-ups need to know."""

from __future__ import annotations

# The deployment name of each engine pool (by role).
POOL_NAMES = {"prefill": "Prefill", "decode": "Decode", "colocated": "Colocated"}


def replica_actor_names(application: str, deployment: str) -> list[str]:
    """The actor names of ``deployment``'s live replicas (starting ones included), as Serve
    names them (``SERVE_REPLICA::<app>#<deployment>#<id>``, namespace ``serve``).

    Read from the named actors Ray's GCS lists, so it needs neither Serve's controller
    nor the dashboard.
    """
    import ray.util
    from ray.serve._private.common import ReplicaID

    found = []
    for actor in ray.util.list_named_actors(all_namespaces=True):
        name = actor["name"]
        if not ReplicaID.is_full_id_str(name):
            continue
        deployment_id = ReplicaID.from_full_id_str(name).deployment_id
        if (deployment_id.app_name, deployment_id.name) == (application, deployment):
            found.append(name)
    return sorted(found)


def replica_ids(application: str, deployment: str) -> list[str]:
    """Unique ids of ``deployment``'s live replicas (starting ones included)."""
    from ray.serve._private.common import ReplicaID

    names = replica_actor_names(application, deployment)
    return sorted(ReplicaID.from_full_id_str(name).unique_id for name in names)


def running_replicas(application: str, deployment: str) -> int:
    """How many of ``deployment``'s replicas Serve's controller counts as running."""
    return running_counts(application).get(deployment, 0)


def running_counts(application: str) -> dict[str, int]:
    """How many replicas of each deployment of ``application`` Serve counts as running."""
    from ray import serve
    from ray.serve._private.common import ReplicaState

    status = serve.status().applications.get(application)
    if status is None:
        return {}
    return {
        name: int(deployment.replica_states.get(ReplicaState.RUNNING, 0))
        for name, deployment in status.deployments.items()
    }
