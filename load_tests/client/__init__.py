"""The client side of every benchmark: a closed loop of streams (``stream_bench``), an open
loop with Poisson arrivals and goodput (``loadgen``), request mixes (``workloads``),
latency statistics (``stats``), SSE as the spec splits it (``sse``), a streamed completion
over aiohttp (``aio_stream``) and each answer's text against the tokenizer (``text_oracle``).
Tests import it too."""
