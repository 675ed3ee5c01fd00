"""What the tests and the load tests share to run the app and talk to it: an app in its
own Ray cluster on loopback (``local_app``), two test hosts in network namespaces
(``testnet_cluster``), SSE line splitting (``sse``), a streamed completion over aiohttp
(``aio_stream``)."""
