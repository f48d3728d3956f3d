"""`translators.oauth`: the Bearer challenge and the protected-resource metadata rewritten for the
proxy's public URL, each rewrite with its inverse (MCP "Authorization"; RFC 6750 §3; RFC 9728;
docs/decisions.md §80, §81)."""

from __future__ import annotations

import pytest

from translators.oauth import (
    AuthChallenge,
    authorization_servers,
    bearer_params,
    cache_lifetime_ms,
    challenge_error,
    format_bearer,
    is_bearer_challenge,
    metadata_for_resource,
    metadata_url,
    origin_and_path,
    resource_metadata_of,
    resource_of_metadata_url,
    with_resource_metadata,
)

SDK_401 = (
    'Bearer error="invalid_token", error_description="Authentication required", '
    'resource_metadata="http://10.0.0.5:8000/.well-known/oauth-protected-resource/mcp"'
)
PROXY_METADATA = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"


def test_the_challenge_names_the_proxys_metadata_and_keeps_every_other_param():
    rewritten = with_resource_metadata(SDK_401, PROXY_METADATA)
    assert rewritten == (
        'Bearer error="invalid_token", error_description="Authentication required", resource_metadata="' + PROXY_METADATA + '"'
    )


def test_the_challenge_rewrite_is_its_own_inverse_given_the_value_it_replaced():
    original = resource_metadata_of(SDK_401)
    assert original == "http://10.0.0.5:8000/.well-known/oauth-protected-resource/mcp"
    assert with_resource_metadata(with_resource_metadata(SDK_401, PROXY_METADATA), original) == SDK_401


def test_a_challenge_without_resource_metadata_gets_one_last():
    given = 'Bearer realm="mcp", error="insufficient_scope", scope="files:read files:write"'
    assert with_resource_metadata(given, PROXY_METADATA) == (
        'Bearer realm="mcp", error="insufficient_scope", scope="files:read files:write", resource_metadata="'
        + PROXY_METADATA
        + '"'
    )


def test_bearer_params_read_tokens_and_quoted_strings_and_format_is_their_inverse():
    params = bearer_params('bearer error=invalid_token, error_description="a \\"quoted\\" word, and a comma"')
    assert params == [("error", "invalid_token"), ("error_description", 'a "quoted" word, and a comma')]
    assert bearer_params(format_bearer(params)) == params
    assert format_bearer(params) == 'Bearer error="invalid_token", error_description="a \\"quoted\\" word, and a comma"'
    assert bearer_params("Bearer") == []


@pytest.mark.parametrize("header", ['Basic realm="x"', 'Bearer error="x" junk', "Bearer =x"])
def test_what_is_not_one_bearer_challenge_is_refused(header):
    with pytest.raises(ValueError):
        bearer_params(header)
    assert resource_metadata_of(header) is None


@pytest.mark.parametrize(
    ("status", "header", "expected"),
    [
        (401, SDK_401, True),
        (403, 'Bearer error="insufficient_scope"', True),
        (401, 'BEARER realm="x"', True),
        (401, 'Basic realm="x"', False),
        (401, None, False),
        (404, SDK_401, False),
    ],
)
def test_which_answers_are_challenges_to_relay(status, header, expected):
    assert is_bearer_challenge(status, header) is expected


def test_the_json_rpc_error_of_a_challenge():
    assert challenge_error(401, SDK_401, "main").to_dict() == {"code": -32600, "message": "Unauthorized: Authentication required"}
    forbidden = challenge_error(403, 'Bearer error="insufficient_scope"', "main")
    assert (forbidden.code, forbidden.message, forbidden.http_status) == (-32600, "Forbidden: insufficient_scope", 403)
    bare = challenge_error(401, "Bearer", "main")
    assert bare.message == "Unauthorized: backend 'main' asks for authorization"
    challenge = AuthChallenge(401, SDK_401, "main")
    assert (challenge.status, challenge.www_authenticate, challenge.http_status, challenge.code) == (401, SDK_401, 401, -32600)


@pytest.mark.parametrize(
    ("resource", "url"),
    [
        ("https://mcp.example.com/mcp", "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"),
        ("https://mcp.example.com/a/b/", "https://mcp.example.com/.well-known/oauth-protected-resource/a/b"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080/.well-known/oauth-protected-resource"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/.well-known/oauth-protected-resource"),
    ],
)
def test_the_metadata_url_of_a_resource_and_back(resource, url):
    assert metadata_url(resource) == url
    assert resource_of_metadata_url(url) == resource.rstrip("/")


