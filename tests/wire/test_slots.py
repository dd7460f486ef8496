"""Request slots per server (`wire.slots`): every client on one server shares one limit; no limit, no slots."""

from __future__ import annotations

from crow_cli.wire.slots import server_key, server_slots


def test_one_server_is_one_key_whatever_its_spelling() -> None:
    assert server_key("http://LOCALHOST:80/v1/") == server_key("http://localhost/v1")
    assert server_key("https://h/v1?api-version=1") == server_key("https://h:443/v1")
    assert server_key("http://h:8080/v1") != server_key("http://h:8081/v1")


async def test_clients_of_one_server_share_its_slots_and_the_first_limit_holds() -> None:
    first = server_slots("http://127.0.0.1:9/v1", 1)
    assert first is not None and first is server_slots("http://127.0.0.1:9/v1/", 4)
    async with first:
        assert first.locked()  # a second request to the server waits
    assert server_slots("http://127.0.0.1:9/v1", None) is None
    assert server_slots("http://127.0.0.1:10/v1", 1) is not first
