"""Digest authentication (``transports/sip/digest.py``) against the RFCs' worked examples:
RFC 2617's (MD5, qop=auth) and RFC 7616's (MD5 and SHA-256), the challenge read from the
RFC's header and the answer's fields written back."""

from __future__ import annotations

import hashlib
import re

import pytest

from voxpipe.transports.sip.digest import (
    Challenge,
    DigestError,
    authorization,
    parse_challenge,
    response,
)

RFC2617_CHALLENGE = (
    'Digest realm="testrealm@host.com", qop="auth,auth-int", '
    'nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", opaque="5ccc069c403ebaf9f0171e9517f40e41"'
)
RFC7616 = dict(
    realm="http-auth@example.org",
    nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v",
    opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS",
    cnonce="f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ",
)


def test_rfc_2617_worked_example() -> None:
    challenge = parse_challenge(RFC2617_CHALLENGE)
    assert challenge == Challenge(
        "testrealm@host.com",
        "dcd98b7102dd2f0e8b11d0f600bfb0c093",
        "MD5",
        ("auth", "auth-int"),
        "5ccc069c403ebaf9f0171e9517f40e41",
    )
    digest = response(challenge, "Mufasa", "Circle Of Life", "GET", "/dir/index.html", "0a4f113b")
    assert digest == "6629fae49393a05397450978507c4ef1"


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [
        ("MD5", "8ca523f5e9506fed4657c9700eebdbec"),
        ("SHA-256", "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1"),
    ],
)
def test_rfc_7616_worked_examples(algorithm: str, expected: str) -> None:
    challenge = parse_challenge(
        f'Digest realm="{RFC7616["realm"]}", qop="auth, auth-int", algorithm={algorithm}, '
        f'nonce="{RFC7616["nonce"]}", opaque="{RFC7616["opaque"]}"'
    )
    digest = response(
        challenge, "Mufasa", "Circle of Life", "GET", "/dir/index.html", RFC7616["cnonce"]
    )
    assert digest == expected


def test_the_authorization_header_answers_the_challenge() -> None:
    challenge = parse_challenge(RFC2617_CHALLENGE)
    value = authorization(challenge, "Mufasa", "Circle Of Life", "REGISTER", "sip:example.com")
    fields = dict(re.findall(r'(\w+)="?([^",]*)"?', value.removeprefix("Digest ")))
    assert fields["username"] == "Mufasa" and fields["uri"] == "sip:example.com"
    assert fields["qop"] == "auth" and fields["nc"] == "00000001"
    assert fields["opaque"] == "5ccc069c403ebaf9f0171e9517f40e41"
    assert fields["response"] == response(
        challenge, "Mufasa", "Circle Of Life", "REGISTER", "sip:example.com", fields["cnonce"]
    )


def test_without_qop_the_digest_is_rfc_2069_s() -> None:
    challenge = parse_challenge('Digest realm="sip.example.com", nonce="abc"')
    value = authorization(challenge, "alice", "pw", "REGISTER", "sip:sip.example.com")
    assert "qop=" not in value and "cnonce" not in value

    def md5(text: str) -> str:
        return hashlib.md5(text.encode()).hexdigest()

    ha1, ha2 = md5("alice:sip.example.com:pw"), md5("REGISTER:sip:sip.example.com")
    assert f'response="{md5(f"{ha1}:abc:{ha2}")}"' in value


@pytest.mark.parametrize(
    "value",
    [
        'Basic realm="x"',
        'Digest nonce="abc"',  # no realm
        'Digest realm="x", nonce="y", algorithm=SHA-512-256',
        'Digest realm="x", nonce="y", qop="auth-int"',
    ],
)
def test_challenges_it_cannot_answer_are_a_clear_error(value: str) -> None:
    with pytest.raises(DigestError):
        parse_challenge(value)
