"""What only the tests need beside ``load_tests.client`` and ``load_tests.systems``: hostile
request bodies (``abuse_bodies``) and a client of an engine's NIXL side channel
(``side_channel_client``)."""
