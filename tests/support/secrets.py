"""Generated secrets of each shape the built-in redaction patterns cover (``text.py``), and
lines that differ between Pods only in ids: shared by the unit tests' properties and the tests on a
real API server and Redis.

Each secret strategy yields ``(shown, hidden)``: the text a worker prints, and the part of it that
must never be shown again (the token, the password, the key).
"""

from __future__ import annotations

import string
from typing import Final

from hypothesis import strategies as st

_B64: Final = string.ascii_letters + string.digits + "+/"
_B64URL: Final = string.ascii_letters + string.digits + "-_"
_VALUE: Final = string.ascii_letters + string.digits + "!@#$%^*()[]{}|~+-_./"


def _text(alphabet: str, low: int, high: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=st.sampled_from(alphabet), min_size=low, max_size=high)


Secret = tuple[str, str]


def _bearer(token: str) -> Secret:
    return f"Authorization: Bearer {token}", token


def _pair(key: str, sep: str, value: str) -> Secret:
    return f"{key}{sep}{value}", value


def _aws(tail: str) -> Secret:
    key = "AKIA" + tail
    return f"using access key {key}", key


def _jwt(header: str, payload: str, signature: str) -> Secret:
    token = f"eyJ{header}.eyJ{payload}.{signature}"
    return f"token rejected {token}", token


def _url(scheme: str, user: str, password: str) -> Secret:
    return f"dial {scheme}://{user}:{password}@db.example:5432/app failed", f"{user}:{password}"


def _private_key(lines: list[str]) -> Secret:
    body = "\n".join(lines)
    return f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----", body


#: One strategy per built-in pattern, by the pattern's name.
SECRETS: Final[dict[str, st.SearchStrategy[Secret]]] = {
    "bearer token": st.builds(_bearer, _text(_B64URL + "._~+/", 16, 60)),
    "password, token, secret or key pair": st.builds(
        _pair,
        st.sampled_from(["password", "PASSWORD", "db_password", "token", "api_key", "secret", "access_key"]),
        st.sampled_from(["=", ": ", "=", '": "']),
        _text(_VALUE, 8, 40),
    ),
    "AWS access key id": st.builds(_aws, _text(string.ascii_uppercase + string.digits, 16, 16)),
    "JSON Web Token": st.builds(_jwt, _text(_B64URL, 10, 40), _text(_B64URL, 10, 80), _text(_B64URL, 16, 60)),
    "URL with credentials": st.builds(
        _url,
        st.sampled_from(["postgres", "postgresql", "redis", "https", "mysql", "amqp"]),
        _text(string.ascii_lowercase, 6, 12),
        _text(string.ascii_letters + string.digits, 10, 24),
    ),
    "private key block": st.builds(_private_key, st.lists(_text(_B64, 64, 64), min_size=1, max_size=6)),
}

#: Words that carry a line's meaning (no digit: they are kept by the masking).
WORDS: Final = (
    "worker", "refused", "cannot", "reach", "upstream", "after", "tries", "request", "from", "address",
    "failed", "config", "missing", "at", "id", "host", "timeout", "connecting", "to", "pod",
)  # fmt: skip


def _has_digit(token: str) -> bool:
    return any(c.isdigit() for c in token)


_hex = st.from_regex(r"[0-9a-f]{3,8}", fullmatch=True).filter(_has_digit)
_mixed = st.from_regex(r"[a-z0-9]{2,10}", fullmatch=True).filter(
    lambda t: _has_digit(t) and any(c.isalpha() for c in t)
)
_number = st.integers(min_value=0, max_value=10**9).map(str)
_ipv4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda parts: ".".join(map(str, parts)))
_address = st.tuples(_ipv4, st.integers(1, 65535)).map(lambda pair: f"{pair[0]}:{pair[1]}")
_uuid = st.uuids().map(str)
_short_id = st.tuples(_hex, _hex).map("-".join)  # 3fa9c2d1-7b2e
_pod = (
    st.from_regex(r"[bcdfghjklmnpqrstvwxz2456789]{5}", fullmatch=True)
    .filter(_has_digit)
    .map(lambda suffix: f"swarm-worker-{suffix}")
)

#: Ids that vary from one Pod to another, by kind.
IDS: Final[dict[str, st.SearchStrategy[str]]] = {
    "hex": _hex,
    "mixed": _mixed,
    "number": _number,
    "ipv4": _ipv4,
    "address": _address,
    "uuid": _uuid,
    "short id": _short_id,
    "pod": _pod,
}
#: One line's shape: words, and slots (by kind) where an id goes.
shapes = st.lists(
    st.one_of(st.sampled_from(WORDS), st.sampled_from(sorted(IDS)).map(lambda kind: "{" + kind + "}")),
    min_size=2,
    max_size=10,
).filter(lambda parts: any(p.startswith("{") for p in parts))


def fill(shape: list[str], data: st.DataObject) -> str:
    """One Pod's line of ``shape``: each slot filled with a fresh id of its kind."""
    return " ".join(data.draw(IDS[part[1:-1]]) if part.startswith("{") else part for part in shape)
