"""A query parameter the route takes once is refused when given twice (REPEATED_PARAMETER);
a list parameter takes as many values as it is given."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import headers_for

from mnemo.bootstrap import Platform
from mnemo.settings import GatewaySettings


@pytest.fixture
def client(platform: Platform) -> Iterator[TestClient]:
    with TestClient(create_app(platform, GatewaySettings(admin_token="op-token-for-tests"))) as c:
        yield c


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v1/events?after_offset=0&after_offset=5", "after_offset"),
        ("/v1/subjects/user:U1/memories?limit=1&limit=50", "limit"),
        ("/v1/subjects/user:U1/memories?type=fact&key=a&key=b", "key"),
    ],
)
def test_a_single_valued_parameter_given_twice_is_refused(
    client: TestClient, path: str, name: str
) -> None:
    answer = client.get(path, headers=headers_for("acme", "tester"))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("REPEATED_PARAMETER", name)


def test_a_list_parameter_takes_every_value_and_one_value_still_passes(
    client: TestClient,
) -> None:
    headers = headers_for("acme", "tester")
    listed = client.get(
        "/v1/subjects/user:U1/memories?type=fact&type=preference&tag=a&tag=b", headers=headers
    )
    assert listed.status_code == 200, listed.text
    once = client.get("/v1/events?after_offset=0&limit=5", headers=headers)
    assert once.status_code == 200, once.text


def test_a_list_parameter_takes_a_bounded_number_of_values(client: TestClient) -> None:
    """Each tag of a listing is a store read of its own: a thousand of them in one URL
    were a thousand reads."""
    headers = headers_for("acme", "tester")
    tags = "&".join(f"tag=t{i}" for i in range(33))
    many = client.get(f"/v1/subjects/user:U1/memories?{tags}", headers=headers)
    assert many.status_code == 422, many.text
    assert many.json()["error"]["field"] == "tag"
    tags = "&".join(f"tag=t{i}" for i in range(32))
    assert client.get(f"/v1/subjects/user:U1/memories?{tags}", headers=headers).status_code == 200
    search = {"query": "tea", "types": ["fact"] * 17}
    refused = client.post("/v1/search", json=search, headers=headers)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["field"] == "types"


@pytest.mark.parametrize(
    ("path", "name"),
    [
        # a near miss of after_offset: the log would be paged from its start
        ("/v1/events?after=5000", "after"),
        # the filter is `type`: the list would come back unfiltered
        ("/v1/subjects/user:U1/memories?types=fact", "types"),
        ("/v1/admin/status?verbose=1", "verbose"),
    ],
)
def test_a_parameter_the_route_does_not_declare_is_refused_by_name(
    client: TestClient, path: str, name: str
) -> None:
    headers = {**headers_for("acme", "tester"), "X-Mnemo-Admin-Token": "op-token-for-tests"}
    answer = client.get(path, headers=headers)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("UNKNOWN_PARAMETER", name)
    assert "5000" not in answer.text


def test_a_credential_in_the_query_is_refused_as_one_not_as_an_unknown_parameter(
    client: TestClient,
) -> None:
    answer = client.get("/v1/events?api_key=whatever", headers=headers_for("acme", "tester"))
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "CREDENTIAL_IN_URL"


def test_paths_outside_the_api_take_any_query(client: TestClient) -> None:
    """Probes, scrapers and the console's links are not the API's routes."""
    assert client.get("/healthz?probe=1").status_code == 200
    assert client.get("/console/?subject=user:U1&tenant=acme").status_code in (200, 307)
