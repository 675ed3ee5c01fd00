"""What crosses between the ingress's flow and a pool's engine replicas: the records
passed both ways (:mod:`app.pool.records`) and the :class:`~app.pool.client.PoolClient`
contract the flow reaches a pool through (Serve handles in production, fakes in tests).
The engine and the flow both import it; it imports neither."""
