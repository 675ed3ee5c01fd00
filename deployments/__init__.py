"""Thin Ray Serve shells around `app/`: the ingress, the engine pools, the app builder."""
