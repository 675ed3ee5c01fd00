"""The client's side of the ingress: the OpenAI HTTP API on vLLM's serving layer, the
engine client it drives, readiness and admission at the door, and what a response
reports."""