def test_a_url_outside_the_well_known_path_names_no_resource():
    with pytest.raises(ValueError):
        resource_of_metadata_url("https://mcp.example.com/mcp")


BACKEND_DOCUMENT = {
    "resource": "http://10.0.0.5:8000/mcp",
    "authorization_servers": ["https://auth.example.com/"],
    "scopes_supported": ["mcp:tools"],
    "bearer_methods_supported": ["header"],
}


def test_the_metadata_names_the_proxy_as_the_resource_and_back():
    served = metadata_for_resource(BACKEND_DOCUMENT, "https://mcp.example.com/mcp")
    assert served == {**BACKEND_DOCUMENT, "resource": "https://mcp.example.com/mcp"}
    assert metadata_for_resource(served, BACKEND_DOCUMENT["resource"]) == BACKEND_DOCUMENT
    assert BACKEND_DOCUMENT["resource"] == "http://10.0.0.5:8000/mcp"  # not changed in place


@pytest.mark.parametrize(
    "document",
    [
        [],
        {"authorization_servers": ["https://a"]},
        {"resource": "x"},
        {"resource": "x", "authorization_servers": []},
        {"resource": "x", "authorization_servers": [1]},
    ],
)
def test_what_is_not_a_metadata_document_is_refused(document):
    with pytest.raises(ValueError):
        metadata_for_resource(document, "https://mcp.example.com/mcp")


def test_backends_agree_on_authorization_servers_a_trailing_slash_aside():
    other = {**BACKEND_DOCUMENT, "authorization_servers": ["https://auth.example.com"]}
    assert authorization_servers(BACKEND_DOCUMENT) == authorization_servers(other) == frozenset({"https://auth.example.com"})


@pytest.mark.parametrize(
    ("cache_control", "ms"),
    [
        ("public, max-age=3600", 3_600_000),
        ("max-age=60, s-maxage=5", 5_000),
        ('max-age="30"', 30_000),
        ("no-store", 0),
        ("max-age=60, no-cache", 0),
        ("private, max-age=60", 0),
        ("public", 0),
        (None, 0),
    ],
)
def test_how_long_a_document_is_kept(cache_control, ms):
    assert cache_lifetime_ms(cache_control) == ms


def test_a_url_as_origin_and_path():
    assert origin_and_path("https://h:8443/a/b?q=1#f") == ("https://h:8443", "/a/b")
    assert origin_and_path("http://h") == ("http://h", "")
    with pytest.raises(ValueError):
        origin_and_path("h/mcp")


def test_a_resource_metadata_in_any_case_is_replaced_once_never_kept():
    """RFC 9110 §11.2: auth-param names are case-insensitive, so `RESOURCE_METADATA` is the backend's
    metadata URL too: it is replaced in place, and no second one is added beside it."""
    backend = 'Bearer error="invalid_token", RESOURCE_METADATA="http://10.9.8.7:9999/x", scope="a"'
    assert with_resource_metadata(backend, PROXY_METADATA) == (
        f'Bearer error="invalid_token", resource_metadata="{PROXY_METADATA}", scope="a"'
    )
    assert resource_metadata_of(backend) == "http://10.9.8.7:9999/x"


def test_the_bearer_challenge_is_found_beside_other_schemes_in_one_header_or_several():
    from translators.oauth import bearer_challenge, challenges

    # RFC 9110 §11.6.1's own example: two challenges in one value, a quoted comma in a param.
    example = 'Newauth realm="apps", type=1, title="Login to \\"apps\\"", Basic realm="simple"'
    assert challenges(example) == ['Newauth realm="apps", type=1, title="Login to \\"apps\\""', 'Basic realm="simple"']
    assert ", ".join(challenges(example)) == example  # the inverse: the challenges joined again
    dpop = 'DPoP algs="ES256", Bearer resource_metadata="http://10.0.0.5/x", scope="a b"'
    assert bearer_challenge([dpop]) == 'Bearer resource_metadata="http://10.0.0.5/x", scope="a b"'
    assert bearer_challenge(['Basic realm="x"', 'bearer error="invalid_token"']) == 'bearer error="invalid_token"'
    quoted = 'Bearer error_description="a, Basic b", scope="c"'  # a comma and a scheme inside quotes
    assert challenges(quoted) == [quoted]
    assert bearer_challenge(['Basic realm="x"']) is None
    assert (is_bearer_challenge(401, ['Basic realm="x"', "Bearer"]), is_bearer_challenge(401, ['Basic realm="x"'])) == (
        True,
        False,
    )
